"""Invalid black-box configs through the real CLI: exit 2, one line naming the key."""

from __future__ import annotations

import textwrap

import pytest

from tests.blackbox import pipeline_helpers

cli_here = pipeline_helpers.cli_here  # the in-process CLI fixture

GOOD = """
policy = "python:pol:act"
env = "CartPole-v1"
episodes = 3
max_steps = 20
[spec]
budget = 1.0
cost = 'info.get("cost", 0)'
[envelope]
obs_noise = { kind = "gaussian", levels = [0.0, 0.1] }
obs_ranges = [[-4.8, 4.8], [-4.0, 4.0], [-0.42, 0.42], [-4.0, 4.0]]
"""

CASES = {
    "unknown key": (
        GOOD.replace("episodes = 3", "episodes = 3\nepisdoes = 4"),
        "episdoes",
        "unknown key",
    ),
    "negative budget": (
        GOOD.replace("budget = 1.0", "budget = -5.0"),
        "spec.budget",
        "greater than or equal to 0",
    ),
    "level outside [0, 1]": (
        GOOD.replace("[0.0, 0.1]", "[0.0, 1.5]"),
        "envelope.obs_noise.levels",
        "less than or equal to 1",
    ),
    "missing policy file": (
        GOOD.replace("python:pol:act", "onnx:missing/model.onnx"),
        "policy",
        "does not exist",
    ),
    "unknown env": (GOOD.replace("CartPole-v1", "NoSuchEnv-v9"), "env", "unknown environment"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_config_is_exit_2_with_one_line_naming_the_key(cli, tmp_path, case):
    text, key, words = CASES[case]
    (tmp_path / "pol.py").write_text(
        "import numpy as np\ndef act(obs):\n    return np.zeros(len(obs), int)\n"
    )
    config = tmp_path / "bad.toml"
    config.write_text(textwrap.dedent(text))
    res = cli("certify", str(config), "--out", str(tmp_path / "out"))
    assert res.code == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert key in lines[0] and words in lines[0], lines[0]
    assert not (tmp_path / "out" / "certificate.json").exists()


def test_missing_config_and_bad_rejudge_options(cli_here, tmp_path):
    res = cli_here("certify", tmp_path / "nope.toml", "--out", tmp_path / "o")
    assert res.code == 2 and "does not exist" in res.stderr
    res = cli_here("rejudge", tmp_path, "--budget", "-1", "--p-star", "0.05")
    assert res.code == 2 and "--budget" in res.stderr
    res = cli_here("rejudge", tmp_path, "--budget", "1", "--p-star", "0.05")
    assert res.code == 2 and "certificate" in res.stderr


def test_envelope_the_environment_cannot_take_is_rejected_before_the_run(cli, tmp_path):
    (tmp_path / "pol.py").write_text(
        "import numpy as np\ndef act(obs):\n    return np.zeros(len(obs), int)\n"
    )
    config = tmp_path / "bad.toml"
    config.write_text(GOOD + "dynamics = { mass = [1.0, 1.25] }\n")
    res = cli("certify", str(config), "--out", str(tmp_path / "out"))
    assert (
        res.code == 2 and "envelope.dynamics.mass" in res.stderr and "has no 'mass'" in res.stderr
    )
    assert not (tmp_path / "out" / "episodes.sqlite").exists()


NUMBERS = {
    "infinite timeout": ("episodes = 3", "episodes = 3\ntimeout_s = inf", "timeout_s", "finite"),
    "absurd timeout": ("episodes = 3", "episodes = 3\ntimeout_s = 1e300", "timeout_s", "86400"),
    "bool as count": ("episodes = 3", "episodes = true", "episodes", "valid integer"),
    "absurd count": ("episodes = 3", "episodes = 1000000000000", "episodes", "10000000"),
    "infinite budget": ("budget = 1.0", "budget = inf", "spec.budget", "finite"),
    "number as string": ("budget = 1.0", 'budget = "1.0"', "spec.budget", "valid number"),
    "bad return goal": ("budget = 1.0", 'budget = 1.0\ngoal = "return>=1e"', "spec.goal", "'1e'"),
    "negative seed": ("episodes = 3", "episodes = 3\nseed = -1", "seed", "greater than"),
}


@pytest.mark.parametrize("case", list(NUMBERS))
def test_non_finite_absurd_and_coerced_numbers_are_rejected_at_the_door(cli_here, tmp_path, case):
    old, new, key, words = NUMBERS[case]
    config = tmp_path / "bad.toml"
    config.write_text(textwrap.dedent(GOOD).replace(old, new))
    res = cli_here("certify", str(config), "--out", str(tmp_path / "out"))
    assert res.code == 2, (res.stdout, res.stderr)
    line = res.stderr.strip()
    assert "\n" not in line and line.startswith(f"safecert: error: {key}:") and words in line, line
    assert not (tmp_path / "out").exists()
