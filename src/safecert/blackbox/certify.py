"""``safecert certify``: fixed-N CORE-RL certification of a black-box policy (METHODS.md §2).

The run, step by step (each step is a public function so that sequential certification,
rejudging and replay reuse them):

1. :func:`plan_run` — read and validate the config, the policy string and the environment; list the
   grid cells; find the stage-1 (nominal) cell: the grid's own nominal cell when the grid holds
   one (the paper's layout: stage 1 is the (0, 0) cell, judged at δ/M with M = grid cells), else a
   separate nominal cell that joins the family (M = cells + 1).
2. :func:`open_store` — ``DIR/episodes.sqlite``; ``resume`` continues a run of the same config.
3. :func:`make_context` — probe the oracle once on a real initial observation (a wrong URL or a
   model of the wrong input size is one error before any episode),
   estimate the ranges of unbounded observation dimensions when observation noise needs them.
4. :func:`run_jobs` — every (cell, index) not yet stored, stage 1 first; records are committed per
   finished chunk, with a progress bar on stderr.
5. :func:`finish` — judge (:mod:`safecert.blackbox.judge`), write ``certificate.json`` and the
   report (HTML, Markdown, PNG ODD maps).

Verdict: PASS iff stage 1 passes and every grid cell passes; the ODD (``result.odd``) is the set of
passing cells, valid simultaneously with confidence ``spec.confidence``.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from safecert.blackbox.backends import Backend, LocalBackend, RunContext
from safecert.blackbox.config import RunConfig, certified_parameters, load_run_config
from safecert.blackbox.grid import NOMINAL, axes, grid_cells, is_nominal, nominal_cell
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord, make_jobs
from safecert.blackbox.judge import judge_run
from safecert.blackbox.oracles import OracleSpec, make_oracle, parse_oracle_spec
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import Certificate, make_certificate, sha256_file, write_certificate
from safecert.errors import ConfigError


@dataclass(frozen=True)
class RunPlan:
    """A validated run: config, where its paths resolve, its grid and its family."""

    config_path: Path
    config: RunConfig
    base_dir: Path
    config_sha256: str
    oracle: OracleSpec
    cells: tuple[dict[str, Any], ...]  # grid cells, then the separate stage-1 cell if any
    grid_size: int
    stage1_cell: int
    cost_range: tuple[float, float] | None
    return_range: tuple[float, float] | None

    @property
    def needs_obs_ranges(self) -> bool:
        return any(c.get("obs_noise", 0.0) > 0 for c in self.cells)

    def all_jobs(self, done: AbstractSet[tuple[int, int]] = frozenset()) -> list[EpisodeJob]:
        """Every job not in ``done``: stage 1 first, then the grid in order."""
        order = [self.stage1_cell] + [i for i in range(len(self.cells)) if i != self.stage1_cell]
        jobs: list[EpisodeJob] = []
        for cell in order:
            jobs.extend(make_jobs(self.config.seed, cell, self.config.episodes, done))
        return jobs


def plan_run(config_path: Path) -> RunPlan:
    config, base_dir, digest = load_run_config(config_path)
    oracle = parse_oracle_spec(
        config.policy,
        base_dir=base_dir,
        headers=config.headers,
        timeout_s=config.timeout_s,
        retries=config.retries,
        batched=config.batched,
    )
    from safecert.blackbox.rollout import make_base_env

    env = make_base_env(config, base_dir)
    limit = config.max_steps or (env.spec.max_episode_steps if env.spec else None)
    obs_shape = env.observation_space.shape
    env.close()
    cells = grid_cells(config.envelope)
    _check_cells(config, base_dir, cells, obs_shape)
    nominal = [i for i, c in enumerate(cells) if is_nominal(c)]
    stage1 = nominal[0] if nominal else len(cells)
    all_cells = cells if nominal else [*cells, nominal_cell(config.envelope)]
    kpis = config.kpis
    if kpis.cost is not None:
        cost_range = (kpis.cost.lower, kpis.cost.upper)
    elif limit is not None:
        cost_range = (0.0, float(limit) * config.spec.max_step_cost)
    else:
        cost_range = None
    return_range = None if kpis.return_ is None else (kpis.return_.lower, kpis.return_.upper)
    return RunPlan(
        Path(config_path).resolve(),
        config,
        base_dir,
        digest,
        oracle,
        tuple(all_cells),
        len(cells),
        stage1,
        cost_range,
        return_range,
    )


def _check_cells(
    config: RunConfig,
    base_dir: Path,
    cells: list[dict[str, Any]],
    obs_shape: tuple[int, ...] | None,
) -> None:
    """Build every cell's wrapped env once, so that an envelope the environment cannot take
    (no mass to shift, no layouts, an L∞ action adversary on a discrete space) is one ConfigError
    before the run — not an error inside a worker."""
    from safecert.blackbox.rollout import build_cell_env

    ranges = np.ones(obs_shape) if obs_shape else None
    for params in cells:
        if any(v != NOMINAL[k] for k, v in params.items()):
            build_cell_env(config, base_dir, params, ranges, _no_policy).close()


def _no_policy(observations: np.ndarray) -> np.ndarray:  # pragma: no cover - never called
    raise AssertionError("the envelope check runs no episode")


def open_store(plan: RunPlan, out_dir: Path, *, resume: bool) -> EpisodeStore:
    """The run's store; a fresh run refuses a folder that already holds episodes."""
    store = EpisodeStore(Path(out_dir) / "episodes.sqlite")
    previous = store.get_meta("config_sha256")
    if previous is not None and not resume and store.count() > 0:
        store.close()
        raise ConfigError(
            f"{out_dir} already holds a run",
            field="--out",
            fix="pass --resume to continue it, or choose a new --out folder",
        )
    if previous is not None and previous != plan.config_sha256:
        store.close()
        raise ConfigError(
            "the config changed since this run started",
            field="--resume",
            fix="resume with the same config, or start a new --out folder",
        )
    store.set_meta("config_sha256", plan.config_sha256)
    store.set_meta("config_path", str(plan.config_path))
    return store


def make_context(plan: RunPlan, store: EpisodeStore) -> RunContext:
    """Probe the oracle and fix the observation ranges (estimated once, kept in the store)."""
    from safecert.blackbox.rollout import make_base_env

    env = make_base_env(plan.config, plan.base_dir)
    sample, _ = env.reset(seed=plan.config.seed)
    env.close()
    oracle = make_oracle(plan.oracle)
    try:
        oracle.probe(np.asarray(sample, dtype=np.float64)[None])
        ranges = store.get_meta("obs_ranges")
        if ranges is None and plan.needs_obs_ranges:
            from safecert.blackbox.ranges import estimate_ranges

            ranges = estimate_ranges(plan.config, plan.base_dir, oracle.act)
            store.set_meta("obs_ranges", ranges)
    finally:
        oracle.close()
    return RunContext(
        plan.config,
        str(plan.base_dir),
        plan.cells,
        None if ranges is None else tuple(ranges["range"]),
        plan.oracle,
    )


def run_jobs(
    backend: Backend,
    jobs: Sequence[EpisodeJob],
    ctx: RunContext,
    store: EpisodeStore,
    *,
    progress: bool = True,
    commit_every: int = 8,
) -> int:
    """Run ``jobs`` and store each record; returns the number of new records."""
    from safecert.blackbox.progress import RunProgress

    added = 0
    pending: list[EpisodeRecord] = []
    with RunProgress(ctx, jobs, store, enabled=progress) as bar:
        for record in backend.run(jobs, ctx):
            pending.append(record)
            bar.advance(record)
            if len(pending) >= commit_every:
                added += store.add(pending)
                pending.clear()
        added += store.add(pending)
    return added


def records_by_cell(records: Iterable[EpisodeRecord]) -> dict[int, list[EpisodeRecord]]:
    out: dict[int, list[EpisodeRecord]] = {}
    for r in records:
        out.setdefault(r.cell, []).append(r)
    return out


def policy_sha256(spec: OracleSpec) -> str | None:
    """SHA-256 of the policy's artifact file (several: of their digests); None for HTTP."""
    files = [Path(a) for a in spec.artifacts if Path(a).is_file()]
    if not files:
        return None
    if len(files) == 1:
        return sha256_file(files[0])
    return hashlib.sha256("".join(sha256_file(f) for f in files).encode()).hexdigest()


def build_certificate(
    plan: RunPlan, store: EpisodeStore, *, extra: dict[str, Any] | None = None
) -> Certificate:
    """Judge the stored episodes of ``plan``; ``extra`` adds (or overrides) result fields."""
    spec = plan.config.spec
    records = store.records()
    grid = list(plan.cells[: plan.grid_size])
    result = judge_run(
        records_by_cell(records),
        grid,
        plan.stage1_cell,
        budget=spec.budget,
        p_star=spec.p_star,
        confidence=spec.confidence,
        return_range=plan.return_range,
        cost_range=plan.cost_range,
    )
    verdict = result.pop("verdict")
    reasons: dict[str, int] = {}
    for r in records:
        if r.failure_reason is not None:
            reasons[r.failure_reason] = reasons.get(r.failure_reason, 0) + 1
    result.update(
        {
            "axes": [
                {"name": a.name, "levels": list(a.levels)} for a in axes(plan.config.envelope)
            ],
            "goal": spec.goal,
            "cost_key": spec.cost,
            "cost_range": None if plan.cost_range is None else list(plan.cost_range),
            "return_range": None if plan.return_range is None else list(plan.return_range),
            "obs_ranges": store.get_meta("obs_ranges"),
            "oracle_failures": {"total": sum(reasons.values()), "reasons": reasons},
            "episodes_per_cell": plan.config.episodes,
            "verdict_rule": "PASS iff the stage-1 nominal cell and every grid cell pass",
        }
    )
    result.update(extra or {})
    return make_certificate(
        "blackbox",
        verdict,
        parameters=certified_parameters(plan.config),
        inputs={"config_sha256": plan.config_sha256, "policy_sha256": policy_sha256(plan.oracle)},
        seed=plan.config.seed,
        result=result,
    )


def finish(
    plan: RunPlan, store: EpisodeStore, out_dir: Path, *, extra: dict[str, Any] | None = None
) -> Certificate:
    """Judge, then write ``certificate.json`` and the report into ``out_dir``."""
    cert = build_certificate(plan, store, extra=extra)
    write_certificate(cert, Path(out_dir) / "certificate.json")
    from safecert.report import write_report

    write_report(cert, store.records(), Path(out_dir), config_path=plan.config_path)
    return cert


def certify(
    config_path: Path,
    out_dir: Path,
    *,
    backend: Backend | None = None,
    workers: int | None = None,
    resume: bool = False,
    progress: bool | None = None,
) -> Certificate:
    """Run a fixed-N certification end to end; returns the certificate written to ``out_dir``."""
    plan = plan_run(config_path)
    backend = backend or LocalBackend(workers or plan.config.workers)
    if progress is None:
        progress = sys.stderr.isatty()
    with open_store(plan, out_dir, resume=resume) as store, closing_local(backend):
        ctx = make_context(plan, store)
        run_jobs(backend, plan.all_jobs(store.done()), ctx, store, progress=progress)
        return finish(plan, store, out_dir)


@contextmanager
def closing_local(backend: Backend) -> Iterator[None]:
    """Close a :class:`LocalBackend`'s pool when the run ends (a RayBackend passed in is closed by
    its owner, who may reuse its cluster connection)."""
    try:
        yield
    finally:
        if isinstance(backend, LocalBackend):
            backend.close()


def replay(config_path: Path, cell: int, index: int) -> EpisodeRecord:
    """Rerun episode ``index`` of ``cell`` in this process (same seed, same outcome)."""
    from safecert.blackbox.backends import Worker
    from safecert.blackbox.jobs import episode_seed
    from safecert.blackbox.ranges import estimate_ranges

    plan = plan_run(config_path)
    if not 0 <= cell < len(plan.cells) or not 0 <= index < plan.config.episodes:
        raise ConfigError(
            f"no episode {cell}:{index} in this run ({len(plan.cells)} cells × "
            f"{plan.config.episodes} episodes)",
            field="--replay",
        )
    ranges = None
    if plan.needs_obs_ranges:
        oracle = make_oracle(plan.oracle)
        try:
            ranges = tuple(estimate_ranges(plan.config, plan.base_dir, oracle.act)["range"])
        finally:
            oracle.close()
    config = plan.config.model_copy(update={"batch_size": 1})
    worker = Worker(RunContext(config, str(plan.base_dir), plan.cells, ranges, plan.oracle))
    try:
        return worker.run([EpisodeJob(cell, index, episode_seed(config.seed, cell, index))])[0]
    finally:
        worker.close()
