"""Issue 15, items 3 and 4: log reading and greedy synthesis on the 7×7 grid, M = 12,000 (192,000
log lines), each as a ratio against its baseline run in this process.

* **Log reading** — ``estimate(model, iter_steps(...))`` (orjson, column checks, vectorised
  counting) against ``estimate(model, reference_steps(...))`` (the ``json`` line-by-line reader
  and the per-step counting loop: the path before this change); lines per second; the two
  estimates must be equal.
* **Greedy synthesis** — the current ``synthesize`` against ``synthesis``/``reach``/``confidence``
  of git commit ``BASELINE_COMMIT`` (before this change), loaded from git history into this
  process; same shield, same removal order and bit-identical V̄ required.
* **CLI wall** — ``safecert shield synthesize`` end to end, and the same command with the
  reference reader patched in (one ``python -c`` each; start-up, plotting and writing included).

CPU seconds (``time.process_time``) are the medians of ``--repeats`` runs: the machine is shared,
and wall time measures the neighbours; wall seconds and the load average are recorded beside them.

    .venv/bin/python benchmarks/shield_logs_speed.py [--repeats 5] [--out runs/bench/shield]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
from _experiments.gridworld import grid_model, true_kernel, write_logs

from safecert.shield.estimate import estimate
from safecert.shield.logs import iter_steps, reference_steps
from safecert.shield.model import load_model
from safecert.shield.synthesis import synthesize

ROOT = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "46f432f"
EPISODES = 12_000


def timed(fn, repeats: int) -> tuple[float, float]:
    """(median CPU seconds, median wall seconds) of ``fn()``."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return float(np.median(cpu)), float(np.median(wall))


def baseline_synthesis() -> types.ModuleType:
    """``synthesis`` with its ``reach`` and ``confidence`` as of ``BASELINE_COMMIT``."""
    mods: dict[str, types.ModuleType] = {}
    for name in ("confidence", "reach", "synthesis"):
        src = subprocess.run(
            ["git", "show", f"{BASELINE_COMMIT}:src/safecert/shield/{name}.py"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        for dep in ("confidence", "reach"):
            src = src.replace(f"from safecert.shield.{dep} import", f"from baseline_{dep} import")
        mod = types.ModuleType(f"baseline_{name}")
        sys.modules[mod.__name__] = mod
        exec(compile(src, f"{BASELINE_COMMIT}:{name}.py", "exec"), mod.__dict__)  # noqa: S102
        mods[name] = mod
    return mods["synthesis"]


def cli_wall(model: Path, logs: Path, out: Path, reference: bool, repeats: int) -> float:
    """Median wall seconds of ``safecert shield synthesize`` in a fresh interpreter."""
    patch = (
        "import safecert.shield.certify as c, safecert.shield.logs as l; "
        "c.iter_steps = l.reference_steps; "
        if reference
        else ""
    )
    code = (
        f"import sys; {patch}from safecert.cli.main import main; sys.argv[0] = 'safecert'; main()"
    )
    args = ["shield", "synthesize", "--model", str(model), "--logs", str(logs)]
    args += ["--epsilon", "0.1", "--out", str(out)]
    walls = []
    for _ in range(repeats):
        w0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", code, *args], check=True, capture_output=True, timeout=300
        )
        walls.append(time.perf_counter() - w0)
    return float(np.median(walls))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/shield"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model_path = args.out / "grid_m12000.toml"
    example = (ROOT / "examples" / "shield" / "grid.toml").read_text(encoding="utf-8")
    model_path.write_text(example.replace('"episodes" = 1000', f'"episodes" = {EPISODES}'))
    logs_path = args.out / "grid_m12000.jsonl"
    grid = grid_model(EPISODES)
    print(f"writing {logs_path} ...", file=sys.stderr, flush=True)
    write_logs(grid, true_kernel(grid), EPISODES, logs_path, np.random.default_rng(0))
    model = load_model(model_path)
    assert np.array_equal(model.n0, grid.n0), "the example model no longer is the grid's"
    lines = sum(1 for _ in logs_path.open("rb"))

    print("log reading ...", file=sys.stderr, flush=True)
    fast = estimate(model, iter_steps(logs_path, model))
    ref = estimate(model, reference_steps(logs_path, model))
    equal = bool(
        np.array_equal(fast.counts, ref.counts)
        and np.array_equal(fast.visits, ref.visits)
        and fast.episodes == ref.episodes
        and fast.steps == ref.steps == lines
    )
    new_cpu, new_wall = timed(lambda: estimate(model, iter_steps(logs_path, model)), args.repeats)
    old_cpu, old_wall = timed(
        lambda: estimate(model, reference_steps(logs_path, model)), args.repeats
    )
    reading = {
        "lines": lines,
        "bytes": logs_path.stat().st_size,
        "cpu_seconds": new_cpu,
        "wall_seconds": new_wall,
        "lines_per_second": lines / new_cpu,
        "baseline": "reference_steps (json, line by line) + per-step counting",
        "baseline_cpu_seconds": old_cpu,
        "baseline_wall_seconds": old_wall,
        "baseline_lines_per_second": lines / old_cpu,
        "speedup": old_cpu / new_cpu,
        "equal_estimates": equal,
    }

    print("greedy synthesis ...", file=sys.stderr, flush=True)
    old = baseline_synthesis()
    a, b = synthesize(model, fast, 0.10), old.synthesize(model, fast, 0.10)
    same = bool(
        np.array_equal(a.allowed, b.allowed)
        and a.steps == b.steps
        and np.array_equal(a.values, b.values)
        and a.bound == b.bound
    )
    s_cpu, s_wall = timed(lambda: synthesize(model, fast, 0.10), args.repeats)
    b_cpu, b_wall = timed(lambda: old.synthesize(model, fast, 0.10), args.repeats)
    greedy = {
        "cpu_seconds": s_cpu,
        "wall_seconds": s_wall,
        "baseline_commit": BASELINE_COMMIT,
        "baseline_cpu_seconds": b_cpu,
        "baseline_wall_seconds": b_wall,
        "speedup": b_cpu / s_cpu,
        "same_shield_and_bit_identical_values": same,
        "rounds": len(a.steps),
    }

    print("CLI ...", file=sys.stderr, flush=True)
    reps = max(1, args.repeats // 2)
    cli_new = cli_wall(model_path, logs_path, args.out / "cli_new", False, reps)
    cli_ref = cli_wall(model_path, logs_path, args.out / "cli_ref", True, reps)
    cli = {
        "wall_seconds": cli_new,
        "reference_reader_wall_seconds": cli_ref,
        "ratio": cli_ref / cli_new,
    }
    out = {
        "log_reading_m12000": reading,
        "greedy_synthesis_7x7": greedy,
        "cli_shield_synthesize_m12000": cli,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    (args.out / "logs_speed.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
