"""BNN engine at scale (issue 25.5): the 2-D paper systems before and after a change, in one run.

Each cell is one cold attempt of Alg. 1 at a fixed ε (``BnnProblem.run``), run in a fresh child
process that imports the engine either from ``--before-src`` (a ``src/`` tree of the commit before
the change, e.g. ``git archive 4025189 src | tar -x -C /tmp/before``) or from this checkout. The
two variants alternate (before, after, before, after, …) so that both see the same load; the
child reports its own CPU seconds (``time.process_time``: every thread of the process), its wall
seconds and the attempt's verdict, iterations and verifier calls; the figure compared is the
attempt's own CPU seconds (``runtimes_s["total_s"]``: without the one-off torch import, 2–5 CPU-s
that vary with the disk cache). The load average is read
before every cell. Budgets are work (iterations, solver nodes), so a variant gives the same
verdict and iteration count on every repeat — the script checks that, which also shows that
the result does not depend on the load.

    git archive 4025189 src | tar -x -C /tmp/before
    nice -n 5 .venv/bin/python benchmarks/bnn_scale.py --before-src /tmp/before/src \\
        --repeats 2 --json benchmarks/RESULTS_bnn_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
AFTER_SRC = HERE.parent / "src"

#: (policy, ε) of each 2-D cell: an ε each certifies from a cold start in tens of CPU seconds
CELLS = (
    ("lds", "1sigma"),
    ("lds_all", "0.5sigma"),
    ("pend", "1sigma"),
    ("pend_all", "0.5sigma"),
    ("car", "1sigma"),
    ("car_all", "0.5sigma"),
)

CHILD = r"""
import json, sys, time
c0, t0 = time.process_time(), time.perf_counter()
import safecert
from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.search import BnnProblem
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import parse_epsilon
from safecert.bnn.system import build_system
name, eps, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
cfg = benchmark_config(name, limits={"per_epsilon_s": limit, "solver_s": min(600.0, limit)})
mean, _ = load_policy_network(cfg, None)
problem = BnnProblem(build_system(cfg.system, cfg.dynamics, cfg.sets), mean, bayesian_spec(cfg, mean), cfg)
c1, t1 = time.process_time(), time.perf_counter()
res = problem.run(parse_epsilon(eps))
print(json.dumps({
    "engine": safecert.__file__,
    "verdict": res.verdict, "reason": res.reason, "iterations": res.iterations,
    "verifier_calls": res.verifier_calls, "machine_dependent": res.machine_dependent,
    "cpu_s": time.process_time() - c1, "wall_s": time.perf_counter() - t1,
    "setup_cpu_s": c1 - c0, "engine_cpu_s": res.runtimes_s["total_s"],
}))
"""


def run_cell(src: Path, name: str, eps: str, limit_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    load = os.getloadavg()[0]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, name, eps, str(limit_s)],
        env=env,
        capture_output=True,
        text=True,
        timeout=limit_s + 300,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{name} {eps} with {src}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
        )
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if not row["engine"].startswith(str(src)):
        raise RuntimeError(f"child imported {row['engine']}, not the engine under {src}")
    return {**row, "load_1min": load}


def summary(rows: list[dict]) -> dict:
    cpu = [r["engine_cpu_s"] for r in rows]
    wall = [r["wall_s"] for r in rows]
    return {
        "verdicts": sorted({r["verdict"] for r in rows}),
        "iterations": sorted({r["iterations"] for r in rows}),
        "verifier_calls": sorted({r["verifier_calls"] for r in rows}),
        "cpu_median": statistics.median(cpu),
        "cpu_min": min(cpu),
        "cpu_max": max(cpu),
        "wall_median": statistics.median(wall),
        "load": [round(r["load_1min"], 2) for r in rows],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before-src", type=Path, required=True)
    ap.add_argument("--cells", default=",".join(f"{n}:{e}" for n, e in CELLS))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--limit-s", type=float, default=1800.0, help="wall-clock guard per cell")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    variants = {"before": args.before_src.resolve(), "after": AFTER_SRC}
    out: dict[str, dict] = {}
    for cell in args.cells.split(","):
        name, eps = cell.split(":")
        rows: dict[str, list[dict]] = {"before": [], "after": []}
        for rep in range(args.repeats):
            order = ("before", "after") if rep % 2 == 0 else ("after", "before")
            for v in order:
                r = run_cell(variants[v], name, eps, args.limit_s)
                rows[v].append(r)
                print(
                    f"{name} {eps} {v}: {r['verdict']} {r['iterations']} it, "
                    f"{r['verifier_calls']} calls, {r['engine_cpu_s']:.1f} CPU-s "
                    f"({r['cpu_s']:.1f} with imports), {r['wall_s']:.1f} wall-s, "
                    f"load {r['load_1min']:.2f}",
                    flush=True,
                )
        b, a = summary(rows["before"]), summary(rows["after"])
        out[cell] = {
            "before": b,
            "after": a,
            "ratio_cpu": a["cpu_median"] / b["cpu_median"],
            "rows": rows,
        }
        print(f"{cell}: after/before CPU {out[cell]['ratio_cpu']:.2f}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
