"""Speed of the shield engine (targets: 7×7 synthesis ≤ 0.2 s; robust VI with 10^4 states ×
10 actions × T = 50 ≤ 2 s). Each figure is the median of several runs; the robust VI is also
timed against a baseline in the same process — the same VI with the generic per-row sort
(argsort) inner maximisation instead of the sorting network — and reported as a ratio. Synthesis
is timed against the implementation of git commit ``BASELINE_COMMIT`` (before the vectorisation
pass: a fresh base VI every greedy round, a reduction over the short action axis), loaded from git
history into this process, and must return the same shields.

    .venv/bin/python benchmarks/shield_speed.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
from _experiments.gridworld import grid_model, simulate_logs, true_kernel

from safecert.shield.confidence import inner_max
from safecert.shield.reach import Rows, value_iteration
from safecert.shield.synthesis import METHODS, synthesize


def median_time(fn, repeats: int) -> float:
    """Median CPU seconds of this process (``time.process_time``): on a shared, overloaded machine
    wall time measures the neighbours; NumPy here is single-threaded, so CPU time is what one
    quiet core would take. Wall times are recorded beside it in ``WALL``."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    WALL.append(float(np.median(wall)))
    return float(np.median(cpu))


WALL: list[float] = []
BASELINE_COMMIT = "a38a29f"


def baseline_synthesis() -> types.ModuleType | None:
    """``synthesis`` and ``reach`` as of ``BASELINE_COMMIT`` (None outside a git checkout)."""
    root = Path(__file__).resolve().parents[1]
    mods = {}
    for name in ("reach", "synthesis"):
        try:
            src = subprocess.run(
                ["git", "show", f"{BASELINE_COMMIT}:src/safecert/shield/{name}.py"],
                cwd=root, capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
        except (OSError, subprocess.CalledProcessError):
            return None
        mod = types.ModuleType(f"baseline_{name}")
        if name == "synthesis":
            src = src.replace("from safecert.shield.reach import", "from baseline_reach import")
        sys.modules[mod.__name__] = mod
        exec(compile(src, f"{BASELINE_COMMIT}:{name}.py", "exec"), mod.__dict__)  # noqa: S102
        mods[name] = mod
    return mods["synthesis"]


def random_rows(rng, n, m, k) -> Rows:
    succ = rng.integers(0, n, (n, m, k))
    p = rng.dirichlet(np.ones(k), size=(n, m))
    radius = rng.uniform(0.05, 0.5, (n, m))
    unsafe = np.zeros(n, bool)
    unsafe[: n // 100] = True
    return Rows(succ, np.ones((n, m, k), bool), p, radius, unsafe, m - 1)


def baseline_vi(rows: Rows, horizon: int) -> np.ndarray:
    """Same recursion, generic argsort inner maximisation (the reference path)."""
    n = rows.n_states
    v = np.zeros(n + 1)
    v[:n][rows.unsafe] = 1
    for _ in range(horizon):
        q = inner_max(v[rows.succ], rows.p, rows.radius, rows.valid)
        new = q.max(-1)
        new[rows.unsafe] = 1
        v[:n] = new
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/shield"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = grid_model(12_000)
    probs = true_kernel(model)
    est, _ = simulate_logs(model, probs, 12_000, np.random.default_rng(0))
    synth = {}
    old = baseline_synthesis()
    for m in METHODS:
        cpu = median_time(lambda m=m: synthesize(model, est, 0.10, method=m), args.repeats)
        synth[m] = {"cpu_seconds": cpu, "wall_seconds": WALL[-1]}
        if old is not None:
            base = median_time(lambda m=m: old.synthesize(model, est, 0.10, method=m), args.repeats)
            same = np.array_equal(
                synthesize(model, est, 0.10, method=m).allowed,
                old.synthesize(model, est, 0.10, method=m).allowed,
            )
            synth[m] |= {"baseline_commit": BASELINE_COMMIT, "baseline_cpu_seconds": base,
                         "speedup": base / cpu, "same_shield": bool(same)}  # fmt: skip
    rng = np.random.default_rng(1)
    vi = {}
    for k in (3, 5):
        rows = random_rows(rng, 10_000, 10, k)
        allowed = np.ones((10_000, 10), bool)
        ours = median_time(
            lambda rows=rows, allowed=allowed: value_iteration(rows, allowed, 50), args.repeats
        )
        base = median_time(lambda rows=rows: baseline_vi(rows, 50), max(1, args.repeats // 2))
        same = np.allclose(value_iteration(rows, allowed, 50)[0], baseline_vi(rows, 50))
        vi[f"k={k}"] = {"cpu_seconds": ours, "wall_seconds": WALL[-2], "baseline_cpu_seconds": base,
                        "speedup": base / ours, "equal": bool(same)}  # fmt: skip
    out = {
        "synthesis_7x7": synth,
        "robust_vi_1e4x10xT50": vi,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "cpu_model": platform.processor() or platform.machine(),
    }
    (args.out / "speed.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
