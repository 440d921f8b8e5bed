"""Time from SIGTERM to exit of ``safecert shield serve`` (stdio, idle, payments example), and
from ``kill -9`` of the gateway to the end of its upstream (the parent-death signal).

    .venv/bin/python benchmarks/guard_shutdown.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAYMENTS = ROOT / "examples" / "payments"
SAFECERT = [
    sys.executable,
    "-c",
    "import sys; from safecert.cli.main import main; sys.exit(main())",
]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def one(work: Path, sig: int) -> tuple[float, int, float]:
    argv = [*SAFECERT, "shield", "serve", "--certificate", "cert/certificate.json",
            "--upstream", "python tools_server.py", "--abstraction", "phi:phi",
            "--action-map", "phi:action"]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # "N upstream tools behind the shield": the upstream is up
    supervisor = _children(proc.pid)[0]
    upstream = _children(supervisor)[0]
    t0 = time.perf_counter()
    proc.send_signal(sig)
    code = proc.wait(30)
    exited = time.perf_counter() - t0
    while _alive(upstream) and time.perf_counter() - t0 < 30:
        time.sleep(0.001)
    gone = time.perf_counter() - t0
    return exited, code, gone


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("tools_server.py", "phi.py", "model.toml"):
            shutil.copy(PAYMENTS / name, work / name)
        shutil.copytree(PAYMENTS / "cert", work / "cert")
        os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            runs = [one(work, sig) for _ in range(args.runs)]
            worst_exit = max(r[0] for r in runs)
            worst_gone = max(r[2] for r in runs)
            print(
                f"{signal.Signals(sig).name}: exit code {sorted({r[1] for r in runs})}, "
                f"gateway gone ≤ {worst_exit:.3f} s, upstream gone ≤ {worst_gone:.3f} s "
                f"(worst of {args.runs})"
            )


if __name__ == "__main__":
    main()
