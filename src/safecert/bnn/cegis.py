"""The learner–verifier loop of Alg. 1 (docs/methods.md): learn a positive invariant for ``W_ε``.

Three typed parts, one loop:

* a **learner** (:class:`~safecert.bnn.learner.Learner`) proposes ``g`` from D_spec and D_ce;
* an optional **falsifier** (:class:`SamplingFalsifier`) looks for violations by sampling states
  and box weights — cheap, incomplete, and never the source of a verdict: its findings only go
  into the training data so that fewer MILPs are spent on candidates that are plainly wrong;
* the **verifier** (:class:`~safecert.bnn.verifier.Verifier`) decides closure, X0 ⊆ Inv and
  Inv ∩ X_u = ∅ with the MILP solver and answers ``Proof | Counterexample | Unknown``.

Every counterexample is absorbed the same way whoever found it (:func:`absorb`): a closure pair
goes to D_ce, or — when ``x'`` lies in ``X_u`` or outside the box, so that ``x`` is in no valid
invariant — ``(x, 0)`` goes to D_spec; an initial state goes to D_spec with label 1, an unsafe one
with label 0. The verdict is SAFE only on a :class:`Proof`; a spent budget gives UNKNOWN, never
"unsafe".

Budgets are work, not seconds, so that a seed gives the same result on any machine at any load:
learner rounds (``max_iterations``), epochs, sampled states and the verifier's node budget per
MILP. Seconds appear only as a wall-clock *guard* (``guard_s``, and the verifier's
``time_limit_s``) against a run that would never end; when one fires the result says so in its
reason (:func:`guard_reason`) and is marked ``machine_dependent``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from safecert.bnn.dynamics import System
from safecert.bnn.learner import TrainingData
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.pool import worker_cpu_s
from safecert.bnn.sampling import batched_forward, sample_box_weights
from safecert.bnn.spec import WeightBox
from safecert.bnn.verifier import INCONCLUSIVE, Counterexample, Proof, Unknown

if TYPE_CHECKING:
    from safecert.bnn.invariant import InvariantNet
    from safecert.bnn.witness import Witness

log = logging.getLogger(__name__)

Condition = Literal["closure", "initial", "unsafe"]


class CandidateLearner(Protocol):
    def fit(
        self,
        data: TrainingData,
        seed: int,
        init: InvariantNet | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> InvariantNet: ...


class CandidateVerifier(Protocol):
    def check(self, g: ReluNetwork) -> Proof | Counterexample | Unknown: ...


@dataclass(frozen=True)
class SampledViolation:
    """A violation found by sampling (float64, so it is real — but not a proof of anything)."""

    condition: Condition
    x: np.ndarray
    x_next: np.ndarray | None = None


def absorb(data: TrainingData, bench: System, cex: Counterexample | SampledViolation) -> str:
    """Add one counterexample to the training data (module docstring); returns where it went."""
    if cex.condition == "closure":
        assert cex.x_next is not None
        nxt = np.asarray(cex.x_next, dtype=np.float64).reshape(1, -1)
        if not bench.in_box(nxt)[0] or bench.in_unsafe(nxt)[0]:
            data.add_spec(cex.x, 0)
            return "D_spec(0)"
        data.add_ce(cex.x, nxt)
        return "D_ce"
    data.add_spec(cex.x, 1 if cex.condition == "initial" else 0)
    return "D_spec(1)" if cex.condition == "initial" else "D_spec(0)"


class SamplingFalsifier:
    """Searches for violations of the three conditions by sampling (see the module docstring).

    Closure: ``samples`` states of the step box with ``g ≥ 0`` (half of them those closest to the
    boundary among twice as many draws; a quarter of the draws around remembered verifier
    witnesses), one weight draw each from the box (:func:`sample_box_weights`),
    ``x' = f(x, π_w(x))``; a violation is ``x' ∉ B`` or ``g(x') < 0``. X0 and X_u: sampled states with the wrong sign of ``g``. At most ``keep``
    violations per condition are returned (the worst first).
    """

    def __init__(
        self,
        bench: System,
        box: WeightBox,
        rng: np.random.Generator,
        samples: int = 20000,
        keep: int = 16,
        local_radius: float = 0.02,
    ) -> None:
        self.bench, self.box, self.rng = bench, box, rng
        self.samples, self.keep, self.local_radius = int(samples), int(keep), float(local_radius)
        self.seeds: list[np.ndarray] = []

    def remember(self, x: np.ndarray) -> None:
        """Also sample around ``x`` from now on (a verifier witness: violations cluster there)."""
        self.seeds.append(np.asarray(x, dtype=np.float64).reshape(-1))
        self.seeds = self.seeds[-32:]

    def _states(self, n: int) -> np.ndarray:
        b = self.bench
        x = b.step_box.sample(self.rng, n, b.integer)
        if self.seeds and not b.integer:
            k = n // 4
            centre = np.stack(self.seeds)[self.rng.integers(0, len(self.seeds), size=k)]
            width = (b.step_box.hi - b.step_box.lo) * self.local_radius
            local = centre + width * self.rng.standard_normal(centre.shape)
            x[:k] = np.clip(local, b.step_box.lo, b.step_box.hi)
        return x

    def find(self, g: ReluNetwork) -> list[SampledViolation]:
        if self.samples <= 0:
            return []
        b, n = self.bench, self.samples
        found: list[SampledViolation] = []
        x = self._states(2 * n)
        gx = g.forward(x)[:, 0]
        inside = np.flatnonzero(gx >= 0)
        # half of the budget near the boundary g = 0, where closure fails first; half anywhere
        near = inside[np.argsort(gx[inside])[: n // 2]]
        rest = self.rng.permutation(inside)[: n - len(near)]
        x = x[np.concatenate([near, rest])]
        if len(x):
            x1 = b.step(x, batched_forward(sample_box_weights(self.box, self.rng, len(x)), x))
            g1 = g.forward(x1)[:, 0]
            outside = ~b.in_box(x1)
            score = np.where(outside, np.inf, -g1)
            bad = np.flatnonzero(outside | (g1 < 0))
            for i in bad[np.argsort(-score[bad])][: self.keep]:
                found.append(SampledViolation("closure", x[i], x1[i]))
        for cond, pts, wrong in (
            ("initial", b.sample_initial(self.rng, n // 4), lambda v: v < 0),
            ("unsafe", b.sample_unsafe(self.rng, n // 4), lambda v: v >= 0),
        ):
            v = g.forward(pts)[:, 0]
            idx = np.flatnonzero(wrong(v))
            order = idx[np.argsort(v[idx] if cond == "initial" else -v[idx])][: self.keep]
            found.extend(SampledViolation(cond, pts[i]) for i in order)  # type: ignore[arg-type]
        return found


def initial_data(
    bench: System,
    rng: np.random.Generator,
    *,
    initial_samples: int,
    unsafe_samples: int,
    bootstrap: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[TrainingData, TrainingData | None]:
    """D_spec of Alg. 1 (samples of X0 labelled 1 and of X_u labelled 0; D_ce empty) and the
    pre-training hints. With ``bootstrap`` (:func:`~safecert.bnn.learner.bootstrap_labels`) its
    label-0 states join D_spec for good — some weight in the box led them into X_u, so they lie in
    no valid invariant — while its label-1 states (a Monte-Carlo guess that can be wrong under
    adversarial weights) only shape the first candidate: kept in D_spec they fight the
    counterexamples that contradict them."""
    x0 = bench.sample_initial(rng, initial_samples)
    xu = bench.sample_unsafe(rng, unsafe_samples)
    xs, ys = [x0, xu], [np.ones(len(x0)), np.zeros(len(xu))]
    hints = None
    if bootstrap is not None:
        bx, by = bootstrap
        xs.append(bx[by == 0])
        ys.append(by[by == 0])
        if np.any(by == 1):
            hints = TrainingData(bx[by == 1], by[by == 1])
    return TrainingData(np.concatenate(xs), np.concatenate(ys)), hints


#: how the reason of a run cut by a wall-clock guard begins
WALL_CLOCK_GUARD = "wall-clock guard"


def guard_reason(what: str) -> str:
    """The reason of a run a wall-clock guard cut short: ``what`` names the guard and where it
    fired (e.g. ``"limits.per_epsilon_s = 1800 s reached after 12 iterations"``)."""
    return f"{WALL_CLOCK_GUARD} {what} (machine-dependent: budgets in work were not spent)"


def cpu_clock() -> float:
    """Runtimes: this process's CPU seconds (learner, falsifier, solvers run in-process on one
    thread) plus those its solver processes spent on the closure pieces
    (:func:`~safecert.bnn.pool.worker_cpu_s`)."""
    return time.process_time() + worker_cpu_s()


#: the wall clock the guards read
wall_clock = time.perf_counter


@dataclass(frozen=True)
class CegisSettings:
    """Budgets of one run of Alg. 1: ``max_iterations`` learner rounds (work), and the wall-clock
    guard ``guard_s`` (seconds; ``guard_key`` names the config key it comes from in reasons)."""

    max_iterations: int = 200
    guard_s: float = math.inf
    guard_key: str = "limits.per_epsilon_s"
    #: the configured value of ``guard_key`` (seconds) that reasons print, where ``guard_s`` is
    #: only what was left of it when this run started (None: ``guard_s``)
    guard_limit_s: float | None = None
    seed: int = 0
    retrain: bool = True


@dataclass
class CegisResult:
    """Outcome of Alg. 1: SAFE with the proof, or UNKNOWN with the reason."""

    verdict: Literal["SAFE", "UNKNOWN"]
    reason: str
    invariant: InvariantNet
    proof: Proof | None
    data: TrainingData
    iterations: int = 0
    verifier_calls: int = 0
    counterexamples: list[Counterexample] = field(default_factory=list)
    sampled_violations: int = 0
    #: further replayed violations taken from the solver's incumbents (training data only)
    incumbent_counterexamples: int = 0
    spurious: int = 0
    runtimes_s: dict[str, float] = field(default_factory=dict)
    #: a replayed trajectory showing that no invariant exists at this ε (the attempt ran no CEGIS)
    witness: Witness | None = None
    #: a wall-clock guard ended the run (the reason says which): another machine may differ
    machine_dependent: bool = False

    @property
    def network(self) -> ReluNetwork:
        return self.invariant.network()


ProgressFn = Callable[[int, str], None]


def cegis(
    learner: CandidateLearner,
    verifier: CandidateVerifier,
    bench: System,
    data: TrainingData,
    settings: CegisSettings,
    *,
    init: InvariantNet | None = None,
    hints: TrainingData | None = None,
    falsifier: SamplingFalsifier | None = None,
    progress: ProgressFn | None = None,
) -> CegisResult:
    """Alg. 1. ``data`` is extended in place with every counterexample; ``init`` warm-starts the
    learner (the ε search passes the previous invariant); ``hints`` join ``data`` for the first
    fit only (see :func:`initial_data`). Deterministic given ``settings.seed`` and the inputs,
    unless a wall-clock guard cuts the run (then ``machine_dependent``)."""
    now = cpu_clock
    t0, wall0 = now(), wall_clock()
    clock = {"learner_s": 0.0, "verifier_s": 0.0, "falsifier_s": 0.0}
    seeds = np.random.SeedSequence(settings.seed).generate_state(settings.max_iterations + 1)

    def fit(i: int, start: InvariantNet | None, extra: TrainingData | None = None) -> InvariantNet:
        t = now()
        train = data
        if extra is not None:
            train = data.copy()
            train.add_spec(extra.spec_x[extra.spec_y == 1], 1)
            train.add_spec(extra.spec_x[extra.spec_y == 0], 0)
        out = learner.fit(train, int(seeds[i]), init=start, stop=expired)
        clock["learner_s"] += now() - t
        cut_in_learner[0] = expired()
        return out

    cut_in_learner = [False]

    deadline = wall0 + settings.guard_s

    def expired() -> bool:
        return wall_clock() > deadline

    limit = settings.guard_s if settings.guard_limit_s is None else settings.guard_limit_s
    guard = f"{settings.guard_key} = {limit:g} s"
    base_limit = getattr(verifier, "time_limit_s", None)
    g = fit(0, init, hints)
    result = CegisResult("UNKNOWN", "iteration cap reached", g, None, data)

    def done(
        verdict: Literal["SAFE", "UNKNOWN"], reason: str, guarded: bool = False
    ) -> CegisResult:
        result.verdict, result.reason, result.invariant = verdict, reason, g
        result.machine_dependent = guarded
        result.runtimes_s = {
            **clock,
            "total_s": now() - t0,
            "wall_s": wall_clock() - wall0,
        }
        log.info("cegis: %s after %d iterations (%s)", verdict, result.iterations, reason)
        return result

    for it in range(1, settings.max_iterations + 1):
        if expired():  # also where the learner stopped early: its candidate is not checked
            where = " in the learner" if cut_in_learner[0] else ""
            what = f"{guard} reached{where} after {it - 1} iterations"
            return done("UNKNOWN", guard_reason(what), guarded=True)
        result.iterations = it
        net = g.network()
        if falsifier is not None and settings.retrain:
            t = now()
            found = falsifier.find(net)
            clock["falsifier_s"] += now() - t
            if found:
                for v in found:
                    absorb(data, bench, v)
                result.sampled_violations += len(found)
                _report(progress, it, f"{len(found)} sampled violations")
                g = fit(it, g)
                continue
        remaining = deadline - wall_clock()
        if remaining <= 0.0:
            what = f"{guard} reached in the falsifier of iteration {it}"
            return done("UNKNOWN", guard_reason(what), guarded=True)
        solver_guard = "limits.solver_s" + ("" if base_limit is None else f" = {base_limit:g} s")
        if base_limit is not None and remaining < base_limit:  # no MILP outlives the run's guard
            verifier.time_limit_s = remaining  # type: ignore[attr-defined]
            solver_guard = guard
        elif base_limit is not None:
            verifier.time_limit_s = base_limit  # type: ignore[attr-defined]
        t = now()
        verdict = verifier.check(net)
        clock["verifier_s"] += now() - t
        result.verifier_calls += 1
        if isinstance(verdict, Proof):
            result.proof = verdict
            return done("SAFE", "closure, initial and unsafe checks infeasible")
        if isinstance(verdict, Unknown):
            timed_out = [c.condition for c in verdict.checks if c.status == "timeout"]
            if timed_out:
                what = f"{solver_guard} reached in the {timed_out[0]} MILP of iteration {it}"
                return done("UNKNOWN", guard_reason(what), guarded=True)
            if any(c.status in INCONCLUSIVE for c in verdict.checks) or not verdict.spurious:
                return done("UNKNOWN", f"verifier inconclusive ({verdict.reason})")
            # witnesses that do not replay in float64 (typically a state within the solver's
            # margin of the boundary g = 0) are no counterexample; they are recorded and used as
            # training data only, which keeps the loop moving without affecting any verdict
            result.spurious += len(verdict.spurious)
            for rep in verdict.spurious:
                absorb(data, bench, _as_violation(bench, rep.x, rep.x_next))
                if falsifier is not None:
                    falsifier.remember(rep.x)
            _report(
                progress, it, f"{len(verdict.spurious)} witnesses did not replay (training only)"
            )
            if not settings.retrain:
                return done("UNKNOWN", f"verifier inconclusive ({verdict.reason})")
            g = fit(it, g)
            continue
        result.counterexamples.append(verdict)
        where = absorb(data, bench, verdict)
        for rep in verdict.more:  # the solver's other incumbents that replayed
            absorb(data, bench, _as_violation(bench, rep.x, rep.x_next))
        result.incumbent_counterexamples += len(verdict.more)
        if falsifier is not None:
            falsifier.remember(verdict.x)
        _report(progress, it, f"{verdict.condition} counterexample → {where}")
        if not settings.retrain:
            return done("UNKNOWN", f"{verdict.condition} counterexample and re-training disabled")
        g = fit(it, g)
    return done("UNKNOWN", f"iteration cap {settings.max_iterations} reached")


def _as_violation(bench: System, x: np.ndarray, x_next: np.ndarray | None) -> SampledViolation:
    if x_next is not None:
        return SampledViolation("closure", x, x_next)
    return SampledViolation("initial" if bench.in_initial(x) else "unsafe", x)


def _report(progress: ProgressFn | None, it: int, text: str) -> None:
    log.debug("cegis iteration %d: %s", it, text)
    if progress is not None:
        progress(it, text)
