"""Regenerate the report screenshots in ``docs/screenshots/`` from real runs (CPU, ~1 minute).

Each page is produced by the real engines in a temporary folder and rendered by headless Chromium
(``/usr/bin/chromium``; ``apt-get install -y chromium``):

- ``blackbox_3axis.png`` — CartPole over obs_noise × act_noise × delay (a failing corner that a
  nominal-slice map would hide), ``blackbox_rejudged.png`` — the same run re-judged post hoc;
- ``diff_cheetah.png`` — ``safecert diff`` of the bundled safe and fast HalfCheetah vendors;
- ``shield_grid.png`` — the 7 × 7 gridworld shield synthesized at ε = 0.1;
- ``bnn_lds.png`` — the LDS BNN verified at ε = 0.1σ (SAFE, with its invariant figure);
- ``sequential.png`` — the same CartPole grid certified sequentially (decision counts, e-process
  bounds, INCONCLUSIVE cells);
- ``index.png`` — ``safecert report`` over all of the above.

Each page is shot at 1400 px (``NAME.png``) and at 420 px, as on a phone (``NAME_420.png``).

Run from the repository root::

    .venv/bin/python scripts/report_screenshots.py [--out docs/screenshots]

Progress goes to stderr, one line per page.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.report.browser import CHROMIUM, screenshot, screenshot_at  # noqa: E402

CARTPOLE = """
policy = "python:bbpipe_pol:cartpole"
env = "CartPole-v1"
episodes = 20
max_steps = 60
[spec]
budget = 0.0
cost = 'info.get("cost", 0)'
p_star = 0.5
[envelope]
obs_noise = { levels = [0.3, 0.0] }
act_noise = { kind = "uniform", levels = [0.0, 0.5] }
delay = { levels = [0, 3] }
obs_ranges = [[-4.8, 4.8], [-1.0, 1.0], [-0.42, 0.42], [-1.0, 1.0]]
"""


def _say(text: str, start: float) -> None:
    print(f"[{time.monotonic() - start:6.1f} s] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"error: {CHROMIUM} is absent; apt-get install -y chromium", file=sys.stderr)
        return 2
    from safecert.api import certify_blackbox as certify
    from safecert.api import synthesize_shield, verify_bnn
    from safecert.blackbox.rejudge import rejudge
    from safecert.certificate import read_certificate
    from safecert.report import write_run_report
    from safecert.report.diff import diff_certificates, write_diff_html
    from safecert.report.index import build_index, write_index
    from tests.blackbox.pipeline_helpers import write_run
    from tests.bnn.conftest import EXAMPLE, FAST

    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="safecert-shots-") as tmp:
        root = Path(tmp)
        runs = root / "runs"
        pages: dict[str, Path] = {}

        config = write_run(root / "cartpole", CARTPOLE)
        certify(config, runs / "cartpole", workers=1, progress=False)
        pages["blackbox_3axis"] = runs / "cartpole" / "report.html"
        _, where = rejudge(runs / "cartpole", budget=6.0, p_star=0.9)
        write_run_report(where / "certificate.json")
        pages["blackbox_rejudged"] = where / "report.html"
        (root / "seq").mkdir()
        seq_config = write_run(
            root / "seq", CARTPOLE.replace("episodes = 20", "episodes = 40") + "\n[sequential]\n"
        )
        certify(seq_config, runs / "sequential", workers=1, progress=False)
        pages["sequential"] = runs / "sequential" / "report.html"
        _say("black-box runs done", start)

        examples = REPO / "examples"
        certs = {}
        for name in ("safe", "fast"):
            text = (examples / f"cheetah_onnx_{name}.toml").read_text()
            text = text.replace('"onnx:vendors/', f'"onnx:{examples}/vendors/')
            text = re.sub(r"(?m)^episodes = \d+", "episodes = 10", text)
            text = re.sub(r"(?m)^p_star = [0-9.]+", "p_star = 0.4", text)
            (root / name).mkdir()
            (root / name / "run.toml").write_text(text)
            certify(root / name / "run.toml", runs / f"cheetah_{name}", workers=1, progress=False)
            certs[name] = runs / f"cheetah_{name}" / "certificate.json"
        diff = diff_certificates(
            read_certificate(certs["safe"]),
            read_certificate(certs["fast"]),
            "cheetah_safe/certificate.json",
            "cheetah_fast/certificate.json",
        )
        pages["diff_cheetah"] = write_diff_html(diff, root / "diff.html")
        _say("cheetah vendors and diff done", start)

        shield = examples / "shield"
        synthesize_shield(
            shield / "grid.toml", shield / "grid_logs.jsonl", out=runs / "shield_grid", epsilon=0.1
        )
        pages["shield_grid"] = runs / "shield_grid" / "report.html"
        _say("shield done", start)

        (root / "bnn").mkdir()
        shutil.copyfile(EXAMPLE / "lds.npz", root / "bnn" / "lds.npz")
        (root / "bnn" / "run.toml").write_text(FAST)
        verify_bnn(root / "bnn" / "run.toml", runs / "bnn_lds")
        pages["bnn_lds"] = runs / "bnn_lds" / "report.html"
        _say("BNN done", start)

        pages["index"] = write_index(build_index(runs), runs)
        for name, page in pages.items():
            for shot in (
                screenshot(page, args.out / f"{name}.png", size="1400,2000"),
                screenshot_at(page, args.out / f"{name}_420.png", 420, 2000),
            ):
                where = shot.relative_to(REPO) if shot.is_relative_to(REPO) else shot
                _say(f"wrote {where}", start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
