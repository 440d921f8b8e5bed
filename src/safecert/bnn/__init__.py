"""Infinite-horizon safety of Bayesian neural-network policies (docs/methods.md).

Modules: ``networks`` (ReLU networks, Bayesian spec, weight box), ``bounds`` (interval and LP
bounds), ``encoding`` (MILP encodings), ``dynamics`` (the three benchmarks), ``solvers`` (HiGHS /
SCIP sessions), ``replay`` (float64 replay of counterexamples), ``verifier`` (the three checks of a
positive-invariant certificate). Import the submodules directly; this package imports nothing heavy.
"""
