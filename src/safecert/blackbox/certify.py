"""``safecert certify``: fixed-N CORE-RL certification of a black-box policy (docs/methods.md §2).

The run, step by step (each step is a public function so that sequential certification,
rejudging and replay reuse them):

1. :func:`~safecert.blackbox.plan.plan_run` — read and validate the config, the policy string and
   the environment; list the grid cells; find the stage-1 (nominal) cell: the grid's own nominal
   cell when the grid holds one (the paper's layout: stage 1 is the (0, 0) cell, judged at δ/M
   with M = grid cells), else a separate nominal cell that joins the family (M = cells + 1).
2. :func:`open_store` — ``DIR/episodes.sqlite``; ``resume`` continues a run of the same config.
3. :func:`make_context` — probe the oracle once on a real initial observation (a wrong URL, a
   model of the wrong input size, a reply of the wrong type or shape for the action space is one
   error before any episode), play one nominal episode with the spec evaluated strictly (a cost or
   goal key the environment does not provide is one error), fix the observation ranges
   (:mod:`safecert.blackbox.preflight`).
4. :func:`run_jobs` — every (cell, index) not yet stored, stage 1 first; records are committed in
   batches (:func:`store_records`), each committed batch reported as a progress event
   (:mod:`safecert.blackbox.progress`).
5. :func:`finish` — judge (:mod:`safecert.blackbox.judge`), write ``certificate.json`` and the
   report (HTML, Markdown, PNG ODD maps).

Verdict: PASS iff stage 1 passes and every grid cell passes; the ODD (``result.odd``) is the set of
passing cells, valid simultaneously with confidence ``spec.confidence``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from safecert.blackbox.backends import Backend, LocalBackend, RunContext
from safecert.blackbox.config import RunConfig, certified_parameters
from safecert.blackbox.grid import Family, axes
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord
from safecert.blackbox.judge import judge_run
from safecert.blackbox.oracles import Oracle, OracleSpec, make_oracle
from safecert.blackbox.plan import RunPlan, plan_run
from safecert.blackbox.progress import Progress, RunTracker, run_events
from safecert.blackbox.result import (
    Axis,
    BlackboxResult,
    FailureKind,
    ObsRanges,
    OracleFailures,
    Rejudged,
)
from safecert.blackbox.spec import cost_expression, goal_expression
from safecert.blackbox.store import EpisodeStore, open_run_store
from safecert.certificate import BlackboxCertificate, make_certificate, write_certificate
from safecert.document import FileDigest, Inputs
from safecert.errors import ConfigError
from safecert.events import Events


def open_store(plan: RunPlan, out_dir: Path, *, resume: bool) -> EpisodeStore:
    """The run's store (:func:`safecert.blackbox.store.open_run_store`): a store without
    episodes starts afresh; one with episodes is refused unless ``resume`` is given with the
    config that started it and every input file's digest unchanged (one cell must never mix two
    policies)."""
    return open_run_store(
        Path(out_dir) / "episodes.sqlite",
        [d.model_dump(mode="json") for d in plan.inputs],
        plan.config_path,
        resume=resume,
    )


def make_context(plan: RunPlan, store: EpisodeStore, oracle: Oracle | None = None) -> RunContext:
    """Check the policy and the spec on the real environment, then fix the observation ranges.

    Before any stored episode: one call on a real first observation whose reply must have the
    action space's type and shape (else one OracleError line); then one nominal episode played
    with the spec evaluated strictly, so a cost or goal that reads a key or index the environment
    does not provide is one ConfigError line naming it (the episode is not stored). Ranges
    (:mod:`safecert.blackbox.ranges`) are computed once and kept in the store. ``oracle``: the
    policy's oracle, the caller's to close (then the run may go on using it); by default one is
    built for the check and closed."""
    from safecert.blackbox.preflight import check_policy_and_spec, compute_ranges

    own = oracle is None
    checked = make_oracle(plan.oracle) if oracle is None else oracle
    try:
        check_policy_and_spec(plan, checked)
        ranges = store.get_meta("obs_ranges")
        if ranges is None and plan.needs_obs_ranges:
            ranges = compute_ranges(plan)
            store.set_meta("obs_ranges", ranges)
    finally:
        if own:
            checked.close()
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
    progress: RunTracker | None = None,
) -> int:
    """Run ``jobs`` and store each record (:func:`store_records`); returns the number of new
    records."""
    return store_records(backend.run(jobs, ctx), store, progress=progress)


def store_records(
    records: Iterable[EpisodeRecord],
    store: EpisodeStore,
    *,
    progress: RunTracker | None = None,
    commit_every: int = 32,
) -> int:
    """Store ``records`` as they come; returns the number of new records.

    Records are committed ``commit_every`` at a time and at the end (each commit is synced to
    disk), so a crash loses at most that many episodes, which ``--resume`` re-runs with the same
    seeds; a sync per few episodes would cost more than a cheap episode. ``progress`` sees each
    committed batch (:class:`~safecert.blackbox.progress.RunTracker`)."""
    added = 0
    pending: list[EpisodeRecord] = []

    def commit() -> int:
        n = store.add(pending)
        if progress is not None:
            progress.add(pending)
        pending.clear()
        return n

    for record in records:
        pending.append(record)
        if len(pending) >= commit_every:
            added += commit()
    added += commit()
    return added


def records_by_cell(records: Iterable[EpisodeRecord]) -> dict[int, list[EpisodeRecord]]:
    out: dict[int, list[EpisodeRecord]] = {}
    for r in records:
        out.setdefault(r.cell, []).append(r)
    return out


def oracle_failures(records: Sequence[EpisodeRecord]) -> OracleFailures:
    """Failure reasons grouped by kind (:func:`safecert.blackbox.rollout.failure_kind`), each
    with its count and its first reason as an example — not one entry per distinct value."""
    from safecert.blackbox.rollout import failure_kind

    kinds: dict[str, FailureKind] = {}
    for r in records:
        if r.failure_reason is not None:
            kind = failure_kind(r.failure_reason)
            seen = kinds.get(kind)
            kinds[kind] = FailureKind(
                count=1 if seen is None else seen.count + 1,
                example=r.failure_reason if seen is None else seen.example,
            )
    return OracleFailures(total=sum(k.count for k in kinds.values()), kinds=kinds)


VERDICT_RULE = "PASS iff the stage-1 nominal cell and every grid cell pass"


def blackbox_result(
    config: RunConfig,
    family: Family,
    records: Sequence[EpisodeRecord],
    *,
    cost_range: tuple[float, float] | None,
    return_range: tuple[float, float] | None,
    obs_ranges: dict[str, Any] | None,
    rejudged: Rejudged | None,
) -> tuple[Literal["PASS", "FAIL"], BlackboxResult]:
    """(verdict, result) of the stored ``records`` judged at ``config.spec`` over ``family``.

    The one builder of a fixed-N result: certify, rejudge and ``safecert verify`` all call it.
    """
    spec = config.spec
    judged = judge_run(
        records_by_cell(records),
        family,
        budget=spec.budget,
        p_star=spec.p_star,
        return_range=return_range,
        cost_range=cost_range,
    )
    result = BlackboxResult(
        confidence=spec.confidence,
        p_star=spec.p_star,
        budget=spec.budget,
        family_size=family.size,
        delta_cell=family.delta_cell,
        stage1=judged.stage1,
        cells=judged.cells,
        odd=judged.odd,
        axes=[Axis(name=a.name, levels=list(a.levels)) for a in axes(config.envelope)],
        goal=spec.goal,
        cost_key=spec.cost,
        goal_expression=goal_expression(spec.goal),
        cost_expression=cost_expression(spec.cost),
        action_out_of_space=spec.action_out_of_space,
        cost_range=None if cost_range is None else list(cost_range),
        return_range=None if return_range is None else list(return_range),
        obs_ranges=None if obs_ranges is None else ObsRanges(**obs_ranges),
        oracle_failures=oracle_failures(records),
        episodes_per_cell=config.episodes,
        verdict_rule=VERDICT_RULE,
        rejudged=rejudged,
    )
    return judged.verdict, result


def store_digest(store: EpisodeStore, path: str = "episodes.sqlite") -> FileDigest:
    """The evidence entry of an episode store (canonical rows digest)."""
    return FileDigest(role="episodes", path=path, sha256=store.rows_sha256(), digest_of="rows")


def run_inputs(plan: RunPlan, store: EpisodeStore) -> Inputs:
    return Inputs(root=str(plan.base_dir), files=list(plan.inputs), evidence=[store_digest(store)])


def build_certificate(plan: RunPlan, store: EpisodeStore) -> BlackboxCertificate:
    """Judge the stored episodes of ``plan`` into a fixed-N certificate."""
    verdict, result = blackbox_result(
        plan.config,
        plan.family,
        store.records(),
        cost_range=plan.cost_range,
        return_range=plan.return_range,
        obs_ranges=store.get_meta("obs_ranges"),
        rejudged=None,
    )
    cert = make_certificate(
        "blackbox",
        verdict,
        parameters=certified_parameters(plan.config),
        inputs=run_inputs(plan, store),
        seed=plan.config.seed,
        result=result,
    )
    assert isinstance(cert, BlackboxCertificate)
    return cert


def finish(
    plan: RunPlan, store: EpisodeStore, out_dir: Path, *, sign_key: Path | None = None
) -> BlackboxCertificate:
    """Judge, then write ``certificate.json`` (signed with ``sign_key``); the caller writes the
    report (:func:`safecert.report.write_run_report`)."""
    cert = build_certificate(plan, store)
    write_certificate(cert, Path(out_dir) / "certificate.json", sign_key=sign_key)
    return cert


def certify(
    config_path: Path,
    out_dir: Path,
    *,
    backend: Backend | None = None,
    workers: int | None = None,
    resume: bool = False,
    progress: Progress = None,
    sign_key: Path | None = None,
    base_dir: Path | None = None,
    started: tuple[OracleSpec, Oracle] | None = None,
) -> BlackboxCertificate:
    """Run a fixed-N certification end to end; returns the certificate written to ``out_dir``
    (with its episode store; the report is the caller's: :func:`safecert.report.write_run_report`).
    ``base_dir``: where the config's relative paths resolve (default: the config's folder).
    ``started``: ``(spec, oracle)``, a policy oracle the caller started ahead of the plan (its
    process starting while this module is imported: :func:`lent_oracle`)."""
    plan = plan_run(config_path, base_dir, keep_env=True)
    backend = backend or LocalBackend(workers or plan.config.workers)
    with (
        run_events(progress) as events,
        open_store(plan, out_dir, resume=resume) as store,
        lent_oracle(plan, backend, started) as oracle,
        closing_local(backend),
    ):
        ctx = make_context(plan, store, oracle)
        if not isinstance(backend, LocalBackend) or backend.worker_count(ctx) > 1:
            oracle.close()  # the run's workers start their own: not one idle beside them
        tracker = fixed_tracker(plan, store, events)
        tracker.start()
        run_jobs(backend, plan.all_jobs(store.done()), ctx, store, progress=tracker)
        end_policy_worker(oracle)
        cert = finish(plan, store, out_dir, sign_key=sign_key)
        tracker.finish(cert.verdict)
        return cert


def end_policy_worker(oracle: Oracle) -> None:
    """The run has no more calls for ``oracle``: a policy worker of safecert's own is asked to
    end now (:meth:`safecert.isolation.Channel.end`), so its teardown — freeing a NumPy process
    takes a few milliseconds — overlaps the judging and the certificate's writing instead of
    coming after them; :func:`lent_oracle` reaps it when the run ends, as before. Any other
    oracle is left to :func:`lent_oracle` to close."""
    channel = getattr(oracle, "channel", None)
    if channel is not None:
        channel.end()


def fixed_tracker(plan: RunPlan, store: EpisodeStore, events: Events) -> RunTracker:
    """The progress of a fixed-N run: each cell is decided (at its δ', as :func:`judge_run`
    will) once its N episodes are stored."""
    from safecert.blackbox.judge import judge_cell

    spec = plan.config.spec

    def judge(cell: int) -> dict[str, Any]:
        c = judge_cell(
            store.records(cell),
            params=plan.cells[cell],
            budget=spec.budget,
            p_star=spec.p_star,
            delta_cell=plan.family.delta_cell,
            return_range=None,
            cost_range=None,
        )
        return {
            "decision": c.decision,
            "episodes": c.episodes,
            "failures": c.failures,
            "upper_bound": c.upper_bound,
        }

    return RunTracker(
        events,
        engine="blackbox",
        cells=plan.cells,
        targets=[plan.config.episodes] * len(plan.cells),
        store=store,
        budget=spec.budget,
        judge=judge,
    )


@contextmanager
def closing_local(backend: Backend) -> Iterator[None]:
    """Close a :class:`LocalBackend`'s pool when the run ends (a RayBackend passed in is closed by
    its owner, who may reuse its cluster connection)."""
    try:
        yield
    finally:
        if isinstance(backend, LocalBackend):
            backend.close()


@contextmanager
def lent_oracle(
    plan: RunPlan, backend: Backend, started: tuple[OracleSpec, Oracle] | None = None
) -> Iterator[Oracle]:
    """The policy's oracle for the pre-run check, lent to a :class:`LocalBackend` whose one
    in-process worker then runs the episodes with it (a policy worker is started once, not
    twice: about 0.15 s of a cheap run's fixed cost); closed when the run ends — enter it before
    :func:`closing_local`, so that the backend is closed first.

    ``started``: ``(spec, oracle)`` started by the caller before the plan existed (the CLI starts
    the policy worker before importing the engine, so that its start-up overlaps the judge's);
    it is the run's oracle when ``spec`` is the plan's, and is closed otherwise. Either way the
    worker loads the policy's code only on its first request, after :func:`plan_run` has hashed
    it (:mod:`safecert.blackbox.oracles.worker`)."""
    if started is not None and started[0] == plan.oracle:
        oracle = started[1]
    else:
        if started is not None:
            started[1].close()
        oracle = make_oracle(plan.oracle)
    start = getattr(oracle, "start", None)  # a process: its start-up overlaps the check's env
    if start is not None:
        start()
    local = backend if isinstance(backend, LocalBackend) else None
    try:
        if local is not None:
            local.lend(oracle)
        yield oracle
    finally:
        if local is not None:
            local.lend(None)
        oracle.close()


def replay(config_path: Path, cell: int, index: int) -> EpisodeRecord:
    """Rerun episode ``index`` of ``cell`` in this process (same seed, same outcome)."""
    from safecert.blackbox.backends import Worker
    from safecert.blackbox.jobs import episode_seed

    plan = plan_run(config_path)
    if not 0 <= cell < len(plan.cells) or not 0 <= index < plan.config.episodes:
        raise ConfigError(
            f"no episode {cell}:{index} in this run ({len(plan.cells)} cells × "
            f"{plan.config.episodes} episodes)",
            field="replay",
        )
    from safecert.blackbox.preflight import compute_ranges

    ranges = tuple(compute_ranges(plan)["range"]) if plan.needs_obs_ranges else None
    config = plan.config.model_copy(update={"batch_size": 1})
    worker = Worker(RunContext(config, str(plan.base_dir), plan.cells, ranges, plan.oracle))
    try:
        return worker.run([EpisodeJob(cell, index, episode_seed(config.seed, cell, index))])[0]
    finally:
        worker.close()
