"""Cost of one hand-off of user code (φ, a Python action map) to its deadline worker and back
(``safecert.shield.deadline``), with a direct call of the same function as the baseline, all in
one process: ``call_with_deadline`` from a thread (``guarded``, the sandbox's guard), and
``acall_with_deadline`` awaited on an event loop, with the stdio gateway's wait on the loop's
thread (``wait_on_loop(LOOP_WAIT_S)``) and without it (the HTTP gateway: the answer comes back
through the loop's self-pipe). ``--build NAME=SRC`` loads ``deadline.py`` of another source tree
(a directory, e.g. ``old=/tmp/old/src``, or a git revision, e.g. ``old=9fb03c3``) beside this
one's (``new``), and ``call_with_deadline`` from a caller moved to the other of two CPUs before
every call (the worst case of a caller that moves: the sandbox's φ on an idle box);
its own ``LOOP_WAIT_S`` is used. Each repeat times every route of every build in an order that
rotates from repeat to repeat; figures are the median [min–max] over repeats of each route's p50
and p99, and its CPU time per hand-off (the process's, both threads).

    .venv/bin/python benchmarks/guard_handoff.py [--calls 20000] [--repeats 5]
        [--build old=/tmp/old/src] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from guard_overhead import build_tree

ROOT = Path(__file__).resolve().parents[1]


def _phi(history: list) -> dict:
    return {"looked_up": bool(history)}


def _load(name: str, src: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"deadline_{name}", src / "safecert" / "shield" / "deadline.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(calls: int, once: Any) -> dict[str, float]:
    ns = np.empty(calls, dtype=np.int64)
    clock = time.perf_counter_ns
    cpu0 = time.process_time_ns()
    for i in range(calls):
        t0 = clock()
        once()
        ns[i] = clock() - t0
    return _summary(ns, time.process_time_ns() - cpu0)


def _moving(module: ModuleType, calls: int) -> dict[str, float]:
    """``call_with_deadline`` from a caller moved to the other of two CPUs before every call
    (``sched_setaffinity`` of the caller, not timed): the worst case of a caller that moves."""
    allowed = os.sched_getaffinity(0)
    cpus = sorted(allowed)[:2]
    ns = np.empty(calls, dtype=np.int64)
    clock = time.perf_counter_ns
    cpu_ns = 0
    try:
        for i in range(calls):
            os.sched_setaffinity(0, {cpus[i % len(cpus)]})
            c0, t0 = time.process_time_ns(), clock()
            module.call_with_deadline(_phi, ([],), 2.0)
            ns[i] = clock() - t0
            cpu_ns += time.process_time_ns() - c0
    finally:
        os.sched_setaffinity(0, allowed)
    return _summary(ns, cpu_ns)


def _summary(ns: np.ndarray, cpu_ns: int) -> dict[str, float]:
    """Percentiles of the per-call times ``ns`` and the CPU per call, in µs."""
    us = ns / 1000.0
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "cpu_us": cpu_ns / len(ns) / 1000.0,
    }


def _awaited(module: ModuleType, calls: int, wait: bool) -> dict[str, float]:
    async def run() -> dict[str, float]:
        if wait:
            module.wait_on_loop(module.LOOP_WAIT_S)
        ns = np.empty(calls, dtype=np.int64)
        clock = time.perf_counter_ns
        cpu0 = time.process_time_ns()
        for i in range(calls):
            t0 = clock()
            await module.acall_with_deadline(_phi, ([],), 2.0)
            ns[i] = clock() - t0
        return _summary(ns, time.process_time_ns() - cpu0)

    return asyncio.run(run())


def measure(calls: int, repeats: int, builds: dict[str, ModuleType]) -> dict[str, Any]:
    routes: dict[str, Any] = {"direct call": lambda: _timed(calls, lambda: _phi([]))}
    for name, module in builds.items():
        routes[f"call_with_deadline [{name}]"] = lambda m=module: _timed(
            calls, lambda: m.call_with_deadline(_phi, ([],), 2.0)
        )
        routes[f"awaited, loop wait [{name}]"] = lambda m=module: _awaited(m, calls, True)
        routes[f"awaited, via the loop [{name}]"] = lambda m=module: _awaited(m, calls, False)
        if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
            routes[f"caller moved every call [{name}]"] = lambda m=module: _moving(m, calls)
    names = list(routes)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    loads = []
    for r in range(repeats):
        loads.append(os.getloadavg()[0])
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rounds[name].append(routes[name]())
    return {
        "calls": calls,
        "repeats": repeats,
        "load_average_1min": {"min": min(loads), "max": max(loads)},
        "routes": {
            name: {
                q: {
                    "median": float(np.median([x[q] for x in got])),
                    "min": min(x[q] for x in got),
                    "max": max(x[q] for x in got),
                }
                for q in ("p50_us", "p99_us", "cpu_us")
            }
            for name, got in rounds.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--build", action="append", default=[], metavar="NAME=SRC")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    builds = {"new": _load("new", ROOT / "src")}
    with contextlib.ExitStack() as keep:
        for spec in args.build:
            name, _, src = spec.partition("=")
            builds[name] = _load(name, build_tree(src, keep))
    res = measure(args.calls, args.repeats, builds)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2) + "\n")
        return
    print(f"µs, median [min–max] over {args.repeats} repeats of {args.calls} hand-offs")
    for name, v in res["routes"].items():
        cells = "  ".join(
            f"{q.removesuffix('_us')} {v[q]['median']:7.1f} [{v[q]['min']:.1f}–{v[q]['max']:.1f}]"
            for q in v
        )
        print(f"{name:34s} {cells}")
    load = res["load_average_1min"]
    print(f"load average {load['min']:.1f}–{load['max']:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
