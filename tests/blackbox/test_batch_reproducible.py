"""Evidence does not depend on ``batch_size``: continuous-action torch policies (TorchScript and a
Stable-Baselines3 SAC zip) give bit-identical episode stores at batch 1 and batch 8, and
``verify --resimulate`` passes on the honest batch-8 certificates.

Batched torch kernels round a row differently at another batch size (an SAC policy's returns moved
by ~1e-4 between batch 1 and 8); safecert's policy workers infer row by row, so an episode's
outcome depends only on its seed.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest

from safecert.certificate import read_certificate
from safecert.cli.main import main

torch = pytest.importorskip("torch")

CONFIG = """
policy = "{policy}"
env = "Pendulum-v1"
episodes = 10
seed = 11
max_steps = 60
batch_size = {batch}
[spec]
budget = 20.0
p_star = 0.5
cost = 'abs(obs[2]) > 4.0'
goal = "no_termination"
[kpis]
return = {{ lower = -1000.0, upper = 0.0 }}
[envelope]
act_noise = {{ kind = "gaussian", levels = [0.0, 0.2] }}
"""


def _torchscript(folder: Path) -> str:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 1),
    )  # fmt: skip
    torch.jit.script(net).save(str(folder / "policy.pt"))
    return "torchscript:policy.pt"


def _sac(folder: Path) -> str:
    sb3 = pytest.importorskip("stable_baselines3")
    sb3.SAC("MlpPolicy", "Pendulum-v1", seed=1, device="cpu").save(folder / "sac.zip")
    return "sb3:sac.zip"


def _rows(run: Path) -> list[tuple]:
    db = sqlite3.connect(run / "episodes.sqlite")
    try:
        return db.execute("SELECT * FROM episodes ORDER BY cell, idx").fetchall()
    finally:
        db.close()


@pytest.mark.parametrize(
    "make_policy",
    [
        pytest.param(_torchscript, id="torchscript"),
        pytest.param(_sac, id="sb3-sac", marks=pytest.mark.slow),  # 30 s: SB3's start-up
    ],
)
def test_batch_1_and_8_store_identical_evidence_and_resimulate(tmp_path, make_policy, capsys):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    policy = make_policy(inputs)
    runs = {}
    for batch in (1, 8):
        config = inputs / f"b{batch}.toml"
        config.write_text(textwrap.dedent(CONFIG.format(policy=policy, batch=batch)))
        out = tmp_path / f"b{batch}"
        assert main(["certify", str(config), "--out", str(out), "--workers", "1"]) in (0, 1)
        runs[batch] = out
    one, eight = _rows(runs[1]), _rows(runs[8])
    assert len(one) == 20 and one == eight  # returns and costs bit for bit, not to 1e-4
    assert read_certificate(runs[8] / "certificate.json").inputs.evidence[0].sha256 == (
        read_certificate(runs[1] / "certificate.json").inputs.evidence[0].sha256
    )
    capsys.readouterr()
    cert = str(runs[8] / "certificate.json")
    assert main(["verify", cert, "--resimulate", "20", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)["checks"]
    resim = [c for c in checks if c["name"].startswith("resimulated 20 episodes")]
    assert len(resim) == 1 and resim[0]["ok"] and resim[0]["detail"] == "every outcome reproduced"
