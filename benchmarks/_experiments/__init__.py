"""Experiment-only code shared by the benchmark scripts and by the tests that check it.

Not part of the tool: the 7×7 grid of paper Sec. V-A (:mod:`.gridworld`), the Table III /
Experiment 4 helpers on the sandbox (:mod:`.sandbox_experiments`) and the prompt-injected agent of
Experiment 3 (:mod:`.agents`). Benchmark scripts run as ``python benchmarks/NAME.py`` import it as
``_experiments``; the tests import it as ``benchmarks._experiments`` (the repository root is on
``sys.path`` under pytest).
"""
