"""Long fuzz run of every input format (issue 14); writes benchmarks/RESULTS_fuzz.md.

The suite runs 12 derandomized tries per format (tests/fuzz); this runs ``--tries`` random ones per
format with the same mutations and the same contract (tests/fuzz/harness.py): exit 0/1/2 only, no
traceback, one line for exit 2, nothing outside the output folder touched, no run past the limit.
Each violation is kept (format, mutations, the last stderr line) for the report.

    .venv/bin/python benchmarks/fuzz_inputs.py --tries 200 [--formats shield-logs-jsonl,...] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fuzz import harness  # noqa: E402


def fuzz_format(fmt: harness.Format, tries: int, root: Path) -> dict:
    counts: collections.Counter[str] = collections.Counter()
    findings: list[dict] = []
    seconds: list[float] = []

    @settings(
        max_examples=tries,
        deadline=None,
        phases=[Phase.generate],  # count, do not shrink
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=harness.fuzz_input(fmt))
    def one(case: tuple[bytes, list[str]]) -> None:
        data, done = case
        outcome, problems = harness.run_one(fmt, data, root)
        counts["tries"] += 1
        counts[f"exit {outcome.code}"] += 1
        seconds.append(outcome.seconds)
        if outcome.error or "Traceback (most recent" in outcome.stderr:
            counts["tracebacks"] += 1
        if problems:
            counts["violations"] += 1
            findings.append({"mutations": done, "problems": problems})
        print(
            f"\r{fmt.name}: {counts['tries']}/{tries} tries, {counts['violations']} violations",
            end="",
            file=sys.stderr,
            flush=True,
        )

    one()
    print(file=sys.stderr)
    return {
        "format": fmt.name,
        "counts": dict(counts),
        "median_s": sorted(seconds)[len(seconds) // 2] if seconds else 0.0,
        "max_s": max(seconds, default=0.0),
        "findings": findings,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=200, help="tries per format")
    ap.add_argument("--formats", default="", help="comma-separated names (default: all)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "RESULTS_fuzz.md")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="safecert-fuzz-"))
    formats = [
        harness.blackbox_format(),
        harness.shield_model_format(),
        harness.logs_format(),
        harness.bnn_format(),
        harness.certificate_format(harness.make_certificate_run(root / "certificate")),
    ]
    wanted = set(filter(None, args.formats.split(",")))
    start = time.monotonic()
    results = [fuzz_format(f, args.tries, root) for f in formats if not wanted or f.name in wanted]
    total = time.monotonic() - start
    if args.json:
        print(json.dumps({"results": results, "seconds": total}, indent=2))
    write_report(results, total, args)


def write_report(results: list[dict], total: float, args: argparse.Namespace) -> None:
    lines = [
        "# Fuzzing the input formats (issue 14)",
        "",
        f"`.venv/bin/python benchmarks/fuzz_inputs.py --tries {args.tries}` — random tries per "
        "format, each a shipped valid example with 1–3 structural mutations (delete a key, a "
        "hostile value: ±inf, nan, 1e308, 2⁶³, 10³⁰, −1, wrong type, long or empty string; "
        "3,000-deep nesting; an unknown key) and maybe one textual one (invalid UTF-8, "
        "truncation); JSONL also drops or swaps lines. Contract per try: exit 0/1/2, no "
        "traceback, exactly one stderr line for exit 2, nothing outside `--out` touched, "
        "finished within the limit (60 s).",
        "",
        f"Total wall time {total:.0f} s on the shared 2-core machine.",
        "",
        "| format | tries | exit 0 | exit 1 | exit 2 | tracebacks | violations | median s | max s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r["counts"]
        lines.append(
            f"| {r['format']} | {c.get('tries', 0)} | {c.get('exit 0', 0)} | {c.get('exit 1', 0)} "
            f"| {c.get('exit 2', 0)} | {c.get('tracebacks', 0)} | {c.get('violations', 0)} "
            f"| {r['median_s']:.2f} | {r['max_s']:.1f} |"
        )
    found = [(r["format"], f) for r in results for f in r["findings"]]
    lines += ["", "## Violations", ""]
    if not found:
        lines.append("None.")
    for name, f in found[:40]:
        lines.append(f"- **{name}** after {'; '.join(f['mutations'])}: {' / '.join(f['problems'])}")
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
