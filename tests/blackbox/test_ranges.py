"""Declared observation ranges: two vendors certified with one config receive the same noise.

What each vendor observed is recorded by wrapping its policy in the real rollout
(:func:`build_cell_env` + :func:`run_lockstep` with the context ``make_context`` built) and compared
byte for byte with the observations rebuilt without safecert: Gymnasium's CartPole, the noise
stream ``SeedSequence(seed, spawn_key=(1,))`` and the *declared* Δ.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from safecert.blackbox.certify import make_context, open_store
from safecert.blackbox.jobs import EpisodeJob, episode_seed
from safecert.blackbox.oracles import make_oracle
from safecert.blackbox.plan import plan_run
from safecert.blackbox.rollout import build_cell_env, run_lockstep
from safecert.errors import ConfigError
from tests.blackbox.pipeline_helpers import POLICIES

RANGES = [[-4.8, 4.8], [-3.0, 3.0], [-0.42, 0.42], [-3.5, 3.5]]
LEVEL = 0.1

VENDORS = (
    POLICIES
    + '''

def cautious(obs):
    """Another vendor: pushes by the pole angle only."""
    return (np.asarray(obs)[:, 2] > 0).astype(np.int64)
'''
)


def _config(folder: Path, policy: str, envelope: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bbpipe_pol.py").write_text(VENDORS)
    path = folder / "run.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            policy = "python:bbpipe_pol:{policy}"
            env = "CartPole-v1"
            episodes = 4
            seed = 11
            max_steps = 40
            [spec]
            cost = "abs(obs[0]) > 0.2"
            budget = 3.0
            [envelope]
            obs_noise = {{ levels = [0.0, {LEVEL}] }}
            """
        )
        + envelope
    )
    return path


def _observed(config: Path, tmp: Path) -> tuple[dict[int, list[np.ndarray]], tuple, dict]:
    """Run the noise cell's episodes through the real rollout; what the policy saw, per seed."""
    plan = plan_run(config)
    with open_store(plan, tmp / "store", resume=False) as store:
        ctx = make_context(plan, store)
        ranges = store.get_meta("obs_ranges")
    cell = next(i for i, c in enumerate(plan.cells) if c["obs_noise"] == LEVEL)
    oracle = make_oracle(plan.oracle)
    seen: list[np.ndarray] = []

    def recording(batch: np.ndarray) -> np.ndarray:
        seen.append(np.array(batch[0], copy=True))
        return oracle.act(batch)

    env = build_cell_env(
        plan.config, plan.base_dir, plan.cells[cell], np.asarray(ctx.obs_ranges), recording
    )
    out: dict[int, list[np.ndarray]] = {}
    try:
        for index in range(plan.config.episodes):
            seed = episode_seed(plan.config.seed, cell, index)
            seen.clear()
            [record] = run_lockstep([env], [EpisodeJob(cell, index, seed)], recording, plan.config)
            assert record.failure_reason is None
            out[seed] = list(seen)
    finally:
        env.close()
        oracle.close()
    return out, ctx.obs_ranges, ranges


def _rebuilt(seed: int, policy, delta: np.ndarray) -> list[np.ndarray]:
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
    obs, _ = env.reset(seed=seed)
    views = []
    for _ in range(40):
        view = np.asarray(obs, dtype=float) + LEVEL * delta * rng.standard_normal(4)
        views.append(view)
        obs, _, terminated, truncated, _ = env.step(int(policy(view[None])[0]))
        if terminated or truncated:
            break
    env.close()
    return views


def test_two_vendors_receive_identical_noise_with_declared_ranges(tmp_path):
    namespace: dict = {}
    exec(VENDORS, namespace)  # noqa: S102 - the same vendor code the oracle imports
    declared = f"obs_ranges = {RANGES}\n"
    delta = np.array([hi - lo for lo, hi in RANGES])
    noise: dict[str, dict[int, list[np.ndarray]]] = {}
    for vendor in ("cartpole", "cautious"):
        folder = tmp_path / vendor
        seen, used, stored = _observed(_config(folder, vendor, declared), folder)
        assert np.array_equal(np.asarray(used), delta)  # Δ is the declaration, not the rollouts
        assert stored["source"] == "declared" and stored["episodes"] == 0
        noise[vendor] = {}
        for seed, views in seen.items():
            expected = _rebuilt(seed, namespace[vendor], delta)
            assert len(views) == len(expected)
            for got, want in zip(views, expected, strict=True):
                assert got.tobytes() == want.tobytes()  # byte-identical observations
        # the noise each vendor received, from the documented stream alone
        for seed, views in seen.items():
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
            noise[vendor][seed] = [LEVEL * delta * rng.standard_normal(4) for _ in views]
    a, b = noise["cartpole"], noise["cautious"]
    assert a.keys() == b.keys()
    for seed in a:
        common = min(len(a[seed]), len(b[seed]))
        assert common > 0
        for x, y in zip(a[seed][:common], b[seed][:common], strict=True):
            assert x.tobytes() == y.tobytes()


def test_estimation_uses_the_named_reference_not_the_vendor(tmp_path):
    estimate = 'obs_ranges = "estimate"\nreference_policy = "random"\n'
    ranges = []
    for vendor in ("cartpole", "cautious"):
        folder = tmp_path / vendor
        plan = plan_run(_config(folder, vendor, estimate))
        with open_store(plan, folder / "store", resume=False) as store:
            make_context(plan, store)
            stored = store.get_meta("obs_ranges")
        assert stored["source"] == "estimated" and stored["reference_policy"] == "random"
        assert stored["estimated"] == [False, True, False, True] and stored["episodes"] == 10
        ranges.append(stored["range"])
    assert ranges[0] == ranges[1]  # the vendor under test does not scale its own noise


@pytest.mark.parametrize(
    ("envelope", "needle"),
    [
        ("", "envelope.obs_ranges: observation dimensions [1, 3] are unbounded"),
        ("obs_ranges = [[0.0, 1.0]]\n", "1 [lo, hi] pairs for an observation of 4 dimensions"),
        (
            'obs_ranges = "estimate"\nreference_policy = "python:bbpipe_pol:cartpole"\n',
            "is the policy under test",
        ),
        ('obs_ranges = "estimate"\n', "needs reference_policy"),
        ("obs_ranges = [[1.0, 0.0], [0, 1], [0, 1], [0, 1]]\n", "lo must be smaller than hi"),
        ('reference_policy = "random"\n', 'only used with obs_ranges = "estimate"'),
        (
            "act_ranges = [[-1.0, 1.0]]\nact_noise = { levels = [0.0, 0.1] }\n",
            "envelope.act_ranges: 1 [lo, hi] pairs for the action space Discrete(2)",
        ),
    ],
)
def test_range_declarations_are_validated_before_any_work(tmp_path, envelope, needle):
    with pytest.raises(ConfigError) as err:
        plan_run(_config(tmp_path, "cartpole", envelope))
    assert needle in str(err.value)


def test_verify_recomputes_declared_ranges_and_catches_a_forged_store(cli_here, tmp_path):
    import json

    from safecert.blackbox.store import EpisodeStore

    config = _config(tmp_path, "cartpole", f"obs_ranges = {RANGES}\n")
    out = tmp_path / "out"
    assert cli_here("certify", config, "--out", out, "--workers", "1").code in (0, 1)
    cert_path = out / "certificate.json"
    assert cli_here("verify", cert_path).code == 0
    # halve Δ in the store, then make the certificate agree with the forged store
    with EpisodeStore(out / "episodes.sqlite") as store:  # opened for writing: the forger
        forged = dict(store.get_meta("obs_ranges"))
        forged["range"] = [x / 2 for x in forged["range"]]
        store.set_meta("obs_ranges", forged)
        digest = store.rows_sha256()
    cert = json.loads(cert_path.read_text())
    cert["inputs"]["evidence"][0]["sha256"] = digest
    cert["result"]["obs_ranges"] = forged
    cert_path.write_text(json.dumps(cert, sort_keys=True))
    res = cli_here("verify", cert_path, "--json")
    assert res.code == 1
    failed = [c["name"] for c in res.json()["checks"] if not c["ok"]]
    assert failed == ["observation ranges (declared), recomputed"]
