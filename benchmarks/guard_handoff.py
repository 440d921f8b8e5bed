"""Cost of running user code (φ, the action map) under its deadline from the gateway's event loop:
``acall_with_deadline`` (awaited; the worker wakes the loop) against the former route (an anyio
worker thread blocked in ``call_with_deadline``), with a direct call of the same function as the
baseline, all in one run.

    .venv/bin/python benchmarks/guard_handoff.py [--calls 5000]
"""

from __future__ import annotations

import argparse
import time

import anyio
import numpy as np

from safecert.shield.deadline import acall_with_deadline, call_with_deadline


def _phi(history: list) -> dict:
    return {"looked_up": bool(history)}


async def measure(calls: int) -> dict[str, tuple[float, float]]:
    out = {}
    routes = {
        "direct call": None,
        "acall_with_deadline (awaited)": "async",
        "to_thread(call_with_deadline)": "thread",
    }
    for name, route in routes.items():
        ns = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            if route is None:
                _phi([])
            elif route == "async":
                await acall_with_deadline(_phi, ([],), 2.0)
            else:
                await anyio.to_thread.run_sync(call_with_deadline, _phi, ([],), 2.0)
            ns.append(time.perf_counter_ns() - t0)
        us = np.asarray(ns[calls // 10 :]) / 1000.0
        out[name] = (float(np.percentile(us, 50)), float(np.percentile(us, 99)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=5000)
    args = ap.parse_args()
    res = anyio.run(measure, args.calls)
    for name, (p50, p99) in res.items():
        print(f"{name:32s} p50 {p50:8.1f} µs  p99 {p99:8.1f} µs")


if __name__ == "__main__":
    main()
