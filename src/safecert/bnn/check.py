"""``safecert verify`` for ``bnn`` certificates: re-derive the claim, never trust ``result``.

Everything is recomputed from ``parameters`` (the complete run configuration, validated strictly:
every key present, nothing coerced) and the evidence, with the same code that wrote the
certificate (:mod:`safecert.bnn.certify`), and compared with what ``result`` states; a difference
is one failing check showing both values:

* **inputs** — every recorded digest is re-hashed (config TOML, the user's policy file,
  ``policy.npz``/``.onnx``/``.pt`` next to the certificate); the copy must be the user's policy file byte for byte,
  or, for ``benchmark:NAME``, hold exactly the packaged weights.
* **parameters** — where the run read a config file (``inputs.files`` role ``config``), that file,
  parsed and checked again (:func:`~safecert.bnn.setup.load_config`), must give ``parameters``
  key for key, except the keys the command line sets over it
  (:data:`~safecert.bnn.setup.COMMAND_LINE_KEYS`); so a search setting such as
  ``verifier.closure_splits`` cannot be rewritten under a hashed config. A run of ``--benchmark``
  or of a config given in Python has no file: its ``parameters`` are the record (the report says so).
* **plan** — ``seed``, ``system`` and ``solver`` as in ``parameters``; ``verifier_margin`` must be
  the margin the verifier proves with (:data:`~safecert.bnn.verifier.DEFAULT_MARGIN`; the
  config has no margin key), and that recorded margin is what the MILPs are re-run with.
* **ε** — the search is replayed (:func:`~safecert.bnn.search.epsilon_sequence` on the ladder, or
  the one requested ε, that ``parameters`` imply) with the verdicts of ``result.search``: the ε of
  every row must be the one the search would have tried next, and the certified ε is the largest
  SAFE row's. The ε record (value, unit, ε/σ, absolute half-width per layer, from the Bayesian spec
  that ``parameters.bayesian`` gives for the policy) and ``acceptance_probability`` are recomputed
  for that ε; ``reason`` and ``iterations`` must be those of its row (the reason followed by
  those of the rows a wall-clock guard cut and, where the replayed search would have tried another
  ε, the guard that stopped it: :func:`~safecert.bnn.certify.search_outcome`).
* **machine-dependent** — a row is ``machine_dependent`` exactly when its reason is a wall-clock
  guard's (and then UNKNOWN); ``result.machine_dependent`` is re-derived from the rows and from
  whether the search stopped before its plan was done. Every budget that decides a result is work
  (``parameters.limits.max_iterations``, ``solver_nodes``, …), so where no guard fired the run is
  reproducible on any machine; where one fired the certificate says so and claims nothing more.
* **SAFE** — the system is rebuilt from ``parameters.dynamics`` and ``parameters.sets`` (embedded
  in the certificate: no packaged-benchmark lookup), the weight box from the policy copy, the spec
  and the derived ε; the three MILP checks (closure, initial, unsafe) are re-run on the stored
  invariant at the recorded margin with the *other* solver (SCIP when HiGHS found the proof, and
  vice versa), each within 900 s (a timeout is a failing check, not a hang), and must all be
  infeasible (``checks`` must say so); and 10^5 sampled closure checks
  (states of Inv, weights of the box including random vertices and both corners, float64), plus
  samples of X0 and X_u, must find no violation. Both results are reported. The verdict is
  recomputed: SAFE only when a row says SAFE and the proof re-runs.
* **UNKNOWN** claims nothing: inputs, plan, ε, acceptance probability and the verdict (no SAFE
  row) are checked; the checks of a run cut short cannot be re-derived.
* **witnesses** — a row ended by a trajectory showing that no invariant exists holds it (start and
  per-step weights); it is replayed in float64 under that row's weight box
  (:func:`~safecert.bnn.witness.replay_witness`: start in X0, every weight in the box, X_u or out
  of B at the end) and the row's reason must be the replay's own description; a row whose reason
  says no invariant exists without a trajectory fails.

Descriptive only (history of the run, not re-derivable without re-running CEGIS): counterexamples,
verifier calls, sampled violations, spurious witnesses, runtimes. A malformed ``parameters`` or
missing evidence is one :class:`~safecert.errors.DataError` line (exit 2), as is a certificate
from before work-unit budgets (``parameters.limits.clock``); a mismatch is a failing check (exit 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from safecert.audit import Evidence, check_file_digests, locate_evidence, locate_input
from safecert.bnn.cegis import WALL_CLOCK_GUARD
from safecert.bnn.certify import POLICY_FILE, check_records, epsilon_record, search_outcome
from safecert.bnn.config import REMOVED_LIMITS, BnnConfig, bayesian_spec
from safecert.bnn.dynamics import System
from safecert.bnn.networks import ReluNetwork, load_policy, read_policy_file
from safecert.bnn.result import BnnResult, SearchRow
from safecert.bnn.sampling import acceptance_probability
from safecert.bnn.search import SearchPlan, epsilon_sequence, search_plan, stop_reason
from safecert.bnn.setup import COMMAND_LINE_KEYS, load_config
from safecert.bnn.spec import BayesianSpec, Epsilon, WeightBox
from safecert.bnn.system import build_system
from safecert.bnn.verifier import DEFAULT_MARGIN, Proof
from safecert.bnn.witness import NO_INVARIANT, replay_witness
from safecert.certificate import BnnCertificate, Certificate
from safecert.config import validation_to_config_error
from safecert.document import FileDigest
from safecert.errors import ConfigError, DataError
from safecert.verification import VerificationReport

#: sampled closure checks (states of Inv × weights of the box, a quarter at random vertices and
#: half at the two corners) replayed in float64 by ``safecert verify``
CLOSURE_SAMPLES = 100_000
#: the re-proof uses the solver that did not find the proof
OTHER_SOLVER = {"highs": "scip", "scip": "highs"}
#: deadline of each re-proof MILP: a re-proof that does not finish is a failing check ("timeout"
#: where the certificate says "infeasible"), never a hang
REPROOF_TIME_LIMIT_S = 900.0


def check(
    cert: Certificate, evidence: Evidence, *, closure_samples: int = CLOSURE_SAMPLES
) -> VerificationReport:
    """Re-derive a ``bnn`` certificate (module docstring); ``ok`` only if every check matched."""
    if not isinstance(cert, BnnCertificate):
        raise DataError(f"kind {cert.kind!r} is not bnn", field="certificate.kind")
    report = VerificationReport("bnn")
    r = cert.result
    cfg = parameters_config(cert.parameters)
    copy_entry, policy_path = policy_copy(cert, evidence)
    check_file_digests(cert, evidence, report)
    check_config_file(cert, evidence, report)
    mean = read_policy_file(policy_path)
    check_policy_source(cfg, cert, copy_entry, mean, report)
    try:
        bench = build_system(cfg.system, cfg.dynamics, cfg.sets)
    except ConfigError as exc:
        raise _as_data_error(exc) from None
    spec = policy_spec(cfg, bench, mean, report, sigma_network(cfg, cert, evidence, report))
    if spec is None:
        return report  # a policy that does not fit: nothing else can be derived

    report.equal("seed", cfg.seed, cert.seed)
    report.equal("system", cfg.system, r.system)
    report.equal("solver", cfg.solver, r.solver)
    report.equal("verifier_margin", DEFAULT_MARGIN, r.verifier_margin)

    plan = search_plan_of(cfg)
    eps, shown, certified, nxt = replay_search(plan, r.search, report)
    row = r.search[shown] if shown is not None else None
    report.compare_documents("epsilon", epsilon_record(eps, spec), r.epsilon)
    box = spec.box(mean, eps)
    report.equal(
        "acceptance_probability", acceptance_probability(box, spec), r.acceptance_probability
    )
    check_guards(r.search, report)
    reason, machine_dependent = search_outcome(
        r.search, shown, None if nxt is None else stop_reason(plan, nxt)
    )
    report.equal("reason", reason, r.reason)
    report.equal("machine_dependent", machine_dependent, r.machine_dependent)
    report.equal("iterations", row.iterations if row is not None else 0, r.iterations)
    check_witnesses(r.search, bench, mean, spec, report)
    g = invariant_of(r, cfg, bench, report)

    proved = False
    if certified or cert.verdict == "SAFE":
        proved = check_proof(bench, box, g, r, report, closure_samples)
    report.verdict_check("SAFE" if certified and proved else "UNKNOWN", cert.verdict)
    return report


# ---- parameters ---------------------------------------------------------------------------------
def parameters_config(parameters: dict[str, Any]) -> BnnConfig:
    """``parameters`` as the run's :class:`BnnConfig`: every key present (no default fills a gap),
    nothing coerced; the first problem is one DataError naming ``parameters.KEY``. A key that
    was removed (``limits.clock``: budgets were seconds then) names the certificate as old."""
    limits = parameters.get("limits") if isinstance(parameters, dict) else None
    for key, (what, _fix) in REMOVED_LIMITS.items():
        if isinstance(limits, dict) and key in limits:
            raise DataError(
                f"a certificate from before work-unit budgets ({key} {what})",
                field=f"parameters.limits.{key}",
                fix="re-run safecert bnn verify with this version to regenerate it",
            )
    _require_every_key(BnnConfig, parameters, "parameters")
    try:
        return BnnConfig.model_validate(parameters, strict=True)
    except ValidationError as exc:
        raise DataError(
            str(validation_to_config_error(exc, "parameters")),
            fix="regenerate the certificate with safecert",
        ) from None


def check_config_file(cert: BnnCertificate, evidence: Evidence, report: VerificationReport) -> None:
    """The hashed config file, read again, gives ``parameters`` but for the command line's keys
    (module docstring); with no config file, one passing check says ``parameters`` are the record."""
    entries = [e for e in cert.inputs.files if e.role == "config"]
    if not entries:
        report.add(
            "parameters",
            True,
            "no config file recorded (--benchmark, or a config given in Python): the "
            "certificate's parameters are the run's record",
        )
        return
    if len(entries) > 1:
        report.add("parameters", False, f"inputs.files names {len(entries)} config files, not 1")
        return
    path = locate_input(cert, entries[0], evidence)
    if not path.is_file():
        return  # the digest check already failed, naming the file
    try:
        source = load_config(path).model_dump(mode="json")
    except ConfigError as exc:
        report.add("parameters", False, f"{entries[0].path} no longer loads: {exc}")
        return
    claimed = cert.parameters
    for key in COMMAND_LINE_KEYS:  # set by an option: the file does not decide it
        *parents, leaf = key.split(".")
        src: Any = source
        given: Any = claimed
        for part in parents:
            src, given = src.get(part), given.get(part) if isinstance(given, dict) else None
        if isinstance(src, dict) and isinstance(given, dict) and leaf in given:
            src[leaf] = given[leaf]
    report.compare_documents("parameters", source, claimed)


def _require_every_key(model: type[BaseModel], data: Any, where: str) -> None:
    if not isinstance(data, dict):
        return  # the type error is validation's to report
    for name, info in model.model_fields.items():
        if name not in data:
            raise DataError(
                "is missing", field=f"{where}.{name}", fix="a certificate's parameters are complete"
            )
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            _require_every_key(sub, data[name], f"{where}.{name}")


def _as_data_error(exc: ConfigError) -> DataError:
    """A config problem found while re-deriving from ``parameters``, named under ``parameters``."""
    text = str(exc)
    if exc.field and text.startswith(f"{exc.field}: "):
        text = text[len(exc.field) + 2 :]
    return DataError(text, field=f"parameters.{exc.field or 'bayesian'}")


def policy_spec(
    cfg: BnnConfig,
    bench: System,
    mean: ReluNetwork,
    report: VerificationReport,
    sigmas: ReluNetwork | None = None,
) -> BayesianSpec | None:
    """The Bayesian spec ``parameters.bayesian`` gives for the policy (as the run derived it), or
    None with a failing check when the policy does not fit the system or the spec."""
    if (mean.in_dim, mean.out_dim) != (bench.state_dim, bench.n_actions):
        report.add(
            "policy fits the system",
            False,
            f"the policy copy maps {mean.in_dim} → {mean.out_dim}, {bench.name} needs "
            f"{bench.state_dim} → {bench.n_actions}",
        )
        return None
    try:
        return bayesian_spec(cfg, mean, sigmas)
    except ConfigError as exc:
        report.add("parameters.bayesian fits the policy", False, str(exc))
        return None


def search_plan_of(cfg: BnnConfig) -> SearchPlan:
    try:
        return search_plan(cfg)
    except ConfigError as exc:
        raise _as_data_error(exc) from None


# ---- evidence -----------------------------------------------------------------------------------
def policy_copy(cert: BnnCertificate, evidence: Evidence) -> tuple[FileDigest, Path]:
    """The ``policy-copy`` evidence entry and where its file is; DataError when it is absent."""
    entries = [e for e in cert.inputs.evidence if e.role == "policy-copy"]
    if len(entries) != 1:
        raise DataError(
            f"{len(entries)} policy-copy entries (need exactly one)",
            field="certificate.inputs.evidence",
            fix="regenerate the certificate with safecert",
        )
    return entries[0], _present(entries[0], evidence)


def _present(entry: FileDigest, evidence: Evidence) -> Path:
    """Where the evidence file ``entry`` is now; DataError when it is not there."""
    path = locate_evidence(entry, evidence)
    if not path.is_file():
        raise DataError(
            f"{path} does not exist",
            field="evidence",
            fix=f"keep {entry.path} next to the certificate or pass --data DIR",
        )
    return path


def sigma_network(
    cfg: BnnConfig, cert: BnnCertificate, evidence: Evidence, report: VerificationReport | None
) -> ReluNetwork | None:
    """The per-weight σ network of the ``sigma-copy`` evidence (None when σ is per layer); the
    copy must be the recorded ``sigma`` input byte for byte. A σ file named in ``parameters``
    without its copy is one DataError line."""
    if cfg.bayesian.sigma_file is None:
        return None
    entries = [e for e in cert.inputs.evidence if e.role == "sigma-copy"]
    files = [e for e in cert.inputs.files if e.role == "sigma"]
    if len(entries) != 1 or len(files) != 1:
        raise DataError(
            f"{len(entries)} sigma-copy and {len(files)} sigma entries (need one each)",
            field="certificate.inputs",
            fix="regenerate the certificate with safecert",
        )
    path = _present(entries[0], evidence)
    if report is not None:
        report.equal("sigma-copy is the sigma file", files[0].sha256, entries[0].sha256)
    return read_policy_file(path)


def check_policy_source(
    cfg: BnnConfig,
    cert: BnnCertificate,
    copy_entry: FileDigest,
    mean: ReluNetwork,
    report: VerificationReport,
) -> None:
    """The policy copy is the policy ``parameters.policy`` names: the packaged weights for
    ``benchmark:NAME``, else the bytes of the recorded policy file."""
    if cfg.policy.startswith("benchmark:"):
        name = cfg.policy.removeprefix("benchmark:")
        try:
            packaged = load_policy(name)
        except ConfigError as exc:
            raise _as_data_error(exc) from None
        same = packaged.widths == mean.widths and all(
            np.array_equal(a, b)
            for pa, pb in zip(packaged.layers, mean.layers, strict=True)
            for a, b in zip(pa, pb, strict=True)
        )
        report.add(
            "policy-copy is the packaged policy",
            same,
            f"{POLICY_FILE} {'equals' if same else 'differs from'} the packaged {name} weights",
        )
        return
    files = [e for e in cert.inputs.files if e.role == "policy"]
    if len(files) != 1:
        report.add("policy file recorded", False, f"{len(files)} inputs with role policy")
        return
    report.equal("policy-copy is the policy file", files[0].sha256, copy_entry.sha256)


# ---- ε ------------------------------------------------------------------------------------------
def replay_search(
    plan: SearchPlan, rows: list[SearchRow], report: VerificationReport
) -> tuple[Epsilon, int | None, bool, Epsilon | None]:
    """Replay the ε search with the rows' verdicts: the ε each row must hold, checked. Returns the
    ε the certificate must describe (the largest SAFE row's, else the last row's, else the first
    planned), the index of that row, whether a row says SAFE, and the ε the search would have
    tried after the rows (None when its plan was done: else its wall-clock guard stopped it)."""
    seq = epsilon_sequence(plan.ladder, plan.bisection_steps)
    expected: list[Epsilon] = []
    nxt = next(seq, None)
    for row in rows:
        if nxt is None:
            break
        expected.append(nxt)
        try:
            nxt = seq.send(row.verdict == "SAFE")
        except StopIteration:
            nxt = None
    report.compare_documents(
        "search",
        [{"epsilon": e.value, "unit": _unit(e)} for e in expected],
        [{"epsilon": row.epsilon, "unit": row.unit} for row in rows],
    )
    safe = [i for i, row in enumerate(rows[: len(expected)]) if row.verdict == "SAFE"]
    if safe:
        i = max(safe, key=lambda k: expected[k].value)
        return expected[i], i, True, nxt
    if expected:
        return expected[-1], len(expected) - 1, False, nxt
    return plan.ladder[0], None, False, nxt


def check_guards(rows: list[SearchRow], report: VerificationReport) -> None:
    """Each row is ``machine_dependent`` exactly when its reason is a wall-clock guard's, and such
    a row certifies nothing (UNKNOWN)."""
    for i, row in enumerate(rows):
        guarded = row.reason.startswith(WALL_CLOCK_GUARD)
        report.equal(f"search[{i}].machine_dependent", guarded, row.machine_dependent)
        if guarded or row.machine_dependent:
            report.equal(f"search[{i}].verdict (wall-clock guard)", "UNKNOWN", row.verdict)


def check_witnesses(
    rows: list[SearchRow],
    bench: System,
    mean: ReluNetwork,
    spec: BayesianSpec,
    report: VerificationReport,
) -> None:
    """Every row that holds a witness: replayed in float64 under that row's weight box
    (:func:`~safecert.bnn.witness.replay_witness`: start in X0, every weight in the box, X_u or
    out of B at the end), the row UNKNOWN, its reason the replay's own description. A row whose
    reason says that no invariant exists must hold a witness."""
    for i, row in enumerate(rows):
        name = f"search[{i}].witness"
        if row.witness is None:
            if row.reason.startswith(NO_INVARIANT):
                report.add(
                    name, False, "the reason says no invariant exists; no trajectory shows it"
                )
            continue
        box = spec.box(mean, Epsilon(row.epsilon, row.unit == "sigma"))
        steps = [
            ReluNetwork.from_lists(
                [layer.model_dump() for layer in step],
                name=f"certificate.result.search[{i}].witness.weights[{t}]",
            ).layers
            for t, step in enumerate(row.witness.weights)
        ]
        shapes = [(w.shape, b.shape) for w, b in box.lower]
        wrong = next(
            (t for t, step in enumerate(steps) if [(w.shape, b.shape) for w, b in step] != shapes),
            None,
        )
        if wrong is not None or len(row.witness.x0) != bench.state_dim:
            where = f"step {wrong}'s layers" if wrong is not None else "x0"
            report.add(name, False, f"does not replay: {where} do not fit the policy and system")
            continue
        witness = replay_witness(bench, box, np.array(row.witness.x0), steps)
        if witness is None:
            report.add(
                name,
                False,
                "does not replay: not from X0 into X_u (or out of B) with every weight in the box",
            )
            continue
        report.equal(f"{name} (reason)", witness.describe(), row.reason)
        report.equal(f"search[{i}].verdict", "UNKNOWN", row.verdict)


def _unit(eps: Epsilon) -> str:
    return "sigma" if eps.in_sigma else "absolute"


# ---- invariant and proof ------------------------------------------------------------------------
def invariant_of(
    r: BnnResult, cfg: BnnConfig, bench: System, report: VerificationReport
) -> ReluNetwork | None:
    """The stored invariant ``g``, its widths checked against ``parameters.invariant.hidden``."""
    if r.invariant is None:
        return None
    g = ReluNetwork.from_lists(
        [layer.model_dump() for layer in r.invariant.layers], name="certificate.result.invariant"
    )
    report.equal("invariant.hidden", list(cfg.invariant.hidden), r.invariant.hidden)
    report.equal("invariant.widths", [bench.state_dim, *cfg.invariant.hidden, 1], list(g.widths))
    return g


def check_proof(
    bench: System,
    box: WeightBox,
    g: ReluNetwork | None,
    r: BnnResult,
    report: VerificationReport,
    closure_samples: int,
) -> bool:
    """Re-prove the three conditions of Def. 1 on ``g`` over ``box`` with the *other* MILP solver
    (SCIP when HiGHS found the proof, HiGHS when SCIP did) at the recorded margin, each MILP
    within :data:`REPROOF_TIME_LIMIT_S`;
    and replay ``closure_samples`` sampled closure checks in float64 (states of Inv, weights of
    the box including its vertices and corners; X0 and X_u samples too). True when the re-proof
    holds and no sample violates a condition. Both are reported."""
    from safecert.bnn.cegis import SamplingFalsifier
    from safecert.bnn.verifier import Verifier

    if g is None:
        report.add("invariant", False, "SAFE needs an invariant; the certificate has none")
        return False
    margin = r.verifier_margin
    if g.in_dim != bench.state_dim or g.out_dim != 1 or r.solver not in ("highs", "scip"):
        return False  # already reported by invariant.widths / solver
    if not (np.isfinite(margin) and margin >= 0):
        return False  # already reported by verifier_margin; no sound query uses it
    other = OTHER_SOLVER[r.solver]
    verifier = Verifier(bench, box, solver=other, time_limit_s=REPROOF_TIME_LIMIT_S, margin=margin)
    verdict = verifier.check(g)
    report.add(
        "reproof_solver",
        True,
        f"the three conditions re-run with {other} (the proof was found with {r.solver})",
    )
    report.compare_documents("checks", check_records(verdict), r.checks)
    found = SamplingFalsifier(bench, box, np.random.default_rng(0), samples=closure_samples).find(g)
    report.add(
        "sampled_conditions",
        not found,
        f"{closure_samples} sampled states, weights in the box: {len(found)} violations",
    )
    return isinstance(verdict, Proof) and not found
