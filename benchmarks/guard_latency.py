"""Latency of one guard check (target: p99 ≤ 50 µs), measured with ``time.perf_counter_ns``.

Three timings in one process, each over ``--checks`` calls, tools cycling through the catalogue
(half of them forbidden in the measured state):

* ``baseline`` — a bare ``tool in table[state]`` lookup (what any gate costs, plus timer overhead);
* ``guard (constant abstraction)`` — :meth:`Guard.check` with a precomputed state label: lock,
  fail-closed checks, counters;
* ``guard (real sandbox abstraction)`` — :meth:`Guard.check` with ``Sandbox.state``: the
  predicates recomputed from the transcript facts and an ``lstat`` of ``production/`` each time.

    .venv/bin/python benchmarks/guard_latency.py [--checks 200000] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from safecert.shield.guard import Guard
from safecert.shield.sandbox import TOOLS, Sandbox, all_live_labels


def _percentiles(ns: np.ndarray) -> dict:
    us = ns / 1000.0
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "p999_us": float(np.percentile(us, 99.9)),
        "mean_us": float(us.mean()),
    }


def measure(checks: int) -> dict:
    table = {lab: {"read", "write", "halt"} for lab in all_live_labels()}
    clock = time.perf_counter_ns
    tools = [TOOLS[i % len(TOOLS)] for i in range(checks)]
    out = {}
    ns = np.empty(checks, dtype=np.int64)
    frozen = {k: frozenset(v) for k, v in table.items()}
    for i, tool in enumerate(tools):
        t0 = clock()
        _ = tool in frozen["{}"]
        ns[i] = clock() - t0
    out["baseline (dict lookup)"] = _percentiles(ns)
    guard = Guard(table, lambda: "{}", actions=TOOLS)
    for i, tool in enumerate(tools):
        t0 = clock()
        guard.check(tool)
        ns[i] = clock() - t0
    out["guard (constant abstraction)"] = _percentiles(ns)
    with Sandbox(np.random.default_rng(0)) as sb:
        guard = Guard(table, sb.state, actions=TOOLS)
        for i, tool in enumerate(tools):
            t0 = clock()
            guard.check(tool)
            ns[i] = clock() - t0
        out["guard (real sandbox abstraction)"] = _percentiles(ns)
    base = out["baseline (dict lookup)"]["p50_us"]
    for v in out.values():
        v["p50_ratio_to_baseline"] = v["p50_us"] / base if base > 0 else None
    return {"checks": checks, "target_p99_us": 50.0, "timings": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--checks", type=int, default=200_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.checks)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2) + "\n")
        return 0
    for name, v in res["timings"].items():
        print(f"{name:36s} p50 {v['p50_us']:7.2f} µs  p99 {v['p99_us']:7.2f} µs  "
              f"p99.9 {v['p999_us']:7.2f} µs  (p50 ×{v['p50_ratio_to_baseline']:.1f} baseline)")  # fmt: skip
    ok = res["timings"]["guard (real sandbox abstraction)"]["p99_us"] <= 50.0
    print(f"target p99 ≤ 50 µs with the real abstraction: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
