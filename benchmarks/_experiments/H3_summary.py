"""Table rows from helper H3's window (``H3_window.sh OUTDIR``): per guard_latency run, µs p50 / p99
(median of its 2 rounds) of each timing, the load, and the verdict on the Python-map check's
p99 ≤ 50 µs; then guard_tail's segments per tree.

    .venv/bin/python benchmarks/_experiments/H3_summary.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = (
    ("guard check, observed (real sandbox abstraction)", "sandbox check"),
    ("session check (rules action map)", "rules-map check"),
    ("session check (python action map)", "Python-map check"),
    ("session call (rules action map)", "call (rules)"),
    ("guard observe (real sandbox abstraction)", "sandbox observe"),
)
PYTHON = "session check (python action map)"


def main() -> None:
    out = Path(sys.argv[1])
    starts = {}
    for line in (out / "log.txt").read_text().splitlines():
        parts = line.split()
        if parts[5] == "start" and parts[6] == "guard_latency":
            starts[(parts[7], parts[8])] = f"{parts[0]}, load {parts[2]}"
    print(
        "| run (UTC start, 1-min load) | tree | "
        + " | ".join(c for _, c in COLUMNS)
        + " | verdict |"
    )
    print("|---|---|" + "---:|" * len(COLUMNS) + "---|")
    for i in range(1, 6):
        for tree in ("new", "old"):
            path = out / f"latency_{tree}_{i}.json"
            if not path.exists():
                continue
            t = json.loads(path.read_text())["timings"]
            cells = [
                f"{t[k]['p50_us']['median']:.1f} / {t[k]['p99_us']['median']:.1f}"
                for k, _ in COLUMNS
            ]
            p99 = t[PYTHON]["p99_us"]
            verdict = "met" if p99["median"] <= 50 else "not met"
            rounds = f"rounds {p99['min']:.1f}, {p99['max']:.1f}"
            print(f"| {i}: {starts.get((tree, str(i)), '?')} | {tree} | " + " | ".join(cells)
                  + f" | {verdict} ({rounds}) |")  # fmt: skip
    tail = out / "tail.json"
    if tail.exists():
        for tree, runs in json.loads(tail.read_text()).items():
            for run in runs:
                c, o = run["check"], run["observe"]
                segs = ", ".join(
                    f"{n} {c['segments_p50_us'][n]:.1f}/{c['segments_p99_us'][n]:.1f}"
                    for n in ("pre", "wake_w", "job", "wake_c", "post")
                )
                print(
                    f"{tree}: load {run['load']:.2f}; check {c['p50_us']:.1f} / {c['p99_us']:.1f} /"
                    f" {c['p999_us']:.1f}, CPU {c['cpu_us']:.1f}; {segs}; slowest 1 % led by"
                    f" {c['tail_furthest_above_median']}; moved {c['moved']}, gc"
                    f" {c['gc_collections']}; observe {o['p50_us']:.1f} / {o['p99_us']:.1f}, CPU"
                    f" {o['cpu_us']:.1f}, moved {o['moved']}, setaffinity {o['setaffinity']}"
                )


if __name__ == "__main__":
    main()
