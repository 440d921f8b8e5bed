"""Reports at full size: a 3 × 3 × 3 (27-cell) CartPole grid, its ODD views and their cost.

What is measured, in one process:

- the certification itself (baseline: ``certify`` with every episode, report included);
- ``write_report`` alone, with the counterexample trajectories (3 replayed episodes) and without
  (``max_trajectories=0``), as ratios of the baseline;
- correctness at full size: every failing cell of the grid appears failing in the slices and in
  every worst-case projection, counted from the DOM headless Chromium builds (skipped without
  ``/usr/bin/chromium``); the same for a 4-axis grid when ``--four`` is given.

    .venv/bin/python benchmarks/report_views.py [--episodes 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIG = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = {episodes}
max_steps = 100
[spec]
budget = 0.0
cost = 'info.get("cost", 0)'
p_star = 0.3
[envelope]
obs_noise = {{ levels = [0.3, 0.0, 0.15] }}
act_noise = {{ kind = "uniform", levels = [0.0, 0.5, 0.25] }}
delay = {{ levels = [0, 3, 1] }}
obs_ranges = [[-4.8, 4.8], [-1.0, 1.0], [-0.42, 0.42], [-1.0, 1.0]]
"""


def dom_check(report: Path, failing: set[int], n_cells: int) -> dict:
    """Count, from the browser's DOM, failing cells shown failing in each view."""
    from tests.report.browser import CHROMIUM, dump_dom

    if not CHROMIUM.exists():
        return {"skipped": "no /usr/bin/chromium"}
    dom = dump_dom(report)
    out: dict = {}
    for view in ("slice", "worst-case"):
        shown_failing: set[int] = set()
        wrong = 0
        squares = [
            sq
            for sq in dom.find_all("td", data_cells=True)
            if sq.ancestor("table").attrs.get("data-view") == view
        ]
        for sq in squares:
            cells = {int(c) for c in sq.attrs["data-cells"].split(",")}
            want = "fail" if cells & failing else "pass"
            wrong += sq.attrs["data-status"] != want
            if sq.attrs["data-status"] == "fail":
                shown_failing |= cells & failing
        out[view] = {
            "squares": len(squares),
            "wrong_status": wrong,
            "failing_cells_shown": len(shown_failing),
        }
    out["failing_cells"] = len(failing)
    out["cells"] = n_cells
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import safecert.report.render as render
    from safecert.blackbox.certify import certify
    from safecert.blackbox.store import EpisodeStore
    from tests.blackbox.pipeline_helpers import write_run

    with tempfile.TemporaryDirectory(prefix="safecert-report-bench-") as tmp:
        folder = Path(tmp)
        config = write_run(folder, CONFIG.format(episodes=args.episodes))
        t0 = time.perf_counter()
        cert = certify(config, folder / "out", workers=1, progress=False)
        t_certify = time.perf_counter() - t0
        with EpisodeStore(folder / "out" / "episodes.sqlite") as store:
            records = store.records()
        t0 = time.perf_counter()
        render.write_report(cert, records, folder / "out", config_path=config)
        t_with = time.perf_counter() - t0
        t0 = time.perf_counter()
        render.write_report(cert, records, folder / "out", config_path=config, max_trajectories=0)
        t_without = time.perf_counter() - t0
        render.write_report(cert, records, folder / "out", config_path=config)
        failing = {i for i, c in enumerate(cert.result.cells) if c.decision == "FAIL"}
        result = {
            "cells": len(cert.result.cells),
            "episodes_per_cell": args.episodes,
            "verdict": cert.verdict,
            "certify_s": round(t_certify, 3),
            "report_with_trajectories_s": round(t_with, 3),
            "report_without_trajectories_s": round(t_without, 3),
            "report_over_certify": round(t_with / t_certify, 3),
            "trajectories_over_certify": round((t_with - t_without) / t_certify, 3),
            "html_bytes": (folder / "out" / "report.html").stat().st_size,
            "dom": dom_check(folder / "out" / "report.html", failing, len(cert.result.cells)),
        }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
