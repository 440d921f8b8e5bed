"""Long hostile fuzz run of every input door (issues 14 and 27); writes benchmarks/RESULTS_fuzz.md.

Formats: ``cost-expression`` (``spec.cost``/``spec.goal`` compiled and evaluated on real and
extreme step scopes), ``blackbox-toml`` (``safecert certify``), ``shield-model-toml`` (``safecert
shield certify``) and ``bnn-toml`` (``safecert bnn verify``). Each case is drawn by the
structure-aware generators of tests/fuzz/hostile.py (operator and index chains of up to 4,999
terms, nesting around the depth limit, number bombs, TOML bombs of up to 50,000 key parts or
levels, hostile format strings, near-miss keys, folders/FIFOs//dev/zero as the config) mixed with
the generic mutations of tests/fuzz/harness.py, and runs in a child process under a 4 GB
address-space limit with a per-case deadline (tests/fuzz/worker.py). Counted per format: exit
codes, tracebacks, hangs, memory blow-ups, warnings shown to the user, and every contract
violation (exit 0/1/2 only, one stderr line for exit 2, nothing outside ``--out`` touched).

    .venv/bin/python benchmarks/fuzz_inputs.py --tries 1000 [--formats bnn-toml,...] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz import hostile  # noqa: E402
from tests.fuzz.doors import FORMATS  # noqa: E402
from tests.fuzz.worker import Worker  # noqa: E402

DEADLINE_S = {"cost-expression": 10.0}
DEFAULT_DEADLINE_S = 60.0


def draw_cases(name: str, tries: int, seed: int) -> list[hostile.Case]:
    """``tries`` cases of one format, drawn once (the same list runs against every revision)."""
    out: list[hostile.Case] = []

    @settings(
        max_examples=tries,
        deadline=None,
        phases=[Phase.generate],  # count, do not shrink
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=hostile.strategy(name))
    def one(case: hostile.Case) -> None:
        out.append(case)

    hypothesis_seed(seed)(one)()
    return out


def fuzz_format(name: str, cases: list[hostile.Case], worker: Worker, label: str) -> dict:
    counts: collections.Counter[str] = collections.Counter()
    findings: list[dict] = []
    seconds: list[float] = []
    peaks: list[float] = []
    deadline = DEADLINE_S.get(name, DEFAULT_DEADLINE_S)
    for i, case in enumerate(cases, 1):
        result = worker.run(name, case, deadline)
        counts["tries"] += 1
        counts[f"exit {result.code}"] += 1
        seconds.append(result.seconds)
        peaks.append(result.peak_mb)
        for what in ("traceback", "hang", "memory"):
            counts[what] += bool(getattr(result, what))
        counts["warnings"] += bool(result.warnings)
        if result.problems:
            counts["violations"] += 1
            findings.append({"mutations": case.done, "problems": result.problems})
        if i % 50 == 0 or i == len(cases):
            print(
                f"{label} {name}: {i}/{len(cases)}, {counts['violations']} violations",
                file=sys.stderr,
                flush=True,
            )
    return {
        "format": name,
        "revision": label,
        "counts": dict(counts),
        "median_s": sorted(seconds)[len(seconds) // 2] if seconds else 0.0,
        "max_s": max(seconds, default=0.0),
        "peak_mb": max(peaks, default=0.0),
        "findings": findings,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=1000, help="cases per format")
    ap.add_argument("--formats", default="", help=f"comma-separated, of {', '.join(FORMATS)}")
    ap.add_argument("--seed", type=int, default=27, help="the generators' seed")
    ap.add_argument(
        "--baseline", default="", help="also run the same cases against this git revision"
    )
    ap.add_argument(
        "--baseline-tries", type=int, default=200, help="how many of each format's cases"
    )
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "RESULTS_fuzz.md")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    wanted = [f for f in FORMATS if f in set(args.formats.split(","))] or list(FORMATS)
    root = Path(tempfile.mkdtemp(prefix="safecert-fuzz-"))
    cases = {name: draw_cases(name, args.tries, args.seed) for name in wanted}
    runs: list[tuple[str, Path | None]] = [("current", None)]
    counts = {"current": args.tries}
    if args.baseline:
        source = root / "baseline"
        source.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.baseline, "src"], cwd=REPO, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
        runs.append((args.baseline, source / "src"))
    counts = {"current": args.tries, args.baseline: args.baseline_tries}
    start = time.monotonic()
    results = []
    for label, src in runs:
        with Worker(root, src) as worker:
            results += [
                fuzz_format(name, cases[name][: counts[label]], worker, label) for name in wanted
            ]
    total = time.monotonic() - start
    if args.json:
        print(json.dumps({"results": results, "seconds": total}, indent=2))
    write_report(results, total, args)


def write_report(results: list[dict], total: float, args: argparse.Namespace) -> None:
    columns = ("exit 0", "exit 1", "exit 2", "traceback", "hang", "memory", "warnings")
    lines = [
        "# Hostile fuzzing of the input doors (issues 14 and 27)",
        "",
        f"`.venv/bin/python benchmarks/fuzz_inputs.py --tries {args.tries} --seed {args.seed}"
        + (
            f" --baseline {args.baseline} --baseline-tries {args.baseline_tries}"
            if args.baseline
            else ""
        )
        + "` — cases per format "
        "from the structure-aware generators of `tests/fuzz/hostile.py` (chains of up to 4,999 "
        "`+ * and < [i] .get`, nesting around the depth limit, `10**10**10`/`sqrt(-1)`/"
        "`log(0)`/400-digit numbers, TOML keys of up to 50,000 dotted parts and 50,000-deep "
        "arrays or inline tables, `cell_format` widths of 3·10⁹ and attribute access, near-miss "
        "keys, the config as a folder, FIFO, `/dev/zero`, missing path or link to `/dev/zero`) "
        "mixed with the generic mutations of `tests/fuzz/harness.py`. Each case runs in a child "
        "process under `RLIMIT_AS` = 4 GB (`tests/fuzz/worker.py`) with a deadline of "
        f"{DEFAULT_DEADLINE_S:.0f} s ({DEADLINE_S['cost-expression']:.0f} s for an expression): "
        "*hang* = no answer by then (the process group is killed and reaped), *memory* = a "
        "MemoryError, the child dying, or its peak resident memory raised above 1.5 GB "
        "(*peak MB*: the largest peak seen; a child that passes 1.5 GB is replaced), *warnings* = a warning the user would see. "
        "`cost-expression` is the door a run's `spec.cost`/`spec.goal` pass "
        "(`compile_spec`, then evaluation on ordinary and extreme step scopes: exit 1 = an "
        "EvalError, the episode's failure reason); the TOML formats run the real command.",
        "",
        f"Total wall time {total:.0f} s on the shared 2-core machine.",
        "",
        "| format | revision | tries | "
        + " | ".join(columns)
        + " | violations | median s | max s | peak MB |",
        "|---|---|---|" + "---|" * len(columns) + "---|---|---|---|",
    ]
    for r in results:
        c = r["counts"]
        cells = " | ".join(str(c.get(k, 0)) for k in columns)
        lines.append(
            f"| {r['format']} | {r['revision']} | {c.get('tries', 0)} | {cells} | {c.get('violations', 0)} "
            f"| {r['median_s']:.2f} | {r['max_s']:.1f} | {r['peak_mb']:.0f} |"
        )
    found = [(r["format"], f) for r in results if r["revision"] == "current" for f in r["findings"]]
    lines += ["", "## Violations of the current revision", ""]
    if not found:
        lines.append("None.")
    for name, f in found[:40]:
        lines.append(f"- **{name}** after {'; '.join(f['mutations'])}: {' / '.join(f['problems'])}")
    for r in results:
        if r["revision"] == "current" or not r["findings"]:
            continue
        kinds = collections.Counter(" ".join(f["problems"][0].split())[:110] for f in r["findings"])
        lines += ["", f"## {r['format']} at {r['revision']}: the most frequent violations", ""]
        lines += [f"- {n} × {kind}" for kind, n in kinds.most_common(8)]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
