"""Wall-clock of ``safecert bnn verify`` with 1 and N solver processes (issue 25.5), same certificate.

Runs the command once per (variant, repeat), the variants alternating, each in a fresh process::

    safecert bnn verify --benchmark NAME --epsilon EPS --workers W --out OUT/W-r --json \\
        --time-limit S --events OUT/W-r.events.jsonl

and records per run its wall seconds, the attempt's CPU seconds as the engine counts them
(``result.runtimes_s.total_s``: the run's process plus the CPU its solver workers report for
their solves), the command's own CPU seconds (``resource.getrusage(RUSAGE_CHILDREN)`` around it:
the command and what it reaped — not the solver workers, which are children of multiprocessing's
forkserver), the 1-minute load average before and after, and the verdict, learner rounds and
verifier calls from the certificate; each run's progress events (one per CEGIS round: what the
round found) go to ``OUT/W-r.events.jsonl``, to compare a run's path with another's. It then
checks that every run wrote the same outcome (the certificate's parameters and result without its timings)
and prints the wall ratio of each variant against the first.

    .venv/bin/python benchmarks/bnn_workers.py --benchmark lane --epsilon 0.5sigma \\
        --workers 2,1 --repeats 1 --out /tmp/bw --json benchmarks/RESULTS_bnn_scale_lane.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SAFECERT = Path(sys.executable).with_name("safecert")


def outcome(cert: dict[str, Any]) -> dict[str, Any]:
    """What a certificate states but its timings (the runtimes are machine-dependent)."""
    result = dict(cert["result"])
    result.pop("runtimes_s", None)
    result["search"] = [{k: v for k, v in r.items() if k != "runtime_s"} for r in result["search"]]
    return {"verdict": cert["verdict"], "parameters": cert["parameters"], "result": result}


def run_once(args: argparse.Namespace, workers: int, out: Path) -> dict[str, Any]:
    cmd = [str(SAFECERT), "bnn", "verify", "--benchmark", args.benchmark]
    cmd += ["--epsilon", args.epsilon, "--workers", str(workers), "--out", str(out), "--json"]
    cmd += ["--time-limit", str(args.time_limit), "--events", str(out.with_suffix(".events.jsonl"))]
    if args.seed is not None:
        cmd += ["--seed", str(args.seed)]
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.time_limit + 600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr[-2000:]}")
    cert = json.loads((out / "certificate.json").read_text())
    r = cert["result"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "workers": workers,
        "verdict": cert["verdict"],
        "reason": r["reason"],
        "iterations": r["iterations"],
        "verifier_calls": r["verifier_calls"],
        "machine_dependent": r["machine_dependent"],
        "wall_s": wall,
        "cpu_s_command": cpu,
        "cpu_s_engine": r["runtimes_s"]["total_s"] if r["runtimes_s"] else None,
        "runtimes_s": r["runtimes_s"],
        "load_1min_before": load0,
        "load_1min_after": os.getloadavg()[0],
        "outcome": outcome(cert),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--epsilon", required=True)
    ap.add_argument("--workers", default="2,1", help="variants, the first is the reference")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=3600.0, help="wall-clock guard per run")
    ap.add_argument("--seed", type=int, help="passed to --seed (default: the config's, 0)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    variants = [int(w) for w in args.workers.split(",")]
    rows: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        order = variants if rep % 2 == 0 else variants[::-1]
        for w in order:
            row = run_once(args, w, args.out / f"w{w}-r{rep}")
            rows.append(row)
            print(
                f"{args.benchmark} {args.epsilon} workers {w}: {row['verdict']} after "
                f"{row['iterations']} rounds / {row['verifier_calls']} calls, "
                f"{row['wall_s']:.1f} wall-s, attempt {row['cpu_s_engine']} CPU-s (engine, with "
                f"workers), command {row['cpu_s_command']:.1f} CPU-s, load "
                f"{row['load_1min_before']:.2f} → {row['load_1min_after']:.2f}",
                flush=True,
            )
    same = all(r["outcome"] == rows[0]["outcome"] for r in rows)
    ref = [r["wall_s"] for r in rows if r["workers"] == variants[0]]
    summary = {
        "benchmark": args.benchmark,
        "epsilon": args.epsilon,
        "seed": args.seed,
        "same_outcome_every_run": same,
        "wall_ratio_vs_first (medians)": {
            str(w): statistics.median(r["wall_s"] for r in rows if r["workers"] == w)
            / statistics.median(ref)
            for w in variants
        },
        "rows": [{k: v for k, v in r.items() if k != "outcome"} for r in rows],
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
