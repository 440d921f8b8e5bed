"""Closure asked strictly first vs relaxed first in CEGIS: LDS at 1σ, same process, same seeds.

Counts the MILP solves (all conditions) and measures the CPU time until 1σ is certified, with
``BnnProblem.strict_closure`` off (relaxed query first, strict re-ask when its witness sits on the
margin and does not replay) and on (strict first; relaxed only to prove). Verdicts must agree.
The order of the two runs alternates from seed to seed (the first run in a process pays warm-up).

    .venv/bin/python benchmarks/bnn_strict_closure.py --seeds 0,1 --json /tmp/strict.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import safecert.bnn.verifier as verifier_module
from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.search import BnnProblem
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import parse_epsilon
from safecert.bnn.system import build_system

_solve = verifier_module.solve
CALLS = {"n": 0}


def _counting_solve(*args, **kwargs):  # the real solver, counted
    CALLS["n"] += 1
    return _solve(*args, **kwargs)


def run(system: str, eps: str, seed: int, strict: bool, limit: float) -> dict:
    cfg = benchmark_config(system, seed=seed, limits={"clock": "cpu", "per_epsilon_s": limit})
    mean, _ = load_policy_network(cfg, None)
    problem = BnnProblem(
        build_system(cfg.system, cfg.dynamics, cfg.sets), mean, bayesian_spec(cfg, mean), cfg
    )
    problem.strict_closure = strict
    CALLS["n"] = 0
    c0, t0 = time.process_time(), time.perf_counter()
    res = problem.run(parse_epsilon(eps))
    return {
        "system": system,
        "epsilon": eps,
        "seed": seed,
        "strict_closure": strict,
        "verdict": res.verdict,
        "cpu_s": round(time.process_time() - c0, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "verifier_s": round(res.runtimes_s.get("verifier_s", 0.0), 2),
        "milp_calls": CALLS["n"],
        "verifier_calls": res.verifier_calls,
        "iterations": res.iterations,
        "spurious": res.spurious,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--system", default="lds")
    ap.add_argument("--epsilon", default="1sigma")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--time-limit", type=float, default=300.0, help="CPU s per run")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    verifier_module.solve = _counting_solve
    rows = []
    for k, seed in enumerate(int(s) for s in args.seeds.split(",")):
        for strict in (False, True) if k % 2 == 0 else (True, False):  # alternate the order
            rows.append(run(args.system, args.epsilon, seed, strict, args.time_limit))
            print(json.dumps(rows[-1]), flush=True)
            if args.json is not None:
                args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
