"""Search for the largest certifiable ε (paper §4.3), and the problem setup it runs on.

:class:`BnnProblem` binds a benchmark, a mean policy and its Bayesian spec to the settings of a run
and can run Alg. 1 at one ε (:meth:`BnnProblem.run`). :func:`search_epsilon` walks a fixed,
increasing ladder (e.g. 0.5σ, 1σ, 1.5σ, 2σ, …) and stops at the first ε that is not certified;
optional bisection steps then refine between the last certified and the first failed value. Each
attempt is warm-started from the previous *certified* attempt's invariant and its D_spec and D_ce
(the paper warm-starts from g and D_spec; D_ce is kept too because every transition possible under
a smaller box is possible under a larger one). The result is the largest ε certified, with its
proof — never a claim about the ε that failed (UNKNOWN is not "unsafe").

On a finite system (integer states, discrete actions, :func:`~safecert.bnn.finite.is_finite`) each
attempt first analyses the whole state space (:func:`~safecert.bnn.finite.analyse_finite`): where
X0 is not inside the maximal invariant, no certificate is possible and the attempt ends at once
(UNKNOWN; the reason gives the trajectory from X0 into X_u with weights in the box where one
replays, i.e. where no invariant exists at all); otherwise, with ``data.bootstrap``, the
maximal invariant labels every state exactly in place of the Monte-Carlo bootstrap. On any other
system each attempt first spends ``data.witness_rollouts`` rollouts looking for an unsafe
trajectory with weights in the box (:func:`~safecert.bnn.witness.find_witness`); one that replays
shows that no invariant exists at this ε, and the attempt ends at once (UNKNOWN, the trajectory as
the reason). The verdict is still the verifier's alone.

Every budget is work (``limits.max_iterations``, ``limits.solver_nodes``, the ``[data]`` sample
and rollout counts, the ``[learner]`` epochs), so a config gives the same certificate on any
machine at any load. ``limits.per_epsilon_s``, ``limits.total_s`` and ``limits.solver_s`` are
wall-clock guards only: an attempt or a search a guard cuts short says so in its reason
(:func:`~safecert.bnn.cegis.guard_reason`) and is ``machine_dependent``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from safecert.bnn.cegis import (
    CegisResult,
    CegisSettings,
    SamplingFalsifier,
    cegis,
    cpu_clock,
    guard_reason,
    initial_data,
    wall_clock,
)
from safecert.bnn.config import BnnConfig
from safecert.bnn.dynamics import System
from safecert.bnn.finite import analyse_finite, is_finite
from safecert.bnn.learner import Learner, TrainingData, bootstrap_labels, warm_up
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.sampling import SafeBNNPolicy
from safecert.bnn.spec import BayesianSpec, Epsilon, WeightBox, parse_epsilon
from safecert.bnn.verifier import DEFAULT_MARGIN, Verifier
from safecert.bnn.witness import Witness, find_witness, replay_witness

if TYPE_CHECKING:
    from safecert.bnn.invariant import InvariantNet
    from safecert.bnn.pool import SolvePool

log = logging.getLogger(__name__)

#: a previous certified attempt's invariant and data, or None for a cold start
Warm: TypeAlias = "tuple[InvariantNet, TrainingData] | None"


@dataclass
class BnnProblem:
    """One policy on one benchmark with the run settings of a :class:`BnnConfig`."""

    bench: System
    mean: ReluNetwork
    spec: BayesianSpec
    config: BnnConfig
    progress: Callable[[int, str], None] | None = None
    #: closure asked strictly first in CEGIS (Verifier ``strict_closure``; proofs unchanged;
    #: fewer MILPs, benchmarks/RESULTS_bnn_verifier.md)
    strict_closure: bool = True
    #: the verifier's soundness margin (``Verifier(margin=…)``); the certificate records it
    verifier_margin: float = DEFAULT_MARGIN
    #: learn from every incumbent of a violated MILP that replays (Verifier ``incumbents``;
    #: training data only, proofs unchanged)
    incumbents: bool = True
    #: where the closure pieces (``[verifier] closure_splits``) are solved: execution only,
    #: never an outcome (None: one after another in this process)
    pool: SolvePool | None = None

    def box(self, epsilon: Epsilon) -> WeightBox:
        return self.spec.box(self.mean, epsilon)

    def run(
        self,
        epsilon: Epsilon,
        warm: Warm = None,
        time_limit_s: float | None = None,
        guard_key: str = "limits.total_s",
    ) -> CegisResult:
        """Alg. 1 at ``epsilon``: fresh D_spec (optionally bootstrapped under this ε's box; exact
        labels on a finite system, module docstring) unless ``warm`` gives a previous invariant
        and its data. Seeded from ``config.seed`` and ε. The verifier also learns from the
        solver's other incumbents that replay (``incumbents``). The wall-clock guard is
        ``limits.per_epsilon_s``, or ``time_limit_s`` (the search's remaining ``guard_key``)
        where that is smaller."""
        cfg = self.config
        box = self.box(epsilon)
        seed_seq = np.random.SeedSequence([cfg.seed, int(round(epsilon.value * 1e6))])
        rng = np.random.default_rng(seed_seq)
        now = cpu_clock
        t0, wall0 = now(), wall_clock()
        finite = analyse_finite(self.bench, box) if is_finite(self.bench) else None
        if finite is not None and not finite.initial_inside:
            path = finite.witness
            witness = (
                None
                if path is None
                else replay_witness(self.bench, box, path[0].x, [t.weights for t in path])
            )
            reason = witness.describe() if witness is not None else finite.describe()
            log.info("ε = %s: %s", epsilon, reason)
            return _settled(
                reason,
                witness,
                TrainingData(finite.states, finite.labels()),
                warm,
                self._learner(),
                seed_seq,
                now() - t0,
                wall_clock() - wall0,
            )
        limit_s, limit_key = cfg.limits.per_epsilon_s, "limits.per_epsilon_s"
        configured_s = limit_s
        if time_limit_s is not None and time_limit_s < limit_s:
            limit_s, limit_key = time_limit_s, guard_key
            # the reason prints the configured limit, never what is left of it
            configured_s = {
                "limits.total_s": cfg.limits.total_s,
                "limits.per_epsilon_s": cfg.limits.per_epsilon_s,
            }.get(guard_key, time_limit_s)
        guard = f"{limit_key} = {configured_s:g} s"

        def expired() -> bool:
            return wall_clock() - wall0 > limit_s

        def cut_short(where: str) -> CegisResult:
            """The guard fired before CEGIS: UNKNOWN, machine-dependent, nothing learned."""
            reason = guard_reason(f"{guard} reached in the {where}")
            log.info("ε = %s: %s", epsilon, reason)
            empty = TrainingData(np.zeros((0, self.bench.state_dim)), np.zeros(0))
            return _settled(
                reason,
                None,
                empty,
                warm,
                self._learner(),
                seed_seq,
                now() - t0,
                wall_clock() - wall0,
                machine_dependent=True,
            )

        if finite is None and cfg.data.witness_rollouts > 0:
            witness = find_witness(
                self.bench,
                box,
                np.random.default_rng(seed_seq.spawn(1)[0]),
                evals=cfg.data.witness_rollouts,
                horizon=cfg.data.witness_horizon,
                max_horizon=cfg.data.witness_max_horizon,
                stop=expired,  # the guard, never the budget
            )
            if expired():  # cut short: what it found depends on the machine
                return cut_short("witness search")
            if witness is not None:
                reason = witness.describe()
                log.info("ε = %s: %s", epsilon, reason)
                empty = TrainingData(np.zeros((0, self.bench.state_dim)), np.zeros(0))
                return _settled(
                    reason, witness, empty, warm, self._learner(), seed_seq,
                    now() - t0, wall_clock() - wall0,
                )  # fmt: skip
        # one-off imports (torch, its optimizer: 2–5 CPU-s once per process) are not this
        # attempt's work: its clocks and its guard pause for them, and an attempt the witness
        # search ended never pays them
        paused, paused_cpu = wall_clock(), now()
        warm_up()
        wall0 += wall_clock() - paused
        t0 += now() - paused_cpu
        # the finite analysis or the witness search: verification work of this attempt
        checked_s, checked_wall = now() - t0, wall_clock() - wall0
        if finite is not None and warm is None and cfg.data.bootstrap:
            # the exact labels replace the Monte-Carlo bootstrap: label 0 is right (the state is
            # in no certifiable invariant), label 1 (the maximal invariant) is one valid choice
            data, hints = initial_data(
                self.bench,
                rng,
                initial_samples=cfg.data.initial_samples,
                unsafe_samples=cfg.data.unsafe_samples,
            )
            data.add_spec(finite.states[finite.maximal], 1)
            data.add_spec(finite.states[~finite.maximal], 0)
            init = None
        elif warm is None:
            boot = None
            if cfg.data.bootstrap and cfg.data.bootstrap_states > 0:
                boot = bootstrap_labels(
                    self.bench,
                    SafeBNNPolicy(box, self.spec, rng),
                    rng,
                    states=cfg.data.bootstrap_states,
                    rollouts=cfg.data.bootstrap_rollouts,
                    horizon=cfg.data.bootstrap_horizon,
                    stop=expired,
                )
                if expired():
                    return cut_short("bootstrap")
            data, hints = initial_data(
                self.bench,
                rng,
                initial_samples=cfg.data.initial_samples,
                unsafe_samples=cfg.data.unsafe_samples,
                bootstrap=boot,
            )
            init = None
        else:
            init, data, hints = warm[0], warm[1].copy(), None
            if finite is not None and cfg.data.bootstrap:  # this ε's exact labels win
                data.relabel(finite.states, finite.labels())
        learner = self._learner()
        verifier = Verifier(
            self.bench,
            box,
            solver=cfg.solver,
            time_limit_s=cfg.limits.solver_s,
            node_limit=cfg.limits.solver_nodes,
            threads=1,
            first_feasible=False,
            strict_closure=self.strict_closure,
            margin=self.verifier_margin,
            incumbents=self.incumbents,
            closure_splits=cfg.verifier.closure_splits,
            pool=self.pool,
        )
        falsifier = (
            SamplingFalsifier(self.bench, box, rng, samples=cfg.data.falsifier_samples)
            if cfg.data.falsifier_samples > 0
            else None
        )
        settings = CegisSettings(
            max_iterations=cfg.limits.max_iterations,
            guard_s=limit_s - (wall_clock() - wall0),
            guard_key=limit_key,
            guard_limit_s=configured_s,
            seed=int(seed_seq.generate_state(1)[0]),
            retrain=cfg.learner.retrain,
        )
        log.info("cegis at ε = %s (warm start: %s)", epsilon, warm is not None)
        result = cegis(
            learner,
            verifier,
            self.bench,
            data,
            settings,
            init=init,
            hints=hints,
            falsifier=falsifier,
            progress=self.progress,
        )
        result.runtimes_s["verifier_s"] += checked_s
        result.runtimes_s["total_s"] += checked_s
        result.runtimes_s["wall_s"] += checked_wall
        return result

    def _learner(self) -> Learner:
        return Learner(
            self.config.learner_settings(), low=self.bench.box.lo, high=self.bench.box.hi
        )


def _settled(
    reason: str,
    witness: Witness | None,
    data: TrainingData,
    warm: Warm,
    learner: Learner,
    seed_seq: np.random.SeedSequence,
    spent_s: float,
    wall_s: float,
    machine_dependent: bool = False,
) -> CegisResult:
    """The attempt at an ε that ends before CEGIS (X0 is not inside the maximal invariant of a
    finite system, an unsafe trajectory with weights in the box replayed, or the wall-clock guard
    fired in the witness search): UNKNOWN (nothing is certified) with ``reason`` and the replayed
    ``witness`` where there is one. The recorded candidate and data are the warm start's, else an untrained
    network and ``data``."""
    g = warm[0] if warm is not None else learner.new_network(int(seed_seq.generate_state(1)[0]))
    data = warm[1].copy() if warm is not None else data
    times = {"learner_s": 0.0, "verifier_s": spent_s, "falsifier_s": 0.0}
    return CegisResult(
        "UNKNOWN",
        reason,
        g,
        None,
        data,
        runtimes_s={**times, "total_s": spent_s, "wall_s": wall_s},
        witness=witness,
        machine_dependent=machine_dependent,
    )


@dataclass(frozen=True)
class Attempt:
    """One ε tried by the search and what Alg. 1 said."""

    epsilon: Epsilon
    result: CegisResult

    @property
    def certified(self) -> bool:
        return self.result.verdict == "SAFE"


@dataclass
class SearchResult:
    """All attempts in order; ``best`` is the certified attempt with the largest ε (or None).
    ``stopped`` is the ε the search would have tried next when its wall-clock guard ended it
    (machine-dependent), else None; ``total_s`` is wall-clock seconds."""

    attempts: list[Attempt] = field(default_factory=list)
    total_s: float = 0.0
    stopped: Epsilon | None = None

    @property
    def best(self) -> Attempt | None:
        ok = [a for a in self.attempts if a.certified]
        return max(ok, key=lambda a: a.epsilon.value) if ok else None


RunFn = Callable[[Epsilon, Warm, float], CegisResult]


@dataclass(frozen=True)
class SearchPlan:
    """What a run searches: the ladder, the bisection steps and the wall-clock guard of the
    whole search (seconds, and the config key it comes from)."""

    ladder: tuple[Epsilon, ...]
    bisection_steps: int
    total_time_s: float
    guard_key: str


def search_plan(cfg: BnnConfig) -> SearchPlan:
    """The plan ``cfg`` implies: with ``[search] enabled`` its ladder, bisection steps and
    ``limits.total_s``; otherwise the one requested ε with ``limits.per_epsilon_s``. Both
    ``safecert bnn verify`` and its checker derive the ε tried from this."""
    if cfg.search.enabled:
        return SearchPlan(
            tuple(parse_epsilon(e) for e in cfg.search.ladder),
            cfg.search.bisection_steps,
            cfg.limits.total_s,
            "limits.total_s",
        )
    return SearchPlan((cfg.epsilon_value(),), 0, cfg.limits.per_epsilon_s, "limits.per_epsilon_s")


def stop_reason(plan: SearchPlan, next_epsilon: Epsilon) -> str:
    """What a search its wall-clock guard ended says (:func:`~safecert.bnn.cegis.guard_reason`);
    the checker re-derives it from the plan and the ε the replayed search would try next."""
    return guard_reason(
        f"{plan.guard_key} = {plan.total_time_s:g} s reached before ε = {next_epsilon}"
    )


def epsilon_sequence(
    ladder: Sequence[Epsilon | str | float], bisection_steps: int
) -> Generator[Epsilon, bool, None]:
    """The ε values the search tries, in order; ``send`` whether the last one was certified.

    The ladder (increasing, one unit) up to its first failure, then ``bisection_steps`` halvings
    of the gap between the largest certified rung (or 0) and that failure. The same sequence
    drives :func:`search_epsilon` and is replayed by ``safecert verify`` to check that the
    certified ε is one the parameters allow.
    """
    eps = [parse_epsilon(e) for e in ladder]
    best: Epsilon | None = None
    failed: Epsilon | None = None
    for e in eps:
        if (yield e):
            best = e
        else:
            failed = e
            break
    if failed is None:
        return
    lo = best.value if best is not None else 0.0
    hi = failed.value
    for _ in range(int(bisection_steps)):
        mid = Epsilon((lo + hi) / 2.0, failed.in_sigma)
        lo, hi = (mid.value, hi) if (yield mid) else (lo, mid.value)


def search_epsilon(
    run: RunFn,
    ladder: Sequence[Epsilon | str | float],
    *,
    total_time_s: float,
    bisection_steps: int = 0,
) -> SearchResult:
    """Largest certified ε on ``ladder`` (increasing, one unit), then ``bisection_steps`` halvings
    of the gap to the first failure (or to 0 when the first rung fails): the ε values of
    :func:`epsilon_sequence`. ``run(ε, warm, limit_s)`` runs Alg. 1; the wall-clock guard
    ``total_time_s`` stops the search before an ε once it is spent (``SearchResult.stopped``)."""
    now = wall_clock
    t0 = now()
    out = SearchResult()
    warm: Warm = None
    plan = epsilon_sequence(ladder, bisection_steps)
    e: Epsilon | None = next(plan, None)
    while e is not None:
        remaining = total_time_s - (now() - t0)
        if remaining <= 0:
            log.info("ε search: wall-clock guard spent before %s", e)
            out.stopped = e
            break
        res = run(e, warm, remaining)
        a = Attempt(e, res)
        out.attempts.append(a)
        log.info("ε search: %s → %s (%s)", e, res.verdict, res.reason)
        if a.certified:
            warm = (res.invariant, res.data)
        try:
            e = plan.send(a.certified)
        except StopIteration:
            e = None
    out.total_s = now() - t0
    return out
