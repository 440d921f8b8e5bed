"""One certified LDS run shared by the CLI, checker and CEGIS tests, and one UNKNOWN run.

The certified run is the real ``safecert bnn verify ... --json`` command in a subprocess. Under
pytest-xdist every worker would build a session fixture on its own, so the run lives in the
temporary root all workers share and a file lock makes the first worker do it and the others wait
for its files. The UNKNOWN run is cut off by a 1 ms time limit (seconds, in-process, per worker).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from tests.conftest import CliResult, run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bnn"
EPS = "0.1sigma"
SYSTEM = Path(__file__).resolve().parents[2] / "src" / "safecert" / "bnn" / "data"
# the published code's X0 = 0.4 (the packaged lds_x04 tables, written into the config)
FAST = f"""
policy = "lds.npz"
epsilon = "{EPS}"
{(SYSTEM / "lds_x04.system.toml").read_text()}
[data]
bootstrap = false
initial_samples = 300
unsafe_samples = 300
[limits]
per_epsilon_s = 150
solver_s = 60
"""


@dataclass
class LdsRun:
    folder: Path  # run.toml, lds.npz and out/ (certificate.json, policy.npz, invariant.png)
    result: CliResult  # the `safecert bnn verify` subprocess

    @property
    def certificate(self) -> Path:
        return self.folder / "out" / "certificate.json"


@pytest.fixture(scope="session")
def unknown_run(tmp_path_factory) -> Path:
    """certificate.json of a real ``--benchmark lds`` run cut off at once: UNKNOWN, one attempt."""
    from safecert.bnn.certify import certify_run
    from safecert.bnn.setup import benchmark_config

    cfg = benchmark_config(
        "lds_x04",
        epsilon="1sigma",
        data={"bootstrap": False, "initial_samples": 50, "unsafe_samples": 50},
        learner={"epochs": 1},
        limits={"per_epsilon_s": 0.001},
    )
    run = certify_run(cfg, None, tmp_path_factory.mktemp("bnn_unknown") / "out")
    assert run.certificate.verdict == "UNKNOWN"
    return run.path


@pytest.fixture(scope="session")
def lds_run(tmp_path_factory) -> LdsRun:
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    d = root / "bnn_lds_run"
    with FileLock(str(root / "bnn_lds_run.lock")):
        done = d / "cli_result.json"
        if not done.is_file():
            d.mkdir(exist_ok=True)
            shutil.copyfile(EXAMPLE / "lds.npz", d / "lds.npz")
            (d / "run.toml").write_text(FAST)
            res = run_cli("bnn", "verify", str(d / "run.toml"), "--out", str(d / "out"), "--json")
            done.write_text(json.dumps(res.__dict__))
    return LdsRun(d, CliResult(**json.loads(done.read_text())))
