"""Where the tail of an in-process check with a Python action map comes from: each call of
:meth:`GuardSession.decide` cut into its segments, and the sandbox guard's :meth:`Guard.observe`
with the CPU its caller ran on before and after (target: the check's p99 ≤ 50 µs with the
predicate deadline kept; ``benchmarks/RESULTS_guard.md``).

Segments of one check (``time.perf_counter_ns``; the hand-off's two ends are timed by wrapping
the deadline worker's ``start`` and ``take`` and the action map itself):

* ``pre`` — from the call to the job handed over (the arguments copied, the state's D(s), the
  worker taken from its pool and its ``go`` released);
* ``wake_w`` — from ``go`` released to the action map running on the worker;
* ``job`` — the action map (the payments example's ``phi:action``);
* ``wake_c`` — from the action map's return to the caller holding the answer (``done`` released,
  the caller woken and holding the GIL);
* ``post`` — from the answer to the decision returned (the decision, its audit).

Per build: the percentiles of the whole check and of each segment, which segment is furthest
above its median in each call of the slowest 1 %, how many calls ended on another CPU than they
began (``moved``), and the garbage collections during the timed calls. For ``observe``: p50 and
p99, moved calls and the ``sched_setaffinity`` calls made (a worker moved after its caller).
Every build runs in a child process of its own (``PYTHONPATH`` = its ``src``), builds in turn,
``--repeats`` times.

    .venv/bin/python benchmarks/guard_tail.py [--checks 20000] [--observes 3000] [--repeats 2]
        [--build old=REV_OR_SRC] [--held] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from guard_overhead import build_tree

ROOT = Path(__file__).resolve().parents[1]
PAYMENTS = ROOT / "examples" / "payments"
SEGMENTS = ("pre", "wake_w", "job", "wake_c", "post")


def _check_segments(checks: int) -> dict[str, Any]:
    from safecert.shield import deadline
    from safecert.shield.abstraction import Abstraction
    from safecert.shield.certified import load_certified_shield
    from safecert.shield.session import GuardSession

    getcpu = ctypes.CDLL(None).sched_getcpu
    clock = time.perf_counter_ns
    spec = importlib.util.spec_from_file_location("payments_phi", PAYMENTS / "phi.py")
    assert spec is not None and spec.loader is not None
    phi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(phi)
    shield = load_certified_shield(PAYMENTS / "cert" / "certificate.json")
    stamps = np.zeros((checks, 6), dtype=np.int64)
    cpus = np.zeros((checks, 2), dtype=np.int16)
    at = [0]

    def action(tool: str, arguments: dict) -> str:
        stamps[at[0], 2] = clock()
        answer = phi.action(tool, arguments)
        stamps[at[0], 3] = clock()
        return answer

    start, take = deadline._Worker.start, deadline._Worker.take

    def timed_start(self: Any, fn: Any, args: Any) -> None:
        start(self, fn, args)
        stamps[at[0], 1] = clock()

    def timed_take(self: Any) -> Any:
        stamps[at[0], 4] = clock()
        return take(self)

    deadline._Worker.start, deadline._Worker.take = timed_start, timed_take
    arguments = {"invoice": "INV-001"}
    session = GuardSession(shield, Abstraction(shield.model, phi.phi, action))
    assert session.decide("lookup_invoice", arguments).allowed
    collections = [0]
    gc.callbacks.append(
        lambda phase, _: collections.__setitem__(0, collections[0] + (phase == "start"))
    )
    cpu0 = time.process_time_ns()
    for i in range(checks):
        at[0] = i
        cpus[i, 0] = getcpu()
        stamps[i, 0] = clock()
        session.decide("lookup_invoice", arguments)
        stamps[i, 5] = clock()
        cpus[i, 1] = getcpu()
    cpu_us = (time.process_time_ns() - cpu0) / checks / 1000
    during = collections[0]  # collections in the timed calls (not in the summary below)
    total = (stamps[:, 5] - stamps[:, 0]) / 1000
    seg = np.diff(stamps, axis=1) / 1000
    tail = total >= np.percentile(total, 99)
    excess = seg[tail] - np.median(seg, axis=0)
    moved = cpus[:, 0] != cpus[:, 1]
    return {
        "p50_us": float(np.percentile(total, 50)),
        "p90_us": float(np.percentile(total, 90)),
        "p99_us": float(np.percentile(total, 99)),
        "p999_us": float(np.percentile(total, 99.9)),
        "cpu_us": cpu_us,
        "segments_p50_us": {n: float(np.median(seg[:, k])) for k, n in enumerate(SEGMENTS)},
        "segments_p99_us": {n: float(np.percentile(seg[:, k], 99)) for k, n in enumerate(SEGMENTS)},
        "tail_furthest_above_median": {
            n: int((excess.argmax(axis=1) == k).sum()) for k, n in enumerate(SEGMENTS)
        },
        "moved": int(moved.sum()),
        "tail_moved": int(moved[tail].sum()),
        "gc_collections": during,
    }


def _observe(observes: int) -> dict[str, Any]:
    from safecert.shield.guard import Guard
    from safecert.shield.sandbox import TOOLS, Sandbox, all_live_labels

    moves = [0]
    setaffinity = os.sched_setaffinity

    def counted(*args: Any) -> None:
        moves[0] += 1
        setaffinity(*args)

    os.sched_setaffinity = counted  # the deadline module calls it through ``os``
    getcpu = ctypes.CDLL(None).sched_getcpu
    clock = time.perf_counter_ns
    table = {label: {"read", "write", "halt"} for label in all_live_labels()}
    ns = np.empty(observes, dtype=np.int64)
    moved = np.zeros(observes, dtype=bool)
    with Sandbox(np.random.default_rng(0)) as sandbox:
        guard = Guard(table, sandbox.state, actions=TOOLS)
        guard.observe()
        before = moves[0]
        cpu0 = time.process_time_ns()
        for i in range(observes):
            cpu = getcpu()
            t0 = clock()
            guard.observe()
            ns[i] = clock() - t0
            moved[i] = getcpu() != cpu
        cpu_us = (time.process_time_ns() - cpu0) / observes / 1000
    us = ns / 1000
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "cpu_us": cpu_us,
        "moved": int(moved.sum()),
        "setaffinity": moves[0] - before,
    }


def _child(checks: int, observes: int, held: bool) -> None:
    if held:  # as after a caller was seen woken on another CPU: every wait held on its CPU
        from safecert.shield import deadline

        deadline._callers_move[0] = True
    out = {"load": os.getloadavg()[0], "check": _check_segments(checks)}
    out["observe"] = _observe(observes)
    sys.stdout.write(json.dumps(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checks", type=int, default=20_000)
    ap.add_argument("--observes", type=int, default=3_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--build", action="append", default=[], metavar="NAME=SRC")
    ap.add_argument(
        "--held",
        action="store_true",
        help="also run the current tree with every wait held on the caller's CPU from the first"
        " check (as once a caller was seen to move): row 'held'",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.checks, args.observes, args.held)
        return
    with contextlib.ExitStack() as keep:
        builds = {"new": ROOT / "src"}
        if args.held:
            builds["held"] = ROOT / "src"
        for spec in args.build:
            name, _, src = spec.partition("=")
            builds[name] = build_tree(src, keep)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
        for _ in range(args.repeats):
            for name, src in builds.items():
                child = subprocess.run(
                    [sys.executable, __file__, "--child", "--checks", str(args.checks),
                     "--observes", str(args.observes)] + (["--held"] if name == "held" else []),
                    env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True, text=True,
                    check=True,
                )  # fmt: skip
                runs[name].append(json.loads(child.stdout))
    if args.json:
        sys.stdout.write(json.dumps(runs, indent=2) + "\n")
        return
    for name, got in runs.items():
        for run in got:
            c, o = run["check"], run["observe"]
            segs = " ".join(
                f"{n} {c['segments_p50_us'][n]:.1f}/{c['segments_p99_us'][n]:.1f}" for n in SEGMENTS
            )
            print(
                f"{name:5s} load {run['load']:.2f}  check p50 {c['p50_us']:.1f} p90 {c['p90_us']:.1f}"
                f" p99 {c['p99_us']:.1f} p99.9 {c['p999_us']:.1f} cpu {c['cpu_us']:.1f} µs;"
                f" segments p50/p99 {segs}; slowest 1 % led by {c['tail_furthest_above_median']};"
                f" moved {c['moved']} (slowest 1 %: {c['tail_moved']}), gc {c['gc_collections']}"
            )
            print(
                f"{'':5s} observe p50 {o['p50_us']:.1f} p99 {o['p99_us']:.1f} cpu {o['cpu_us']:.1f}"
                f" µs; moved {o['moved']}/{args.observes}, sched_setaffinity {o['setaffinity']}"
            )


if __name__ == "__main__":
    main()
