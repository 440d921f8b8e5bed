"""A solver-neutral MILP container and thin sessions over HiGHS (default) and SCIP.

:class:`Milp` holds columns (bounds, integrality), rows ``lo ≤ a·x ≤ hi`` and a linear objective.
:func:`solve` hands it to ``highspy`` or ``pyscipopt`` and maps the outcome to a
:class:`SolveResult` with status

* ``"infeasible"`` — the solver proved that no point satisfies the rows within its tolerances;
* ``"feasible"`` — ``values`` holds a witness (``optimal`` says whether it is proven optimal;
  ``bound`` is the solver's dual bound on the objective, valid even when stopped early);
* ``"node_limit"`` — the branch-and-bound node budget (``node_limit``) was spent without a witness
  or a proof: a deterministic outcome, the same on every machine;
* ``"timeout"`` — the wall-clock guard (``time_limit_s``) passed without a witness or a proof: it
  depends on the machine and its load;
* ``"error"`` — anything else (``message`` says what).

Budgets are counted in work so that equal inputs give equal answers on any machine: ``node_limit``
is HiGHS's ``mip_max_nodes`` and SCIP's ``limits/totalnodes``; every solve runs on one thread with
a fixed random seed (HiGHS ``threads = 1``, ``random_seed = 0``; SCIP ``randomseedshift = 0``,
``parallel/maxnthreads = 1``). ``time_limit_s`` is only an outer guard. (HiGHS 1.16's
``simplex_iteration_limit`` does not bound a MILP's total work — it applies to each LP — so the
node budget is the one work limit here.)

``stop_at_first=True`` stops at the first feasible point (``mip_max_improving_sols = 1`` in
HiGHS, ``limits/solutions = 1`` in SCIP): use it where any witness will do.

Assumption: floating-point MILP solvers decide feasibility up to their tolerances (≈1e-6 here);
callers that need a margin add it to the query (see :mod:`safecert.bnn.verifier`), and every witness
is re-checked in float64 by :mod:`safecert.bnn.replay`.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from safecert.errors import SolverError

if TYPE_CHECKING:
    import highspy

SOLVERS = ("highs", "scip")
Status = Literal["infeasible", "feasible", "node_limit", "timeout", "error"]


@dataclass
class Milp:
    """Columns with bounds and integrality, sparse rows ``lo ≤ Σ coef·x[idx] ≤ hi``, objective."""

    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    rows: list[tuple[np.ndarray, np.ndarray, float, float]] = field(default_factory=list)
    objective: dict[int, float] = field(default_factory=dict)
    maximize: bool = True

    @property
    def n_vars(self) -> int:
        return len(self.lb)

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def n_integer(self) -> int:
        return int(sum(self.integer))

    def add_vars(self, lo: ArrayLike, hi: ArrayLike, integer: bool = False) -> np.ndarray:
        """New columns with bounds ``lo ≤ x ≤ hi``; returns their indices."""
        lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
        hi = np.atleast_1d(np.asarray(hi, dtype=np.float64))
        start = self.n_vars
        self.lb.extend(lo.tolist())
        self.ub.extend(hi.tolist())
        self.integer.extend([integer] * lo.size)
        return np.arange(start, start + lo.size)

    def add_row(
        self, idx: ArrayLike, coef: ArrayLike, lo: float = -math.inf, hi: float = math.inf
    ) -> None:
        cols: np.ndarray = np.asarray(idx, dtype=np.int64).reshape(-1)
        vals: np.ndarray = np.asarray(coef, dtype=np.float64).reshape(-1)
        if np.unique(cols).size != cols.size:  # merge repeated columns (solvers reject duplicates)
            cols, inverse = np.unique(cols, return_inverse=True)
            vals = np.bincount(inverse, weights=vals, minlength=cols.size)
        keep = vals != 0.0
        self.rows.append((cols[keep], vals[keep], float(lo), float(hi)))

    def set_objective(self, idx: ArrayLike, coef: ArrayLike, maximize: bool = True) -> None:
        self.objective = {}
        for i, c in zip(
            np.asarray(idx).reshape(-1), np.asarray(coef, dtype=np.float64).reshape(-1), strict=True
        ):
            self.objective[int(i)] = self.objective.get(int(i), 0.0) + float(c)
        self.maximize = maximize

    def copy(self) -> Milp:
        return Milp(
            list(self.lb),
            list(self.ub),
            list(self.integer),
            list(self.rows),
            dict(self.objective),
            self.maximize,
        )

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row-wise sparse matrix ``(start, index, value)``."""
        lens = [r[0].size for r in self.rows]
        start = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        index = (
            np.concatenate([r[0] for r in self.rows]).astype(np.int32)
            if self.rows
            else np.zeros(0, np.int32)
        )
        value = np.concatenate([r[1] for r in self.rows]) if self.rows else np.zeros(0)
        return start, index, value

    def violation(self, x: np.ndarray) -> float:
        """Largest violation of a bound, row or integrality by the point ``x`` (0 when feasible)."""
        x = np.asarray(x, dtype=np.float64)
        lb, ub = np.asarray(self.lb), np.asarray(self.ub)
        worst = float(np.max(np.maximum(lb - x, 0.0) + np.maximum(x - ub, 0.0), initial=0.0))
        ints = np.asarray(self.integer, dtype=bool)
        if ints.any():
            worst = max(worst, float(np.max(np.abs(x[ints] - np.round(x[ints])))))
        for idx, coef, lo, hi in self.rows:
            v = float(coef @ x[idx])
            worst = max(worst, lo - v, v - hi)
        return worst


@dataclass(frozen=True)
class SolveResult:
    """Outcome of one solve (see the module docstring for the statuses)."""

    status: Status
    solver: str
    runtime_s: float
    values: np.ndarray | None = None
    objective: float | None = None
    bound: float | None = None
    optimal: bool = False
    message: str = ""
    #: with ``keep_incumbents``: the other feasible points the solver found on the way (earlier
    #: incumbents, each feasible within tolerances; not replayed, not optimal)
    pool: tuple[np.ndarray, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.status == "feasible"


_BANNER_LOCK = threading.Lock()
_banner_done = False


def new_highs(threads: int = 1) -> highspy.Highs:
    """A silent ``highspy.Highs`` instance on ``threads`` threads.

    HiGHS 1.16 writes its banner to C ``stdout`` while the *first* instance of a process is built,
    before any option can be set. That first construction therefore runs with file descriptor 1
    pointed at ``os.devnull`` (C buffers flushed before the descriptor is restored), so nothing a
    solver does reaches stdout — ``--json`` output stays parseable. Later instances print nothing
    with ``output_flag`` off and are built directly.
    """
    import highspy

    global _banner_done
    with _BANNER_LOCK:
        if _banner_done:
            h = highspy.Highs()
        else:
            sys.stdout.flush()
            saved = os.dup(1)
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, 1)
                h = highspy.Highs()
                ctypes.CDLL(None).fflush(None)
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(null)
            _banner_done = True
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", threads)
    return h


def _highs_lp(milp: Milp) -> Any:  # a highspy.HighsLp
    """The continuous part of ``milp`` as a HiGHS LP: bounds, rows (CSR), zero objective."""
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_ = milp.n_vars
    lp.num_row_ = milp.n_rows
    lp.col_cost_ = np.zeros(milp.n_vars)
    lp.col_lower_ = np.asarray(milp.lb)
    lp.col_upper_ = np.asarray(milp.ub)
    lp.row_lower_ = np.array([r[2] for r in milp.rows])
    lp.row_upper_ = np.array([r[3] for r in milp.rows])
    start, index, value = milp.csr()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    return lp


def _highs(
    milp: Milp,
    time_limit_s: float | None,
    stop_at_first: bool,
    gap: float,
    threads: int,
    feastol: float | None,
    keep_incumbents: bool = False,
    node_limit: int | None = None,
) -> SolveResult:
    import highspy

    h = new_highs(threads)
    h.setOptionValue("random_seed", 0)
    if feastol is not None:
        for opt in ("primal_feasibility_tolerance", "mip_feasibility_tolerance"):
            h.setOptionValue(opt, feastol)
    h.setOptionValue("mip_rel_gap", gap)
    if time_limit_s is not None:
        h.setOptionValue("time_limit", float(time_limit_s))
    if node_limit is not None:
        h.setOptionValue("mip_max_nodes", int(node_limit))
    if stop_at_first:
        h.setOptionValue("mip_max_improving_sols", 1)
    if keep_incumbents and milp.n_integer:
        h.setOptionValue("mip_improving_solution_save", True)
    lp = _highs_lp(milp)
    cost = np.zeros(milp.n_vars)
    for i, c in milp.objective.items():
        cost[i] = c
    lp.col_cost_ = cost
    if milp.n_integer:
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if f else highspy.HighsVarType.kContinuous
            for f in milp.integer
        ]
    lp.sense_ = highspy.ObjSense.kMaximize if milp.maximize else highspy.ObjSense.kMinimize
    t0 = time.perf_counter()
    h.passModel(lp)
    h.run()
    runtime = time.perf_counter() - t0
    ms = h.getModelStatus()
    info = h.getInfo()
    has_sol = info.primal_solution_status == 2
    S = highspy.HighsModelStatus
    bound = float(info.mip_dual_bound) if milp.n_integer else float(info.objective_function_value)
    if ms in (S.kInfeasible, S.kUnboundedOrInfeasible) and all(
        map(math.isfinite, milp.lb + milp.ub)
    ):
        return SolveResult("infeasible", "highs", runtime)
    if has_sol and ms in (
        S.kOptimal,
        S.kTimeLimit,
        S.kSolutionLimit,
        S.kInterrupt,
        S.kObjectiveBound,
    ):
        values = np.asarray(h.getSolution().col_value, dtype=np.float64)
        pool: tuple[np.ndarray, ...] = ()
        if keep_incumbents and milp.n_integer:
            saved = [np.asarray(p.col_value, dtype=np.float64) for p in h.getSavedMipSolutions()]
            pool = tuple(p for p in saved if not np.array_equal(p, values))
        return SolveResult(
            "feasible",
            "highs",
            runtime,
            values,
            float(info.objective_function_value),
            bound,
            ms == S.kOptimal,
            pool=pool,
        )
    if ms == S.kTimeLimit:
        return SolveResult("timeout", "highs", runtime, bound=bound, message="time limit")
    if ms == S.kSolutionLimit and milp.n_integer:  # without a solution: the node budget
        return SolveResult(
            "node_limit", "highs", runtime, bound=bound, message=f"node limit {node_limit}"
        )
    return SolveResult("error", "highs", runtime, message=h.modelStatusToString(ms))


def _scip(
    milp: Milp,
    time_limit_s: float | None,
    stop_at_first: bool,
    gap: float,
    threads: int,
    feastol: float | None,
    keep_incumbents: bool = False,
    node_limit: int | None = None,
) -> SolveResult:
    import pyscipopt

    m = pyscipopt.Model()
    m.hideOutput()
    m.setParam("randomization/randomseedshift", 0)
    m.setParam("parallel/maxnthreads", max(1, int(threads)))
    m.setParam("limits/gap", gap)
    if feastol is not None:
        m.setParam("numerics/feastol", feastol)
    if time_limit_s is not None:
        m.setParam("limits/time", float(time_limit_s))
    if node_limit is not None:
        m.setParam("limits/totalnodes", int(node_limit))
    if stop_at_first:
        m.setParam("limits/solutions", 1)
    xs = [
        m.addVar(lb=lo, ub=hi, vtype="I" if f else "C", name=f"x{i}")
        for i, (lo, hi, f) in enumerate(zip(milp.lb, milp.ub, milp.integer, strict=True))
    ]
    for idx, coef, lo, hi in milp.rows:
        expr = pyscipopt.quicksum(float(c) * xs[int(i)] for i, c in zip(idx, coef, strict=True))
        if lo == hi:
            m.addCons(expr == lo)
        else:
            if math.isfinite(lo):
                m.addCons(expr >= lo)
            if math.isfinite(hi):
                m.addCons(expr <= hi)
    obj = pyscipopt.quicksum(c * xs[i] for i, c in milp.objective.items())
    m.setObjective(obj, "maximize" if milp.maximize else "minimize")
    t0 = time.perf_counter()
    m.optimize()
    runtime = time.perf_counter() - t0
    status = m.getStatus()
    if status == "infeasible":
        return SolveResult("infeasible", "scip", runtime)
    bound = float(m.getDualbound())
    if m.getNSols() > 0 and status in (
        "optimal",
        "timelimit",
        "sollimit",
        "gaplimit",
        "nodelimit",
        "totalnodelimit",
        "userinterrupt",
    ):
        sol = m.getBestSol()
        assert sol is not None  # getNSols() > 0
        values = np.array([sol[v] for v in xs], dtype=np.float64)
        pool: tuple[np.ndarray, ...] = ()
        if keep_incumbents:
            others = [np.array([s[v] for v in xs], dtype=np.float64) for s in m.getSols()]
            pool = tuple(p for p in others if not np.array_equal(p, values))
        return SolveResult(
            "feasible",
            "scip",
            runtime,
            values,
            float(m.getSolObjVal(sol)),
            bound,
            status == "optimal",
            pool=pool,
        )
    if status == "timelimit":
        return SolveResult("timeout", "scip", runtime, bound=bound, message="time limit")
    if status in ("nodelimit", "totalnodelimit"):
        return SolveResult(
            "node_limit", "scip", runtime, bound=bound, message=f"node limit {node_limit}"
        )
    return SolveResult("error", "scip", runtime, message=status)


def solve(
    milp: Milp,
    solver: str = "highs",
    *,
    time_limit_s: float | None = None,
    stop_at_first: bool = False,
    gap: float = 1e-6,
    threads: int = 1,
    feastol: float | None = None,
    keep_incumbents: bool = False,
    node_limit: int | None = None,
) -> SolveResult:
    """Solve ``milp`` with ``solver`` (``"highs"`` or ``"scip"``); see :class:`SolveResult`.
    ``feastol`` overrides the solvers' feasibility tolerances (default ≈1e-6);
    ``keep_incumbents`` returns the other feasible points found in ``SolveResult.pool``;
    ``node_limit`` is the deterministic budget in branch-and-bound nodes, ``time_limit_s`` the
    wall-clock guard (module docstring)."""
    if solver not in SOLVERS:
        raise SolverError(f"unknown solver {solver!r}", field="solver", fix=f"use one of {SOLVERS}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise SolverError(
            f"time limit must be > 0 s, got {time_limit_s}", field="time_limit_s", fix="use e.g. 60"
        )
    if node_limit is not None and not node_limit >= 1:
        raise SolverError(
            f"node limit must be >= 1, got {node_limit}", field="node_limit", fix="use e.g. 100000"
        )
    run = _highs if solver == "highs" else _scip
    return run(
        milp, time_limit_s, stop_at_first, gap, threads, feastol, keep_incumbents, node_limit
    )


class LpSession:
    """The LP relaxation of a :class:`Milp` kept in one HiGHS instance, re-solved for many
    objectives (used to tighten per-neuron bounds). Integrality is dropped: every LP optimum is a
    valid bound on the MILP's feasible set."""

    def __init__(self, milp: Milp) -> None:

        self._h = new_highs(1)
        h = self._h
        h.passModel(_highs_lp(milp))
        self._n = milp.n_vars
        self._last: int | None = None

    def optimum(self, var: int, maximize: bool) -> float | None:
        """``max``/``min`` of column ``var`` over the relaxation; ``None`` if not solved to optimality
        (``-inf``/``+inf`` never returned: an infeasible relaxation gives ``None`` too)."""
        import highspy

        h = self._h
        if self._last is not None and self._last != var:
            h.changeColCost(self._last, 0.0)
        h.changeColCost(var, 1.0)
        self._last = var
        h.changeObjectiveSense(
            highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
        )
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        return float(h.getInfo().objective_function_value)
