"""The shipped example configs and vendors: every config parses, its oracle and env are built, and
the bundled vendors behave as documented on real episodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.config import load_run_config
from safecert.blackbox.oracles import make_oracle, parse_oracle_spec
from safecert.blackbox.plan import oracle_spec
from safecert.envs import make_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = [
    EXAMPLES / name
    for name in (
        "point_python.toml",
        "point_exec.toml",
        "point_http.toml",
        "cartpole_python.toml",
        "cheetah_onnx_safe.toml",
        "cheetah_onnx_fast.toml",
        "cheetah_exec.toml",
    )
]


def oracle_for(config, base):
    spec = oracle_spec(config, base)
    return spec, make_oracle(spec)


def rollout(env, oracle, seed: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    obs, _ = env.reset(seed=seed)
    costs, velocities = [], []
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(oracle.act(obs[None])[0])
        costs.append(info["cost"])
        velocities.append(info.get("velocity", np.nan))
        if terminated or truncated:
            break
    return np.array(costs), np.array(velocities)


def test_there_is_an_example_for_every_oracle_kind():
    kinds = {load_run_config(p)[0].policy.partition(":")[0] for p in CONFIGS}
    assert {"python", "exec", "http", "onnx"} <= kinds


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_runs_a_short_episode(path, monkeypatch):
    config, base, _ = load_run_config(path)
    monkeypatch.setenv("VENDOR_TOKEN", "demo")
    spec, oracle = oracle_for(config, base)
    env = make_env(config.env, config.env_kwargs, base)
    if spec.kind == "http":  # needs its server; parsing and header expansion are what we check
        assert spec.headers and oracle.headers["Authorization"] == "Bearer demo"
        return
    oracle.probe()
    costs, _ = rollout(env, oracle, seed=0, steps=20)
    assert len(costs) > 0 and set(np.unique(costs)) <= {0.0, 1.0}
    oracle.close()


def test_bundled_cheetah_vendors_ignore_and_respect_the_velocity_limit():
    env = make_env("SafeHalfCheetahVelocity-v0", {}, EXAMPLES)
    results = {}
    for name in ("fast", "safe"):
        oracle = make_oracle(
            parse_oracle_spec(f"onnx:vendors/cheetah_{name}.onnx", base_dir=EXAMPLES)
        )
        costs, velocity = rollout(env, oracle, seed=7, steps=250)
        np.testing.assert_array_equal(costs, (velocity > 3.2096).astype(float))
        results[name] = (costs.sum(), velocity.mean())
    assert results["fast"][0] > 50  # well over any sensible budget
    assert results["safe"][0] <= 5  # within the examples' budget
    assert results["safe"][1] > 1.5  # and still running, not standing still
