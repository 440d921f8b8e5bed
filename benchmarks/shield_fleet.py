"""Fleet-scale shield logs (issue 23, item 4): N transitions in Parquet, counted out of core with
DuckDB (`safecert shield count`) and certified from the count table (`shield certify --counts
--anytime`), against the streaming JSONL reader (`shield certify --logs --anytime`) in the same
run as the baseline.

The grid model's kernel (examples/shield/grid.toml: intended move 0.8, slips share 0.2) is sampled
by DuckDB straight into Parquet: row (s, a) uniform over live non-halt rows, successor by its
probability; episodes of 16 steps (integer ids; the JSONL baseline: one-step episodes, so
the reader's order checks hold on independently drawn steps). Each measured step runs in its own process, which
reports its wall time (start-up and imports included) and its peak resident memory (VmHWM;
DuckDB's buffers are in-process).

    python benchmarks/shield_fleet.py                  # N = 10^8 (a few GB of temporary disk)
    python benchmarks/shield_fleet.py --n 10000000 --baseline 1000000

Writes benchmarks/out/shield_fleet.json; the figures are copied into RESULTS_shield_fleet.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "examples" / "shield" / "grid.toml"
OUT = REPO / "benchmarks" / "out" / "shield_fleet.json"

#: run one step in a child and print {"wall_s", "max_rss_mib"} as the last line
CHILD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
step, args = sys.argv[1], json.loads(sys.argv[2])
from safecert.shield.model import load_model
if step == "count":
    from safecert.shield.counts import count_logs, write_counts
    model = load_model(Path(args["model"]))
    table = count_logs(model, [Path(p) for p in args["inputs"]])
    write_counts(table, model, Path(args["out"]))
    extra = {"steps": table.steps, "episodes": table.episodes}
else:
    from safecert.shield.certify import certify_shield
    run = certify_shield(Path(args["model"]), args.get("logs") and Path(args["logs"]),
                         Path(args["out"]), anytime=True,
                         counts=[Path(p) for p in args.get("counts", [])] or None)
    r = run.certificate.result
    extra = {"bound": r.bound, "steps": r.steps, "episodes": r.episodes}
# VmHWM: this process's peak RSS (ru_maxrss would carry the parent's over fork + exec)
hwm = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM")]
rss = int(hwm[0].split()[1]) / 1024
print(json.dumps({"wall_s": time.perf_counter() - t0, "max_rss_mib": rss, **extra}))
"""


def child(step: str, **args: object) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, step, json.dumps({k: str(v) if isinstance(v, Path) else v
                                                         for k, v in args.items()})],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def generate(n: int, path: Path, fmt: str) -> float:
    """N grid transitions sampled from the model's kernel into ``path`` (Parquet or JSON Lines)."""
    import duckdb
    import numpy as np

    from safecert.shield.model import load_model

    model = load_model(MODEL)
    kinds = []  # (row id, s, a, s2, probability)
    row = 0
    for s in range(model.n_states):
        if model.unsafe[s] or not model.live[s]:
            continue
        for a in range(len(model.actions)):
            if a == model.halt:
                continue
            k = int(model.k[s, a])
            succ = [int(x) for x in model.succ[s, a, :k]]
            dr, dc = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}[
                model.actions[a]
            ]
            r, c = divmod(s, 7)
            target = model.labels.index(f"r{min(max(r + dr, 0), 6)}c{min(max(c + dc, 0), 6)}")
            probs = np.array([0.8 if x == target else 0.0 for x in succ])
            rest = probs == 0
            probs[rest] = (1 - probs.sum()) / max(rest.sum(), 1)
            probs /= probs.sum()
            for x, p in zip(succ, probs, strict=True):
                kinds.append((row, model.labels[s], model.actions[a], model.labels[x], float(p)))
            row += 1
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET memory_limit = '1GB'")
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")
    con.execute(
        "CREATE TABLE kinds (r INT, state VARCHAR, action VARCHAR, next_state VARCHAR, p DOUBLE)"
    )
    con.executemany("INSERT INTO kinds VALUES (?, ?, ?, ?, ?)", kinds)
    # 1000 slots per row, each holding one successor (probabilities are multiples of 1/1000)
    con.execute(
        """CREATE TABLE slots AS
        SELECT r, state, action, next_state,
               generate_series(
                   CAST(round(1000 * (sum(p) OVER w - p)) AS BIGINT),
                   CAST(round(1000 * sum(p) OVER w) AS BIGINT) - 1) AS slot
        FROM kinds WINDOW w AS (PARTITION BY r ORDER BY next_state)"""
    )
    con.execute(
        "CREATE TABLE slot AS SELECT r, state, action, next_state, unnest(slot) AS slot FROM slots"
    )
    rows = row
    t0 = time.perf_counter()
    options = "(FORMAT parquet, ROW_GROUP_SIZE 1000000)" if fmt == "parquet" else "(FORMAT json)"
    # Parquet: episodes of 16 steps (counting ignores step order); JSON Lines: one-step episodes,
    # so the reader's order checks (t rising by 1, state = previous next_state) hold
    episode, t = ("i // 16", "i % 16") if fmt == "parquet" else ("i", "0")
    con.execute(
        f"""COPY (
            SELECT {episode} AS episode, {t} AS t, s.state, s.action, s.next_state
            FROM range({n}) AS g(i)
            JOIN slot AS s
              ON s.r = hash(i) % {rows} AND s.slot = hash(i + {n}) % 1000
        ) TO '{path}' {options}"""
    )
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000_000, help="transitions in the Parquet log")
    ap.add_argument("--baseline", type=int, default=1_000_000, help="transitions in the JSONL log")
    ap.add_argument("--tmp", type=Path, default=None, help="folder for the generated logs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        tmp = Path(tmp)
        parquet, jsonl = tmp / "fleet.parquet", tmp / "base.jsonl"
        gen_s = generate(args.n, parquet, "parquet")
        generate(args.baseline, jsonl, "json")
        count = child("count", model=MODEL, inputs=[str(parquet)], out=tmp / "counts.parquet")
        cert = child("certify", model=MODEL, counts=[str(tmp / "counts.parquet")], out=tmp / "c1")
        base_count = child("count", model=MODEL, inputs=[str(jsonl)], out=tmp / "bc.parquet")
        base = child("certify", model=MODEL, logs=str(jsonl), out=tmp / "c2")
        result = {
            "n": args.n,
            "parquet_mib": parquet.stat().st_size / 2**20,
            "generate_s": gen_s,
            "count": count,
            "certify_from_counts": cert,
            "total_s": count["wall_s"] + cert["wall_s"],
            "max_rss_mib": max(count["max_rss_mib"], cert["max_rss_mib"]),
            "baseline_n": args.baseline,
            "baseline_jsonl_count": base_count,
            "baseline_jsonl_certify_logs": base,
            "throughput_counts_per_s": args.n / (count["wall_s"] + cert["wall_s"]),
            "throughput_jsonl_logs_per_s": args.baseline / base["wall_s"],
        }
        result["speedup"] = (
            result["throughput_counts_per_s"] / result["throughput_jsonl_logs_per_s"]
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
