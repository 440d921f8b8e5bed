"""The verifier of a positive-invariant certificate (docs/methods.md; Def. 1 / Thm. 2 / Alg. 1).

Candidate: a deterministic :class:`~safecert.bnn.networks.ReluNetwork` ``g`` with one output;
``Inv = {x ∈ B : g(x) ≥ 0}`` (``B`` = the benchmark's verification box). :meth:`Verifier.check`
decides, in this order, with one MILP per question:

1. **closure** — is there ``x ∈ Inv`` (in ``step_box``) and ``w ∈ W_ε`` with
   ``x' = f(x, π_w(x))`` outside ``Inv``, i.e. ``g(x') < 0`` or ``x' ∉ B``?
   (objective: maximise ``g(x) − g(x')`` plus the depth by which ``x'`` leaves ``B``);
2. **initial** — is there ``x ∈ X0`` with ``g(x) < 0``? (minimise ``g(x)``);
3. **unsafe** — is there ``x ∈ X_u ∩ B`` with ``g(x) ≥ 0``? (maximise ``g(x)``, per polytope).

All three infeasible ⇒ :class:`Proof`: every trajectory from ``X0`` whose weights stay in ``W_ε``
stays in ``Inv`` and never meets ``X_u``. A feasible query yields a witness that is replayed in
float64 (:mod:`safecert.bnn.replay`); only a replayed witness becomes a :class:`Counterexample`. A
witness that does not replay lies within the solver tolerance of the boundary (typically
``g(x) = −margin``); the question is then asked strictly (``g(x) ≥ robust_margin``, …) to find a
violation that survives float64; if none replays, the witnesses are kept in ``Unknown.spurious``
(reported, never used silently). A spent node budget (``node_limit``, deterministic) or the
wall-clock guard (``time_limit_s``, machine-dependent) gives :class:`Unknown`, never "unsafe".

Soundness margin: each query is relaxed by ``margin`` (``g(x) ≥ −margin``, ``g(x') ≤ margin``, …), so
an infeasibility verdict also covers the solver's feasibility tolerance (≈1e-6). The proof is that
of a floating-point MILP solver, not exact arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from safecert.bnn.dynamics import System
from safecert.bnn.encoding import (
    Bounded,
    NetworkEncoding,
    encode_network,
    new_vars,
    state_vars,
    tighten_columns,
)
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.replay import (
    ReplayReport,
    replay_closure,
    replay_initial,
    replay_unsafe,
)
from safecert.bnn.sets import Box, Piece, Polytope
from safecert.bnn.solvers import Milp, SolveResult, solve
from safecert.bnn.spec import WeightBox
from safecert.errors import ConfigError

if TYPE_CHECKING:
    from safecert.bnn.pool import SolvePool

Condition = Literal["closure", "initial", "unsafe", "problem1"]
CheckStatus = Literal["infeasible", "counterexample", "spurious", "node limit", "timeout", "error"]
#: statuses that end a question without an answer (``timeout``: the wall-clock guard)
INCONCLUSIVE: tuple[CheckStatus, ...] = ("node limit", "timeout", "error")

#: the soundness margin of every query (module docstring): what ``safecert bnn verify`` proves
#: with, records in its certificate and ``safecert verify`` re-checks with
DEFAULT_MARGIN = 1e-6


@dataclass(frozen=True)
class CheckResult:
    """One MILP question: its verdict, solver, runtime and model size."""

    condition: Condition
    status: CheckStatus
    solver: str
    runtime_s: float
    n_vars: int
    n_binaries: int
    detail: str = ""


@dataclass(frozen=True)
class Counterexample:
    """A replayed violation. ``x`` (and, for closure, ``x_next``) are float64 states; ``weights`` are
    concrete policy weights in the box that realise it (closure / problem1). For CEGIS: closure gives
    the pair ``(x, x_next)``; initial gives ``(x, label 1)``; unsafe gives ``(x, label 0)``."""

    condition: Condition
    x: np.ndarray
    replay: ReplayReport
    checks: tuple[CheckResult, ...]
    x_next: np.ndarray | None = None
    #: further replayed violations of the same question from the solver's earlier incumbents
    #: (``Verifier(incumbents=True)``): training data for CEGIS, each as real as ``replay``
    more: tuple[ReplayReport, ...] = ()

    @property
    def runtime_s(self) -> float:
        return sum(c.runtime_s for c in self.checks)

    def with_checks(self, checks: tuple[CheckResult, ...]) -> Counterexample:
        """The same counterexample with the checks of every question asked so far."""
        return Counterexample(self.condition, self.x, self.replay, checks, self.x_next, self.more)


@dataclass(frozen=True)
class Proof:
    """Every question infeasible: the candidate is a positive invariant (or Problem 1 holds)."""

    checks: tuple[CheckResult, ...]

    @property
    def runtime_s(self) -> float:
        return sum(c.runtime_s for c in self.checks)


@dataclass(frozen=True)
class Unknown:
    """Neither proof nor counterexample: a node budget or the wall-clock guard spent, a solver
    error, or only spurious witnesses."""

    reason: str
    checks: tuple[CheckResult, ...]
    spurious: tuple[ReplayReport, ...] = field(default=())

    @property
    def runtime_s(self) -> float:
        return sum(c.runtime_s for c in self.checks)


Verdict = Proof | Counterexample | Unknown
Replay = Callable[[np.ndarray], ReplayReport]
Builder = Callable[[float], tuple[Milp, Replay]]


@dataclass(frozen=True)
class _Query:
    milp: Milp
    x: Bounded
    policy: NetworkEncoding | None
    x_next: Bounded | None


class Verifier:
    """Checks invariant candidates for one benchmark and one policy weight box.

    ``solver``: ``"highs"`` (default) or ``"scip"``; ``node_limit``: branch-and-bound nodes per MILP
    (the deterministic budget); ``time_limit_s``: wall-clock guard per MILP; ``tighten``: LP-tighten
    the policy's and ``g(x')``'s hidden bounds; ``first_feasible``: stop each solve at its first
    witness (re-solved to optimality only if that witness does not replay); ``strict_closure``: ask
    the closure question strictly first (for counterexample generation, see :func:`decide`) — the
    relaxed query is still the one whose infeasibility makes the proof; ``incumbents``: also
    replay the solver's earlier incumbents of a query that gave a counterexample and return those
    that replay in ``Counterexample.more`` (more counterexamples per MILP, no extra solve);
    ``closure_splits``: ask the closure question on ``2**closure_splits`` pieces of the step box
    (:func:`split_box`), each a MILP of its own with its own node budget, all of them answered
    before the pieces are combined in a fixed order (:func:`combine`) — the verdict depends on the
    pieces, never on how they were scheduled; ``pool``: where the pieces are solved (a
    :class:`~safecert.bnn.pool.SolvePool` of worker processes; None: one after another in this
    process). The pool is execution only: the same inputs give the same verdict with any pool.
    """

    def __init__(
        self,
        bench: System,
        policy: WeightBox,
        *,
        solver: str = "highs",
        time_limit_s: float | None = 60.0,
        tighten: bool = False,
        margin: float = DEFAULT_MARGIN,
        robust_margin: float = 1e-5,
        first_feasible: bool = True,
        threads: int = 1,
        strict_closure: bool = False,
        incumbents: bool = False,
        node_limit: int | None = None,
        closure_splits: int = 0,
        pool: SolvePool | None = None,
    ) -> None:
        if policy.mean.in_dim != bench.state_dim or policy.mean.out_dim != bench.n_actions:
            raise ConfigError(
                f"policy maps {policy.mean.in_dim} → {policy.mean.out_dim}, system {bench.name} needs "
                f"{bench.state_dim} → {bench.n_actions}",
                field="policy",
                fix="use the policy trained for this benchmark",
            )
        if not bench.step_box.inside(bench.box) or not all(
            p.box.inside(bench.box) for p in bench.initial.pieces
        ):
            raise ConfigError(
                "X0 or the step domain is not inside the verification box",
                field="sets",
                fix="enlarge the domain or shrink the set",
            )
        if not margin >= 0:
            raise ConfigError(
                f"margin must be ≥ 0, got {margin}", field="margin", fix="use e.g. 1e-6"
            )
        self.bench, self.policy = bench, policy
        self.solver, self.time_limit_s, self.tighten = solver, time_limit_s, tighten
        self.margin, self.first_feasible, self.threads = margin, first_feasible, threads
        self.robust_margin, self.strict_closure = robust_margin, strict_closure
        self.incumbents, self.node_limit = incumbents, node_limit
        self.regions = split_box(bench.step_box, closure_splits, bench.integer)
        self.pool = pool

    # ---- public ---------------------------------------------------------------------------
    def check(self, g: ReluNetwork) -> Verdict:
        """Closure, then X0 ⊆ Inv, then Inv ∩ X_u = ∅; the first replayed counterexample wins."""
        _check_candidate(g, self.bench.state_dim)
        checks: list[CheckResult] = []
        spurious: list[ReplayReport] = []
        for run in (self.check_closure, self.check_initial, self.check_unsafe):
            verdict = run(g)
            checks.extend(verdict.checks)
            if isinstance(verdict, Counterexample):
                return verdict.with_checks(tuple(checks))
            if isinstance(verdict, Unknown):
                spurious.extend(verdict.spurious)
        return summarise(checks, spurious)

    def closure_query(
        self, g: ReluNetwork, m: float | None = None, region: Box | None = None
    ) -> _Query:
        """The closure MILP relaxed by ``m`` (default ``margin``; negative = strict by ``−m``),
        over the states of ``region`` (a piece of the step box; default: all of it)."""
        b = self.bench
        m = self.margin if m is None else m
        region = b.step_box if region is None else region
        milp = Milp()
        x = state_vars(milp, region.lo, region.hi, b.integer)
        g_x = encode_network(milp, g, x).out
        milp.add_row(g_x.idx, [1.0], lo=-m)  # x ∈ Inv (first, so LP tightening can use it)
        pol = encode_network(milp, self.policy, x, tighten=self.tighten)
        x1 = b.encode_step(milp, x, pol.out, tie_gap=max(-m, 0.0))
        if self.tighten:  # successors of Inv only: may rule out leaving B through some faces
            x1 = tighten_columns(milp, x1, only_straddling=False, integer=b.integer)
        g_1 = encode_network(milp, g, x1, tighten=self.tighten).out
        # violation: g(x') ≤ m, or x'_i ≥ hi_i − m, or x'_i ≤ lo_i + m (binaries z, Σ z ≥ 1)
        z_idx, obj_idx, obj_coef = [], list(g_x.idx) + list(g_1.idx), [1.0, -1.0]
        z0 = new_vars(milp, [0.0], [1.0], integer=True).idx[0]
        big = max(float(g_1.hi[0]) - m, 0.0)
        milp.add_row([g_1.idx[0], z0], [1.0, big], hi=m + big)  # z0 = 1 ⇒ g(x') ≤ m
        z_idx.append(z0)
        step = 1.0 if b.integer else 0.0  # integer states leave B only by a whole unit
        for i in range(b.state_dim):
            faces = ((1.0, b.box.hi[i] + step, x1.hi[i]), (-1.0, -(b.box.lo[i] - step), -x1.lo[i]))
            for sign, outside, reach in faces:
                edge = outside - (m if step == 0.0 else 0.5)
                if reach <= sign * (b.box.hi[i] if sign > 0 else b.box.lo[i]) or reach < edge:
                    continue  # the bounds already keep x' inside B on this face
                z = new_vars(milp, [0.0], [1.0], integer=True).idx[0]
                depth = new_vars(milp, [0.0], [reach - edge]).idx[0]
                span = edge - sign * (x1.lo[i] if sign > 0 else x1.hi[i])  # max of edge − sign·x'_i
                milp.add_row(
                    [x1.idx[i], z], [sign, -span], lo=edge - span
                )  # z = 1 ⇒ sign·x'_i ≥ edge
                milp.add_row(
                    [depth, x1.idx[i], z], [1.0, -sign, span], hi=span - edge
                )  # depth ≤ sign·x'_i − edge
                milp.add_row([depth, z], [1.0, -(reach - edge)], hi=0.0)  # depth ≤ 0 unless z
                z_idx.append(z)
                obj_idx.append(depth)
                obj_coef.append(1.0)
        milp.add_row(z_idx, np.ones(len(z_idx)), lo=1.0)
        milp.set_objective(obj_idx, obj_coef, maximize=True)
        return _Query(milp, x, pol, x1)

    def check_closure(self, g: ReluNetwork) -> Verdict:
        """Is there ``x ∈ Inv`` and ``w ∈ W_ε`` with ``f(x, π_w(x)) ∉ Inv``? One question per
        piece of the step box (``closure_splits``), the pieces solved on the pool and combined
        by :func:`combine` once all are answered."""

        def decide_on(region: Box | None) -> Verdict:
            pooled = region is not None

            def build(m: float) -> tuple[Milp, Replay]:
                q = self.closure_query(g, m, region)

                def replay(sol: np.ndarray) -> ReplayReport:
                    targets = [p.value(sol) for p in q.policy.pre]  # type: ignore[union-attr]
                    return replay_closure(self.bench, self.policy, g, q.x.value(sol), targets)

                return q.milp, replay

            return self._decide("closure", build, self.strict_closure, pooled)

        if len(self.regions) == 1:
            return decide_on(None)
        if self.pool is None or not self.pool.parallel:
            return combine([decide_on(r) for r in self.regions])
        with ThreadPoolExecutor(self.pool.workers, thread_name_prefix="closure-piece") as threads:
            return combine(list(threads.map(decide_on, self.regions)))

    def check_initial(self, g: ReluNetwork) -> Verdict:
        """Is there ``x ∈ X0`` with ``g(x) < 0``? One MILP per piece of ``X0``."""
        b = self.bench

        def build(m: float, k: int, piece: Piece) -> tuple[Milp, Replay]:
            milp = Milp()
            x = state_vars(milp, piece.box.lo, piece.box.hi, b.integer)
            add_polytope(milp, x, piece.rows, max(m, 0.0))  # replay snaps onto the piece
            out = encode_network(milp, g, x).out
            milp.add_row(out.idx, [1.0], hi=m)
            milp.set_objective(out.idx, [1.0], maximize=False)
            return milp, lambda sol: replay_initial(b, g, x.value(sol), k)

        return self._per_piece("initial", b.initial.pieces, build)

    def check_unsafe(self, g: ReluNetwork) -> Verdict:
        """Is there ``x ∈ X_u ∩ B`` with ``g(x) ≥ 0``? One MILP per piece of ``X_u``."""
        b = self.bench

        def build(m: float, k: int, piece: Piece) -> tuple[Milp, Replay]:
            milp = Milp()
            x = state_vars(milp, piece.box.lo, piece.box.hi, b.integer)
            add_polytope(milp, x, piece.rows, max(m, 0.0))  # replay snaps onto the piece
            out = encode_network(milp, g, x).out
            milp.add_row(out.idx, [1.0], lo=-m)
            milp.set_objective(out.idx, [1.0], maximize=True)
            return milp, lambda sol: replay_unsafe(b, g, x.value(sol), k)

        return self._per_piece("unsafe", b.unsafe.pieces, build)

    def _per_piece(
        self,
        condition: Condition,
        pieces: Sequence[Piece],
        build: Callable[[float, int, Piece], tuple[Milp, Replay]],
    ) -> Verdict:
        checks: list[CheckResult] = []
        spurious: list[ReplayReport] = []
        for k, piece in enumerate(pieces):
            verdict = self._decide(
                condition,
                lambda m, k=k, piece=piece: build(m, k, piece),  # type: ignore[misc]
            )
            checks.extend(verdict.checks)
            if isinstance(verdict, Counterexample):
                return verdict.with_checks(tuple(checks))
            if isinstance(verdict, Unknown):
                spurious.extend(verdict.spurious)
        return summarise(checks, spurious)

    # ---- internals ------------------------------------------------------------------------
    def _solve(self, milp: Milp, first: bool, pooled: bool = False) -> SolveResult:
        """One MILP under the verifier's settings; ``pooled``: on the pool (a closure piece)."""
        run = self.pool.solve if pooled and self.pool is not None else solve
        return run(
            milp,
            self.solver,
            time_limit_s=self.time_limit_s,
            stop_at_first=first,
            threads=self.threads,
            keep_incumbents=self.incumbents,
            node_limit=self.node_limit,
        )

    def _decide(
        self, condition: Condition, build: Builder, strict_first: bool = False, pooled: bool = False
    ) -> Verdict:
        return decide(
            condition,
            build,
            lambda milp, first: self._solve(milp, first, pooled),
            self.first_feasible,
            self.margin,
            self.robust_margin,
            strict_first=strict_first,
        )


def decide(
    condition: Condition,
    build: Builder,
    solve_fn: Callable[[Milp, bool], SolveResult],
    first_feasible: bool,
    margin: float,
    robust_margin: float,
    *,
    strict_first: bool = False,
) -> Verdict:
    """Decide one question. ``build(m)`` returns the MILP relaxed by ``m`` and its replay.

    1. Solve the relaxation (``m = margin``): infeasible ⇒ no violation (sound up to tolerances).
    2. A witness that replays in float64 is a counterexample.
    3. Otherwise the witness sits within the solver's tolerance of the boundary: ask the strict
       question (``m = −robust_margin``), first feasible then optimal, and replay its witness.
       If none replays, the answer is ``Unknown`` with the witnesses in ``spurious``.

    ``strict_first``: ask the strict question first and stop at a witness that replays (one MILP
    where the relaxed witness would sit on the margin and not replay). Only when it is infeasible
    (no violation by more than ``robust_margin``) is the relaxed question asked; a proof still
    needs that relaxed query to be infeasible, so the verdicts are those of the default order.
    """
    checks: list[CheckResult] = []
    spurious: list[ReplayReport] = []
    if strict_first:
        attempts = [(-robust_margin, False), (margin, first_feasible)]
    else:
        attempts = [(margin, first_feasible), (-robust_margin, first_feasible)]
        if first_feasible:
            attempts.append((-robust_margin, False))
    for step, (m, first) in enumerate(attempts):
        milp, replay = build(m)
        res = solve_fn(milp, first)
        rep: ReplayReport | None = None
        if res.status == "feasible" and res.values is not None:
            rep = replay(res.values)
            status: CheckStatus = "counterexample" if rep.ok else "spurious"
            detail = rep.detail
        else:
            status = _STATUS[res.status]  # infeasible / node limit / timeout / error
            detail = res.message
        if status == "infeasible" and m < 0:  # the strict question
            detail = (
                "only violations within the solver margin"
                if step > 0
                else f"no violation by more than {robust_margin:g}"
            )
        checks.append(
            CheckResult(
                condition, status, res.solver, res.runtime_s, milp.n_vars, milp.n_integer, detail
            )
        )
        if rep is not None and rep.ok:
            more = _replayed_pool(res, replay, rep)
            return Counterexample(condition, rep.x, rep, tuple(checks), rep.x_next, more)
        if strict_first and step == 0 and status == "infeasible":
            continue  # no robust violation: now the relaxed query, whose infeasibility proves
        if rep is None:
            break  # infeasible, timeout or error: nothing more to learn
        spurious.append(rep)
        if res.optimal and step > 0:
            break
    return summarise(checks, spurious)


#: a solve without a witness, as a check's status (a "feasible" one without values is an error)
_STATUS: dict[str, CheckStatus] = {
    "infeasible": "infeasible",
    "node_limit": "node limit",
    "timeout": "timeout",
    "error": "error",
    "feasible": "error",
}


def _replayed_pool(
    res: SolveResult, replay: Replay, first: ReplayReport
) -> tuple[ReplayReport, ...]:
    """The solver's other incumbents that replay as violations, one per distinct state."""
    seen = {first.x.tobytes()}
    out: list[ReplayReport] = []
    for values in res.pool:
        rep = replay(values)
        if rep.ok and rep.x.tobytes() not in seen:
            seen.add(rep.x.tobytes())
            out.append(rep)
    return tuple(out)


def split_box(box: Box, splits: int, integer: bool = False) -> list[Box]:
    """``box`` cut in ``2**splits`` pieces whose union is ``box``: the ``k``-th cut halves every
    piece along state dimension ``k mod d`` (on integer states at an integer, each half keeping
    its integer points; a piece with a single integer value there is not cut). Pieces in a fixed
    order: the lower half before the upper one, cut by cut."""
    if splits < 0:
        raise ConfigError(f"must be >= 0, got {splits}", field="verifier.closure_splits")
    pieces = [box]
    for k in range(splits):
        d = k % box.dim
        out: list[Box] = []
        for p in pieces:
            lo, hi = float(p.lo[d]), float(p.hi[d])
            mid = (lo + hi) / 2.0
            upper_lo = mid
            if integer:
                mid = float(np.floor(mid))
                upper_lo = mid + 1.0
                if upper_lo > hi:
                    out.append(p)
                    continue
            low_hi, high_lo = p.hi.copy(), p.lo.copy()
            low_hi[d], high_lo[d] = mid, upper_lo
            out += [Box(p.lo, low_hi), Box(high_lo, p.hi)]
        pieces = out
    return pieces


def combine(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict from the answers of the pieces of one question (in piece order), whatever
    order they were solved in: every piece's checks; a wall-clock guard that fired in any piece
    gives :class:`Unknown` (what the other pieces found depends on the machine); else the
    counterexample of the lowest piece that has one, with the other pieces' replayed violations
    in ``more`` (one per distinct state); else :func:`summarise` (a proof when every piece is
    infeasible)."""
    checks = tuple(c for v in verdicts for c in v.checks)
    spurious = [r for v in verdicts if isinstance(v, Unknown) for r in v.spurious]
    cexs = [v for v in verdicts if isinstance(v, Counterexample)]
    if cexs and not any(c.status == "timeout" for c in checks):
        first = cexs[0]
        seen = {first.x.tobytes()}
        more: list[ReplayReport] = []
        for rep in [*first.more, *(r for v in cexs[1:] for r in (v.replay, *v.more))]:
            if rep.x.tobytes() not in seen:
                seen.add(rep.x.tobytes())
                more.append(rep)
        return Counterexample(
            first.condition, first.x, first.replay, checks, first.x_next, tuple(more)
        )
    return summarise(checks, spurious)


def summarise(checks: Sequence[CheckResult], spurious: Sequence[ReplayReport]) -> Verdict:
    bad = [c for c in checks if c.status in INCONCLUSIVE]
    if not bad and not spurious and all(c.status == "infeasible" for c in checks):
        return Proof(tuple(checks))
    reasons = sorted(
        {f"{c.condition}: {c.status}" for c in bad}
        | {"witness did not replay" for _ in spurious[:1]}
    )
    return Unknown("; ".join(reasons), tuple(checks), tuple(spurious))


def _check_candidate(g: ReluNetwork, dim: int) -> None:
    if g.in_dim != dim or g.out_dim != 1:
        raise ConfigError(
            f"invariant network maps {g.in_dim} → {g.out_dim}",
            field="invariant",
            fix=f"use a {dim} → … → 1 network",
        )


def add_polytope(milp: Milp, x: Bounded, poly: Polytope, margin: float) -> None:
    for a, rhs in zip(poly.A, poly.b, strict=True):
        milp.add_row(x.idx, a, hi=float(rhs) + margin)
