"""Honest actions: one out-of-space rule in every cell, the reply's type and shape checked on a
real observation before any episode, failure reasons grouped by kind."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from safecert.blackbox.oracles import OracleFailure
from safecert.blackbox.rollout import BoxBatch, action_mismatch, to_action
from safecert.blackbox.store import EpisodeStore

VENDORS = '''
import numpy as np

def over(obs):
    """Always 3.0 on Pendulum's Box[-2, 2]."""
    return np.full((len(obs), 1), 3.0)

def at_edge(obs):
    return np.full((len(obs), 1), 2.0)

def drifting(obs):
    """Out of the box by a different amount at every step."""
    obs = np.asarray(obs)
    return 2.0 + 0.01 + np.abs(obs[:, 0:1])

def logits(obs):
    """Two logits per row for CartPole's Discrete(2): the classic export mistake."""
    obs = np.asarray(obs)
    return np.stack([obs[:, 2], -obs[:, 2]], axis=1)

def fractional(obs):
    return np.full(len(obs), 0.5)

def three(obs):
    return np.zeros((len(obs), 3))
'''

PENDULUM = """
policy = "python:act_pol:{policy}"
env = "Pendulum-v1"
episodes = 3
max_steps = 15
[spec]
cost = "action[0] ** 2"
goal = "not terminated"
budget = 1000.0
p_star = 0.5
action_out_of_space = "{rule}"
[envelope]
act_noise = {{ levels = [0.0, 0.2] }}
delay = {{ levels = [0, 2] }}
"""


def _write(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "act_pol.py").write_text(VENDORS)
    path = folder / "run.toml"
    path.write_text(textwrap.dedent(body))
    return path


def _run(cli_here, folder: Path, body: str):
    config = _write(folder, body)
    res = cli_here("certify", config, "--out", folder / "out", "--workers", "1", "--json")
    return res


def _records(folder: Path):
    with EpisodeStore(folder / "out/episodes.sqlite", create=False) as store:
        return {(r.cell, r.index): r for r in store.records()}


def test_clip_is_applied_before_any_perturbation_in_every_cell(cli_here, tmp_path):
    res = _run(cli_here, tmp_path / "over", PENDULUM.format(policy="over", rule="clip"))
    assert res.code in (0, 1), res.stderr
    assert res.json()["result"]["action_out_of_space"] == "clip"
    edge = _run(cli_here, tmp_path / "edge", PENDULUM.format(policy="at_edge", rule="clip"))
    assert edge.code in (0, 1), edge.stderr
    over, at_edge = _records(tmp_path / "over"), _records(tmp_path / "edge")
    assert len(over) == 12 and over.keys() == at_edge.keys()  # 4 cells × 3 episodes
    for key, r in over.items():
        e = at_edge[key]
        assert (r.ret, r.cost, r.steps, r.goal) == (e.ret, e.cost, e.steps, e.goal), key
        assert r.cost == pytest.approx(4.0 * r.steps)  # the policy's action, clipped to 2.0
        assert r.failure_reason is None


def test_fail_ends_every_episode_in_every_cell_with_one_grouped_kind(cli_here, tmp_path):
    res = _run(cli_here, tmp_path / "f", PENDULUM.format(policy="drifting", rule="fail"))
    assert res.code == 1, res.stderr
    result = res.json()["result"]
    records = _records(tmp_path / "f")
    assert len(records) == 12 and all(r.steps == 0 and not r.goal for r in records.values())
    reasons = {r.failure_reason for r in records.values()}
    assert len(reasons) > 1  # different values …
    kinds = result["oracle_failures"]["kinds"]
    assert list(kinds) == ["action_out_of_space"] and kinds["action_out_of_space"]["count"] == 12
    assert kinds["action_out_of_space"]["example"] in reasons  # … one kind, with an example
    assert all(c["failures"] == 3 for c in result["cells"])


@pytest.mark.parametrize(
    ("env", "policy", "needle"),
    [
        ("CartPole-v1", "logits", "expected one integer action for Discrete(2), got 2 values"),
        ("CartPole-v1", "fractional", "expected an integer action for Discrete(2), got 0.5"),
        ("Pendulum-v1", "three", "expected an action of shape (1,)"),
    ],
)
def test_health_check_refuses_a_reply_of_the_wrong_type_before_any_episode(
    cli_here, tmp_path, env, policy, needle
):
    body = f"""
    policy = "python:act_pol:{policy}"
    env = "{env}"
    episodes = 40
    [spec]
    cost = "0"
    """
    res = _run(cli_here, tmp_path, body)
    assert res.code == 2
    line = res.stderr.strip()
    assert (
        "\n" not in line and line.startswith("safecert: error: policy: replied") and needle in line
    )
    store = tmp_path / "out/episodes.sqlite"
    if store.exists():
        with sqlite3.connect(store) as db:
            assert db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == 0


def test_to_action_rules_against_the_space():
    box = gym.spaces.Box(-1.0, 1.0, (2,))
    assert np.array_equal(to_action(box, np.array([1.5, -0.2]), "clip"), [1.0, -0.2])
    with pytest.raises(OracleFailure, match=r"action_out_of_space: action\[0\] = 1.5"):
        to_action(box, np.array([1.5, -0.2]), "fail")
    with pytest.raises(OracleFailure, match="action_shape"):
        to_action(box, np.zeros(3), "clip")
    disc = gym.spaces.Discrete(3)
    assert to_action(disc, np.array([2]), "fail") == 2
    for rule in ("fail", "clip"):  # no nearest action exists: fails under both rules
        with pytest.raises(OracleFailure, match="action_out_of_space"):
            to_action(disc, np.array([5]), rule)
    with pytest.raises(OracleFailure, match="action_out_of_space"):
        to_action(box, np.array([np.nan, 0.0]), "clip")  # NaN has no nearest action
    assert action_mismatch(box, np.zeros((1, 2))) is None  # a flat row of the right size
    assert "not supported" in action_mismatch(gym.spaces.MultiBinary(2), np.zeros(2))


@pytest.mark.parametrize("rows", [1, 4, 300])  # 300 × 3 values: the numpy comparison (> 256)
def test_whole_batch_check_agrees_with_the_row_by_row_rule(rows):
    """BoxBatch.ok is True exactly when every row passes to_action unchanged under "fail":
    checked against to_action on random batches with values on, inside and just outside the
    float32 bounds, NaN, ±inf, wrong shapes and integer replies."""
    box = gym.spaces.Box(
        low=np.array([-1.0, 0.1, -3.3], dtype=np.float32),
        high=np.array([1.0, 0.7, 2.2], dtype=np.float32),
    )
    check = BoxBatch(box)
    low, high = box.low.astype(float), box.high.astype(float)
    rng = np.random.default_rng(rows)
    specials = [low, high, np.nextafter(low, -np.inf), np.nextafter(high, np.inf)]
    agreed = {True: 0, False: 0}
    for trial in range(200):
        actions = rng.uniform(low, high, size=(rows, 3))
        if trial % 2:
            r, c = rng.integers(rows), rng.integers(3)
            pick = rng.integers(len(specials) + 3)
            actions[r, c] = (
                specials[pick][c] if pick < len(specials) else [np.nan, np.inf, -np.inf][pick - 4]
            )
        try:
            row_by_row = all(np.array_equal(to_action(box, row, "fail"), row) for row in actions)
        except OracleFailure:
            row_by_row = False
        assert check.ok(actions) == row_by_row, actions
        agreed[row_by_row] += 1
    assert agreed[True] > 50 and agreed[False] > 20
    assert not check.ok(np.zeros((rows, 2)))  # the wrong shape is left to to_action
    assert not check.ok(np.zeros((rows, 3), dtype=np.int64))  # and so is an integer reply
    assert not check.ok(np.zeros((rows, 3), dtype=np.float32))
