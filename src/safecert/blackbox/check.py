"""``safecert verify`` for kinds "blackbox" and "sequential": re-derive the claim from
``parameters`` and the episode store, never from ``result``.

Checks, each reported separately (a failing one names both values):

1. **inputs** — every input file (and the reference policy's files) (config, policy artifacts, wrapper artifacts, env module) is
   re-hashed; the config file, parsed again, gives exactly ``parameters`` (for a re-judged
   certificate: up to the new budget and p*, and the original ones equal ``result.rejudged``);
2. **evidence** — the store's canonical rows digest equals ``inputs.evidence``; every record's seed
   is the one derived from ``parameters.seed``; the cells in the store are exactly the family's
   (rebuilt from ``parameters.envelope``: no dropped, no extra cell) and each holds exactly
   episodes ``0 … N-1`` (sequential: N is the decision point τ, where the rule, replayed on the
   stored outcomes in index order, stops: :func:`~safecert.stats.sequential.stopping_index`; a
   row past τ, or one short of it, fails); declared and space
   observation ranges are recomputed from the config and the environment;
3. **judgement** — the whole result (family size, δ', every count, bound, decision, KPI, ODD
   entry; sequential stopping decisions) is rebuilt by the same builder certify used and compared
   field by field, with the verdict; independently, each fixed-N Clopper–Pearson bound is recomputed
   with SciPy's Beta quantile;
4. **resimulation** (``--resimulate K``) — K stored episodes chosen at random are run again from
   their seeds with the recorded policy and environment; any differing outcome fails.

What this proves and does not prove: see ``docs/threat-model.md``.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from safecert.audit import Evidence, check_file_digests, locate_evidence, locate_input
from safecert.blackbox.certify import blackbox_result
from safecert.blackbox.config import RunConfig, certified_parameters, load_run_config
from safecert.blackbox.grid import Family
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord, episode_seed
from safecert.blackbox.plan import episode_limit, kpi_ranges, runs_python_code
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import BlackboxCertificate, Certificate, SequentialCertificate
from safecert.config import parse_model
from safecert.errors import ConfigError, DataError
from safecert.verification import VerificationReport


def check(cert: Certificate, evidence: Evidence) -> VerificationReport:
    """Re-derive a black-box or sequential certificate (module docstring)."""
    if not isinstance(cert, BlackboxCertificate | SequentialCertificate):
        raise DataError(f"kind {cert.kind!r} is not black-box", field="certificate.kind")
    report = VerificationReport(cert.kind)
    try:
        config = parse_model(RunConfig, cert.parameters, prefix="parameters")
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    root = Path(evidence.inputs_dir) if evidence.inputs_dir else Path(cert.inputs.root)
    check_file_digests(cert, evidence, report)
    _check_trust(cert, config, report)
    # verify runs the inputs' code (environment, --resimulate's policy) isolated, whatever the
    # certificate says: trust = "in-process" was the certifier's choice, never the auditor's
    config = config.model_copy(update={"trust": "isolated"})
    report.equal("seed = parameters.seed", config.seed, cert.seed)
    _check_config_file(cert, config, evidence, report)
    family = Family.of(config.envelope, config.spec.confidence)
    store_entries = [e for e in cert.inputs.evidence if e.role == "episodes"]
    if len(store_entries) != 1 or store_entries[0].digest_of != "rows":
        report.add("episode store", False, "inputs.evidence names no episode store (role episodes)")
        return report
    store_path = locate_evidence(store_entries[0], evidence)
    if not store_path.is_file():
        raise DataError(
            f"{store_path} does not exist",
            field="data",
            fix="pass --data RUN_DIR (the folder safecert certify wrote)",
        )
    with EpisodeStore(store_path, create=False) as store:
        rows = store.rows_sha256()
        if not report.equal("episode store rows sha256", rows, store_entries[0].sha256):
            return report  # not the certified evidence: nothing of the inputs is run on it
        records = store.records()
        if not _check_coverage(cert, config, family, records, report):
            return report
        _check_fixed_ranges(config, family, root, store.get_meta("obs_ranges"), report)
        limit = episode_limit(config, root) if config.kpis.cost is None else None
        cost_range, return_range = kpi_ranges(config, limit)
        if isinstance(cert, SequentialCertificate):
            from safecert.blackbox.sequential import sequential_result

            seq_verdict, seq_fresh = sequential_result(
                config, family, store, cost_range=cost_range, return_range=return_range
            )
            report.compare_documents("result", seq_fresh, cert.result)
            report.verdict_check(seq_verdict, cert.verdict)
        else:
            verdict, fresh = blackbox_result(
                config,
                family,
                records,
                cost_range=cost_range,
                return_range=return_range,
                obs_ranges=store.get_meta("obs_ranges"),
                rejudged=cert.result.rejudged,
            )
            report.compare_documents("result", fresh, cert.result)
            report.verdict_check(verdict, cert.verdict)
            _check_bounds_scipy(cert, records, family, report)
        if evidence.resimulate > 0:
            _resimulate(cert, config, family, root, store, evidence.resimulate, report)
    return report


def _check_fixed_ranges(
    config: RunConfig, family: Family, root: Path, stored: dict | None, report: VerificationReport
) -> None:
    """Declared and space observation ranges are recomputed from the config and the environment
    (estimated ones come from the reference policy's rollouts and are covered by the store's
    digest); a run that needed no ranges must have stored none."""
    from safecert.blackbox.ranges import fixed_ranges
    from safecert.blackbox.rollout import make_base_env

    needed = any(c.get("obs_noise", 0.0) > 0 for c in family.cells)
    if not needed or config.envelope.obs_ranges == "estimate":
        report.add(
            "observation ranges: none needed" if not needed else "observation ranges: estimated",
            stored is None if not needed else (stored or {}).get("source") == "estimated",
            f"stored: {None if stored is None else stored.get('source')}",
        )
        return
    env = make_base_env(config, root)
    try:
        fresh = fixed_ranges(config, env.observation_space)
    finally:
        env.close()
    report.equal(f"observation ranges ({fresh['source']}), recomputed", fresh, stored)


def _check_trust(cert: Certificate, config: RunConfig, report: VerificationReport) -> None:
    """Say where the certifier ran the policy's and environment's code; when any of it is
    ``python:`` code, the inputs must list the config folder's importable files (a certificate
    without that listing could not show that no module was added next to the policy)."""
    where = (
        "in safecert's own rollout process (trust = in-process, the certifier's opt-in)"
        if config.trust == "in-process"
        else "in isolated worker processes"
    )
    report.add("trust: policy and environment code ran", True, where)
    if runs_python_code(config):
        listed = any(e.digest_of == "listing" and e.role == "code" for e in cert.inputs.files)
        report.add(
            "python: code: the folder's importable files are certified",
            listed,
            "listing present" if listed else "inputs.files has no code listing",
        )


def _check_config_file(
    cert: Certificate, config: RunConfig, evidence: Evidence, report: VerificationReport
) -> None:
    """The hashed config file says what ``parameters`` say (a re-judged certificate changes only
    the budget and p*, and records the original ones)."""
    entries = [e for e in cert.inputs.files if e.role == "config"]
    if len(entries) != 1:
        report.add("config file", False, "inputs.files names no config (role config)")
        return
    path = locate_input(cert, entries[0], evidence)
    if not path.is_file():
        return  # the digest check above already failed, naming the file
    original, _, _ = load_run_config(path)
    claimed = dict(cert.parameters)
    rejudged = getattr(cert.result, "rejudged", None)
    if rejudged is not None:
        spec = dict(claimed["spec"])
        report.equal(
            "result.rejudged (budget, p*) = the config's spec",
            [original.spec.budget, original.spec.p_star],
            [rejudged.budget, rejudged.p_star],
        )
        spec.update(budget=original.spec.budget, p_star=original.spec.p_star)
        claimed["spec"] = spec
    report.compare_documents("parameters", certified_parameters(original), claimed)


def _check_coverage(
    cert: Certificate,
    config: RunConfig,
    family: Family,
    records: list[EpisodeRecord],
    report: VerificationReport,
) -> bool:
    """The store holds the family's cells and nothing else, each with its seeded episodes
    ``0 … N-1``, no gap, no duplicate: fixed N = ``parameters.episodes``; sequential N = the
    decision point where the rule, replayed over the cell's stored outcomes, stops."""
    by_cell: dict[int, list[EpisodeRecord]] = {}
    bad_seeds = []
    for r in records:
        by_cell.setdefault(r.cell, []).append(r)
        if r.seed != episode_seed(config.seed, r.cell, r.index):
            bad_seeds.append(f"{r.cell}:{r.index}")
    report.add(
        "episode seeds derived from parameters.seed",
        not bad_seeds,
        f"{len(bad_seeds)} differ, e.g. {', '.join(bad_seeds[:3])}" if bad_seeds else "",
    )
    ok = report.equal("cells in the store = the family", sorted(by_cell), list(range(family.size)))
    expected = _expected_episodes(cert, config, family)
    for cell, cell_records in sorted(by_cell.items()):
        good, detail = _cell_complete(cell_records, expected)
        report.add(f"cell {cell} episodes", good, detail)
        ok = ok and good
    return ok and not bad_seeds


ExpectedEpisodes = Callable[[list[EpisodeRecord]], tuple[int, str]]


def _expected_episodes(cert: Certificate, config: RunConfig, family: Family) -> ExpectedEpisodes:
    """How many episodes a complete cell holds, from its records: fixed N, or the decision point τ
    where the rule, replayed over the cell's outcomes in index order, stops (the store holds
    exactly the episodes the decision read; one that has not stopped is incomplete)."""
    if not isinstance(cert, SequentialCertificate):
        return lambda _records: (config.episodes, "parameters.episodes")
    from safecert.blackbox.judge import failure_flags
    from safecert.blackbox.sequential import build_rule, sequential_settings
    from safecert.stats.sequential import stopping_index

    rule = build_rule(config, family, sequential_settings(config))

    def expected(records: list[EpisodeRecord]) -> tuple[int, str]:
        outcomes = failure_flags(records, config.spec.budget)[2].astype(np.int64)
        tau = stopping_index(rule, outcomes)
        if tau is None:
            return len(records) + 1, "the replayed rule has not stopped; it needs at least"
        return tau, "the replayed rule stops at"

    return expected


def _cell_complete(records: list[EpisodeRecord], expected: ExpectedEpisodes) -> tuple[bool, str]:
    """(ok, detail): the cell's indices are exactly 0 … N-1, N as ``expected`` says."""
    indices = [r.index for r in records]
    if indices != list(range(len(indices))):
        n, seen = len(indices), Counter(indices)
        missing = [i for i in range(n) if i not in seen]
        twice = sorted(i for i, k in seen.items() if k > 1)
        beyond = sorted(i for i in seen if not 0 <= i < n)
        return False, (
            f"{n} episodes, not exactly 0…{n - 1}: missing {_few(missing)}; "
            f"duplicated {_few(twice)}; outside {_few(beyond)}"
        )
    n, source = expected(records)
    return len(indices) == n, f"{len(indices)} episodes 0…{len(indices) - 1}; {source}: {n}"


def _few(values: list[int]) -> str:
    return ", ".join(map(str, values[:5])) + (", …" if len(values) > 5 else "") or "none"


def _cp_upper_scipy(k: int, n: int, delta: float) -> float:
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(1.0 - delta, k + 1, n - k))


def _check_bounds_scipy(
    cert: BlackboxCertificate,
    records: list[EpisodeRecord],
    family: Family,
    report: VerificationReport,
) -> None:
    """An independent route to each cell's upper bound: SciPy's Beta quantile, from raw counts."""
    budget = cert.parameters["spec"]["budget"]
    failures = np.zeros(family.size, dtype=int)
    totals = np.zeros(family.size, dtype=int)
    for r in records:
        totals[r.cell] += 1
        failures[r.cell] += (not r.goal) or r.cost > budget
    claimed = {i: c.upper_bound for i, c in enumerate(cert.result.cells)}
    claimed[family.stage1] = cert.result.stage1.upper_bound
    worst = 0.0
    for cell, bound in claimed.items():
        upper = _cp_upper_scipy(int(failures[cell]), int(totals[cell]), family.delta_cell)
        worst = max(worst, abs(upper - bound) / max(upper, 1e-300))
    # SciPy's Boost quantile is itself off by 1.4e-9 relative at N = 10^7, k = 0 (measured against
    # 50-digit arithmetic); the bit-for-bit re-derivation of the result is the exact check
    report.add(
        "Clopper–Pearson bounds (SciPy, independent)",
        worst <= 1e-7,
        f"largest relative difference {worst:.2e} over {len(claimed)} cells",
    )


def _resimulate(
    cert: Certificate,
    config: RunConfig,
    family: Family,
    root: Path,
    store: EpisodeStore,
    count: int,
    report: VerificationReport,
) -> None:
    """Re-run ``count`` stored episodes chosen at random; each must reproduce its record."""
    from safecert.blackbox.backends import RunContext, Worker
    from safecert.blackbox.oracles import parse_oracle_spec

    records = store.records()
    draw = secrets.randbits(32)
    rng = np.random.default_rng(draw)
    chosen = rng.choice(len(records), size=min(count, len(records)), replace=False)
    oracle = parse_oracle_spec(config.policy, base_dir=root, batched=config.batched)
    ranges = store.get_meta("obs_ranges")
    ctx = RunContext(
        config.model_copy(update={"batch_size": 1}),
        str(root),
        family.cells,
        None if ranges is None else tuple(ranges["range"]),
        oracle,
    )
    worker = Worker(ctx)
    differ = []
    try:
        for i in sorted(int(c) for c in chosen):
            r = records[i]
            again = worker.run([EpisodeJob(r.cell, r.index, r.seed)])[0]
            if not _same_outcome(again, r):
                differ.append(
                    f"{r.cell}:{r.index} stored (ret {r.ret!r}, cost {r.cost!r}, goal "
                    f"{r.goal}), rerun (ret {again.ret!r}, cost {again.cost!r}, goal "
                    f"{again.goal})"
                )
    finally:
        worker.close()
    report.add(
        f"resimulated {len(chosen)} episodes (draw {draw})",
        not differ,
        "; ".join(differ[:3]) if differ else "every outcome reproduced",
    )


def _same_outcome(a: EpisodeRecord, b: EpisodeRecord) -> bool:
    return (
        math.isclose(a.ret, b.ret, rel_tol=1e-9, abs_tol=1e-9)
        and math.isclose(a.cost, b.cost, rel_tol=1e-9, abs_tol=1e-9)
        and (a.goal, a.terminated, a.truncated, a.steps, a.failure_reason)
        == (b.goal, b.terminated, b.truncated, b.steps, b.failure_reason)
    )
