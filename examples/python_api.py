"""The three engines from Python, end to end: certify, verify, and gate on the verdict.

    .venv/bin/python examples/python_api.py runs/api

Exit 0 when every certificate verifies and holds (PASS / SAFE), 1 otherwise, like a CI gate.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import safecert

HERE = Path(__file__).resolve().parent


def main(out: Path) -> int:
    results = {}

    # 1. an opaque policy: a Stable-Baselines3 zip on a Gymnasium id (no user code runs here)
    run = {
        "policy": "sb3:vendors/ppo_cartpole.zip",
        "env": "CartPole-v1",
        "episodes": 30,
        "seed": 0,
        "max_steps": 100,
        "batch_size": 8,
        "spec": {
            "cost": "abs(obs[0]) > 1.0",
            "goal": "not terminated",
            "budget": 10.0,
            "p_star": 0.3,
        },
        "kpis": {"return": {"lower": 0.0, "upper": 100.0}},
        "envelope": {
            "obs_noise": {"kind": "gaussian", "levels": [0.0, 0.05]},
            "obs_ranges": [[-2.4, 2.4], [-3.0, 3.0], [-0.21, 0.21], [-3.5, 3.5]],
        },
    }
    cert = safecert.certify_blackbox(run, out / "cartpole", base_dir=HERE, workers=1)
    results["black-box"] = (cert.verdict, out / "cartpole" / "certificate.json", {})

    # 2. a shield synthesized from ordinary logs, then certified on its own
    model, logs = HERE / "shield" / "grid.toml", HERE / "shield" / "grid_logs.jsonl"
    shield = safecert.synthesize_shield(model, logs, epsilon=0.2, out=out / "grid")
    results["shield"] = (shield.verdict, out / "grid" / "certificate.json", {"logs": logs})

    # 3. infinite-horizon safety of a BNN policy, the system given as data
    system_dir = HERE / "bnn" / "double_integrator"
    config = tomllib.loads((system_dir / "double_integrator.toml").read_text())
    config.update(policy=str(system_dir / "policy.onnx"), epsilon="0.1sigma")
    bnn = safecert.verify_bnn(config, out / "di")
    results["bnn"] = (bnn.verdict, out / "di" / "certificate.json", {})

    ok = True
    for name, (verdict, path, options) in results.items():
        report = safecert.verify(path, **options)
        holds = report.ok and verdict in ("PASS", "SAFE")
        ok = ok and holds
        failed = ", ".join(c.name for c in report.checks if not c.ok) or "none"
        print(f"{name:9s} {verdict:7s} verified: {report.ok} (failed checks: {failed})  {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/api")))
