"""Spec expressions end to end: no silent zero for a key the environment does not provide, and an
expression cost and goal on an unwrapped Gymnasium env checked against an independent replay."""

from __future__ import annotations

import json
import sqlite3
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from safecert.blackbox.jobs import RANGE_CELL, episode_seed
from safecert.blackbox.preflight import PREFLIGHT_CELL
from safecert.blackbox.rollout import failure_kind
from safecert.blackbox.store import EpisodeStore
from tests.blackbox.pipeline_helpers import write_run
from tests.conftest import run_cli

POINT = """
policy = "python:bbpipe_pol:point_greedy"
env = "SafePointGoal-v0"
episodes = 6
max_steps = 60
[spec]
goal = "info:is_success"
cost = "info:{key}"
budget = 0.0
p_star = 0.5
"""


def _episodes_stored(out) -> int:
    path = out / "episodes.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]


def test_misspelled_cost_key_exits_2_before_any_episode_naming_the_key(tmp_path, cli_here):
    config = write_run(tmp_path, POINT.format(key="csot"))
    res = run_cli("certify", str(config), "--out", str(tmp_path / "bad"), "--workers", "1")
    assert res.code == 2, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in res.stderr
    assert line.startswith("safecert: error: spec.cost:") and "'csot'" in line
    assert "cost" in line.split("keys present:")[1]  # what the environment does provide
    assert _episodes_stored(tmp_path / "bad") == 0
    # the same run with the right key certifies — and finds the cost the typo hid
    good = write_run(tmp_path / "good", POINT.format(key="cost"))
    res = cli_here("certify", good, "--out", tmp_path / "ok", "--workers", "1", "--json")
    assert res.code in (0, 1), res.stderr
    assert res.json()["result"]["stage1"]["safety_failures"] > 0


def test_missing_goal_key_is_named_and_an_explicit_default_is_accepted(cli_here, tmp_path):
    body = """
    policy = "python:bbpipe_pol:cartpole"
    env = "CartPole-v1"
    episodes = 3
    max_steps = 30
    [spec]
    cost = "0"
    goal = '{goal}'
    """
    bad = write_run(tmp_path / "a", body.format(goal='terminated and info["success"]'))
    res = cli_here("certify", bad, "--out", tmp_path / "a/out", "--workers", "1")
    assert res.code == 2 and "spec.goal:" in res.stderr and "'success'" in res.stderr
    ok = write_run(tmp_path / "b", body.format(goal='not terminated or info.get("success", 0)'))
    res = cli_here("certify", ok, "--out", tmp_path / "b/out", "--workers", "1", "--json")
    assert res.code in (0, 1), res.stderr
    assert res.json()["result"]["goal_expression"] == 'not terminated or info.get("success", 0)'


MOUNTAIN_POLICY = '''
import numpy as np

def pump(obs):
    """Bang-bang on the sign of the (observed) velocity: pumps energy, reaches the flag."""
    return np.where(np.asarray(obs)[:, 1:2] >= 0, 1.0, -1.0)
'''

MOUNTAIN = """
policy = "python:spec_pol:pump"
env = "MountainCarContinuous-v0"
episodes = 5
seed = 3
max_steps = 200
[spec]
cost = "0.1 * action[0] ** 2 + (abs(obs[1]) > 0.04)"
goal = "terminated and obs[0] >= 0.45 and episode_cost <= 40"
budget = 30.0
p_star = 0.5
[envelope]
obs_noise = { levels = [0.0, 0.1] }
"""


def _replay(seed: int, level: float, max_steps: int) -> tuple[float, bool, int]:
    """The episode rebuilt without safecert: Gymnasium, the noise drawn from the documented
    stream ``SeedSequence(seed, spawn_key=(1,))`` scaled by the space's range, the cost and the
    goal written out in numpy on the *true* observations."""
    env = gym.make("MountainCarContinuous-v0")
    space = env.observation_space
    delta = np.asarray(space.high, float) - np.asarray(space.low, float)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))

    def seen(o: np.ndarray) -> np.ndarray:
        return np.asarray(o, float) + level * delta * rng.standard_normal(2) if level else o

    obs, _ = env.reset(seed=seed)
    view, cost, steps, terminated = seen(obs), 0.0, 0, False
    while steps < max_steps:
        a = 1.0 if view[1] >= 0 else -1.0
        obs, _, terminated, truncated, _ = env.step(np.array([a]))
        steps += 1
        cost += 0.1 * a * a + float(abs(float(obs[1])) > 0.04)
        view = seen(obs)
        if terminated or truncated:
            break
    env.close()
    return cost, bool(terminated and obs[0] >= 0.45 and cost <= 40), steps


def test_expression_cost_and_goal_match_an_independent_replay(cli_here, tmp_path):
    (tmp_path / "spec_pol.py").write_text(MOUNTAIN_POLICY)
    config = tmp_path / "run.toml"
    config.write_text(textwrap.dedent(MOUNTAIN))
    res = cli_here("certify", config, "--out", tmp_path / "out", "--workers", "1", "--json")
    assert res.code in (0, 1), res.stderr
    result = res.json()["result"]
    assert result["cost_expression"] == "0.1 * action[0] ** 2 + (abs(obs[1]) > 0.04)"
    assert result["obs_ranges"]["source"] == "space" and result["action_out_of_space"] == "fail"
    levels = {i: c["params"]["obs_noise"] for i, c in enumerate(result["cells"])}
    with EpisodeStore(tmp_path / "out/episodes.sqlite", create=False) as store:
        records = store.records()
    assert len(records) == 10 and {r.cell for r in records} == {0, 1}
    costs = set()
    for r in records:
        cost, goal, steps = _replay(r.seed, levels[r.cell], 200)
        assert (r.steps, r.goal) == (steps, goal), (r.cell, r.index)
        assert r.cost == pytest.approx(cost, abs=1e-9), (r.cell, r.index)
        costs.add(round(r.cost, 6))
    assert len(costs) > 1 and any(r.goal for r in records)  # a test that can fail both ways
    verify = cli_here("verify", tmp_path / "out/certificate.json", "--resimulate", "2")
    assert verify.code == 0, verify.stdout


def test_failure_kinds_group_reasons_by_kind_not_value():
    assert failure_kind("action_out_of_space: action[0] = 2.5 outside [-2, 2]") == (
        "action_out_of_space"
    )
    assert failure_kind("spec: spec.cost: info has no key 'cost'") == "spec"
    assert failure_kind("call took 3s > timeout 1s") == "oracle_call"
    assert failure_kind("onnxruntime: bad input: got 3") == "oracle_call"
    # the range-estimation seeds stay disjoint from the pre-run check's and every grid cell's
    assert len({episode_seed(0, RANGE_CELL, 0), episode_seed(0, PREFLIGHT_CELL, 0)}) == 2
    assert json.dumps(failure_kind("")) == '"oracle_call"'


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (
            'action_out_of_space = "wrap"',
            "spec.action_out_of_space: Input should be 'fail' or 'clip'",
        ),
        ('cost = "abs(obs[0] > 1"', "spec.cost: 'abs(obs[0] > 1' ends early"),
        ('cost = "speed > 1"', "spec.cost: unknown name 'speed'"),
        ('goal = "episode_cost < t"', "spec.goal: unknown name 't'"),
        ('cost = "episode_cost"', "spec.cost: unknown name 'episode_cost'"),
        ("goal = 'info.get(\"success\")'", "spec.goal: get() needs a default"),
    ],
)
def test_new_spec_keys_are_one_line_exit_2(cli_here, tmp_path, line, needle):
    key = line.split("=")[0].strip()
    kept = [ln for ln in POINT.format(key="cost").splitlines() if not ln.startswith(f"{key} =")]
    config = write_run(tmp_path, "\n".join(kept).replace("[spec]", f"[spec]\n{line}"))
    res = cli_here("certify", config, "--out", tmp_path / "out")
    assert res.code == 2 and needle in res.stderr and "\n" not in res.stderr.strip(), res.stderr
