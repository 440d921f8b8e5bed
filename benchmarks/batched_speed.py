"""Batched lockstep rollouts vs one observation per oracle call, for an ONNX and an HTTP policy.

The same episodes (same seeds, so the same outcomes) are run by the certify runner on one
worker with ``batch_size = 1`` (one observation per oracle call) and ``batch_size = B`` (B env
copies stepped in lockstep, one call answers all live copies), in the same process, one after
the other; the ratio of wall times is the speed-up. Policies are BB-core's bundled vendors:

- ONNX: ``examples/vendors/cheetah_fast.onnx`` on ``SafeHalfCheetahVelocity-v0`` (MuJoCo);
- ONNX on a cheap env: a 14→64→64→2 tanh MLP exported here with torch (random weights; only
  the speed matters) on ``SafePointGoal-v0``, where the oracle call, not the simulator, dominates;
- HTTP: ``examples/vendors/http_vendor.py --policy point:hazard_avoider`` (FastAPI + uvicorn on
  127.0.0.1, an ephemeral port) on ``SafePointGoal-v0``.

    .venv/bin/python benchmarks/batched_speed.py [--episodes 64] [--batch 32]

Writes ``benchmarks/out/batched_speed.json``. The machine is shared: timings are noisy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.certify import make_context, open_store
from safecert.blackbox.plan import plan_run

ROOT = Path(__file__).resolve().parents[1]
VENDORS = ROOT / "examples" / "vendors"
OUT = Path(__file__).resolve().parent / "out"

ONNX = """
policy = "onnx:{vendors}/cheetah_fast.onnx"
env = "SafeHalfCheetahVelocity-v0"
episodes = {episodes}
seed = 0
max_steps = 100
batch_size = {batch}
[spec]
budget = 5.0
p_star = 0.10
goal = "no_termination"
"""

ONNX_POINT = """
policy = "onnx:{model}"
env = "SafePointGoal-v0"
env_kwargs = {{ layout_seed = 0 }}
episodes = {episodes}
seed = 0
max_steps = 100
batch_size = {batch}
[spec]
budget = 5.0
p_star = 0.10
goal = "info:is_success"
"""

HTTP = """
policy = "{url}"
env = "SafePointGoal-v0"
env_kwargs = {{ layout_seed = 0 }}
episodes = {episodes}
seed = 0
max_steps = 100
batch_size = {batch}
timeout_s = 10.0
[spec]
budget = 5.0
p_star = 0.10
goal = "info:is_success"
"""


def timed(template: str, folder: Path, name: str, **fmt) -> tuple[float, list]:
    """Wall time of running every episode of the config on one local worker (rollouts only:
    planning, the oracle probe and the report are outside the timer)."""
    config = folder / f"{name}.toml"
    config.write_text(template.format(**fmt))
    plan = plan_run(config)
    with open_store(plan, folder / name, resume=False) as store:
        ctx = make_context(plan, store)
    jobs = plan.all_jobs()
    start = time.perf_counter()
    records = list(LocalBackend(1).run(jobs, ctx))
    seconds = time.perf_counter() - start
    outcomes = sorted((r.cell, r.index, r.goal, r.cost, r.steps) for r in records)
    return seconds, outcomes


def export_point_mlp(path: Path) -> Path:
    import warnings

    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(14, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 2),
        torch.nn.Tanh(),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net,
            torch.zeros(1, 14),
            path,
            input_names=["obs"],
            output_names=["act"],
            dynamic_axes={"obs": {0: "batch"}, "act": {0: "batch"}},
            dynamo=False,
        )
    return path


def start_vendor() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(VENDORS / "http_vendor.py"),
            "--policy",
            "point:hazard_avoider",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on"):
            return proc, line.split()[-1].rstrip("/") + "/act"
    raise RuntimeError("the vendor server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    results = {"episodes": args.episodes, "batch": args.batch, "policies": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        proc, url = start_vendor()
        model = export_point_mlp(folder / "point_mlp.onnx")
        try:
            for kind, template, extra in (
                ("onnx", ONNX, {"vendors": VENDORS}),
                ("onnx_point_mlp", ONNX_POINT, {"model": model}),
                ("http", HTTP, {"url": url}),
            ):
                one, r1 = timed(
                    template, folder, f"{kind}_b1", episodes=args.episodes, batch=1, **extra
                )
                many, rb = timed(
                    template,
                    folder,
                    f"{kind}_b{args.batch}",
                    episodes=args.episodes,
                    batch=args.batch,
                    **extra,
                )
                results["policies"][kind] = {
                    "seconds_batch_1": one,
                    f"seconds_batch_{args.batch}": many,
                    "speedup": one / many,
                    "same_outcomes": r1 == rb,
                }
                print(
                    f"{kind}: batch 1 {one:.2f} s, batch {args.batch} {many:.2f} s, "
                    f"speed-up {one / many:.2f}x, same outcomes {r1 == rb}",
                    flush=True,
                )
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    OUT.mkdir(exist_ok=True)
    (OUT / "batched_speed.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
