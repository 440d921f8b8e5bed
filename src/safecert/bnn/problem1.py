"""Problem 1 of the BNN-safety paper (docs/methods.md): does every network with weights in a box
map an input box away from a set of unsafe outputs?

One MILP per unsafe polytope over the network's outputs, with the verifier's exact interval-weight
encoding (:func:`~safecert.bnn.encoding.encode_network`) and its decision procedure
(:func:`~safecert.bnn.verifier.decide`): an infeasible relaxed query proves the polytope
unreachable (up to the solver's tolerance, covered by ``margin``); a feasible one gives a witness
that is replayed in float64 with concrete weights in the box before it counts as a
counterexample. :func:`output_extreme` bounds one direction of the output, soundly from above.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from safecert.bnn.encoding import Bounded, NetworkEncoding, encode_network, new_vars, state_vars
from safecert.bnn.replay import ReplayReport, replay_output
from safecert.bnn.sets import Box, Polytope
from safecert.bnn.solvers import Milp, SolveResult, solve
from safecert.bnn.spec import WeightBox
from safecert.bnn.verifier import (
    CheckResult,
    Counterexample,
    Replay,
    Unknown,
    Verdict,
    add_polytope,
    decide,
    summarise,
)


def output_extreme(
    box: WeightBox,
    in_box: Box,
    direction: np.ndarray,
    *,
    solver: str = "highs",
    tighten: bool = False,
    integer: bool = False,
    time_limit_s: float | None = None,
) -> tuple[SolveResult, Bounded, NetworkEncoding]:
    """``max_{x ∈ in_box, W ∈ box} direction · π_W(x)`` (``SolveResult.bound`` is a sound upper bound)."""
    milp = Milp()
    x = state_vars(milp, in_box.lo, in_box.hi, integer)
    enc = encode_network(milp, box, x, tighten=tighten)
    milp.set_objective(enc.out.idx, direction, maximize=True)
    return solve(milp, solver, time_limit_s=time_limit_s), x, enc


def check_problem1(
    box: WeightBox,
    in_box: Box,
    unsafe_outputs: Sequence[Polytope],
    *,
    solver: str = "highs",
    tighten: bool = False,
    time_limit_s: float | None = 60.0,
    margin: float = 1e-6,
) -> Verdict:
    """Problem 1: does every network with weights in ``box`` map ``in_box`` outside the union of
    ``unsafe_outputs`` (polytopes over the outputs)? One MILP per polytope, witnesses replayed."""
    checks: list[CheckResult] = []
    spurious: list[ReplayReport] = []
    for poly in unsafe_outputs:

        def build(m: float, poly: Polytope = poly) -> tuple[Milp, Replay]:
            milp = Milp()
            x = state_vars(milp, in_box.lo, in_box.hi)
            enc = encode_network(milp, box, x, tighten=tighten)
            add_polytope(milp, enc.out, poly, m)
            # push witnesses inside the polytope: maximise the smallest slack
            slack = new_vars(milp, [-1e6], [1e6]).idx[0]
            for a, rhs in zip(poly.A, poly.b, strict=True):
                milp.add_row(
                    np.concatenate([enc.out.idx, [slack]]),
                    np.concatenate([a, [1.0]]),
                    hi=float(rhs),
                )
            milp.set_objective([slack], [1.0], maximize=True)

            def replay(sol: np.ndarray) -> ReplayReport:
                return replay_output(
                    box, x.value(sol), [p.value(sol) for p in enc.pre], in_box, poly
                )

            return milp, replay

        def solve_fn(m: Milp, first: bool) -> SolveResult:
            return solve(m, solver, time_limit_s=time_limit_s, stop_at_first=first)

        verdict = decide("problem1", build, solve_fn, True, margin, 1e-5)
        checks.extend(verdict.checks)
        if isinstance(verdict, Counterexample):
            return Counterexample(
                "problem1", verdict.x, verdict.replay, tuple(checks), verdict.x_next
            )
        if isinstance(verdict, Unknown):
            spurious.extend(verdict.spurious)
    return summarise(checks, spurious)
