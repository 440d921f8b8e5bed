"""Ray backend vs the local process pool on 2 cores: equal certificates, wall time.

One config (CartPole-v1 with a balancing ``python:`` policy, a 2×2 noise grid, ``--episodes``
per cell) is certified four ways in this process: fixed N with ``LocalBackend(2)`` and with
``RayBackend(num_cpus=2)`` (a local Ray instance, started once and timed separately), and
sequentially with both. The certificates' content digests (everything but the timestamp) must be
equal; the wall times are reported as measured (the machine is shared: noisy).

    .venv/bin/python benchmarks/ray_vs_local.py [--episodes 400]

Writes ``benchmarks/out/ray_vs_local.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
import time
from pathlib import Path

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.certify import certify
from safecert.blackbox.ray_backend import RayBackend
from safecert.blackbox.sequential import certify_sequential
from safecert.certificate import content_sha256

OUT = Path(__file__).resolve().parent / "out"
POLICY = """
import numpy as np

def cartpole(obs):
    obs = np.asarray(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
"""
CONFIG = """
policy = "python:pol:cartpole"
env = "CartPole-v1"
episodes = {episodes}
seed = 3
max_steps = 200
batch_size = 8
[spec]
cost = 'info.get("cost", 0)'
budget = 0.0
p_star = 0.3
[envelope]
obs_noise = {{ kind = "gaussian", levels = [0.0, 0.2] }}
obs_ranges = "estimate"
reference_policy = "random"
act_noise = {{ kind = "gaussian", levels = [0.0, 0.3] }}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "pol.py").write_text(textwrap.dedent(POLICY))
        config = folder / "run.toml"
        config.write_text(CONFIG.format(episodes=args.episodes))
        ray = RayBackend(num_cpus=2)
        start = time.perf_counter()
        import ray as ray_module

        ray._connect()
        startup = time.perf_counter() - start
        runs = {}

        def timed(name, fn):
            t = time.perf_counter()
            cert = fn()
            runs[name] = {
                "seconds": time.perf_counter() - t,
                "digest": content_sha256(cert),
                "verdict": cert.verdict,
            }
            print(f"{name:<22} {runs[name]['seconds']:7.2f} s  {cert.verdict}", flush=True)

        timed(
            "fixed local (2 proc)",
            lambda: certify(config, folder / "fl", backend=LocalBackend(2), progress=False),
        )
        timed(
            "fixed ray (2 cpus)",
            lambda: certify(config, folder / "fr", backend=ray, progress=False),
        )
        timed(
            "sequential local",
            lambda: certify_sequential(config, folder / "sl", LocalBackend(2), False, False),
        )
        timed(
            "sequential ray", lambda: certify_sequential(config, folder / "sr", ray, False, False)
        )
        ray.close()
        assert not ray_module.is_initialized()
    result = {
        "episodes_per_cell": args.episodes,
        "cells": 4,
        "ray_startup_seconds": startup,
        "runs": runs,
        "fixed_equal": runs["fixed local (2 proc)"]["digest"]
        == runs["fixed ray (2 cpus)"]["digest"],
        "sequential_equal": runs["sequential local"]["digest"] == runs["sequential ray"]["digest"],
        "ray_over_local_fixed": runs["fixed ray (2 cpus)"]["seconds"]
        / runs["fixed local (2 proc)"]["seconds"],
    }
    print(
        f"Ray start-up {startup:.1f} s; equal certificates: fixed {result['fixed_equal']}, "
        f"sequential {result['sequential_equal']}; Ray/local wall time (fixed) "
        f"{result['ray_over_local_fixed']:.2f}"
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "ray_vs_local.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
