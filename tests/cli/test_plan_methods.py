"""``safecert plan --method``: episodes per method side by side."""

from __future__ import annotations

import math

import numpy as np
import pytest

from safecert.stats import cp_upper, min_episodes
from safecert.stats.sequential import decide, fixed_n_pass_max
from safecert.stats.sequential_plan import compare_methods, cp_fixed_episodes, make_rule


def test_plan_methods_json(cli):
    res = cli(
        "plan",
        "--p-star",
        "0.05",
        "--confidence",
        "0.9",
        "--method",
        "all",
        "--cap",
        "2000",
        "--json",
    )
    assert res.code == 0, res.stderr
    data = res.json()
    assert {"p_star", "confidence", "family_size", "expected_rate", "cap", "methods"} <= set(data)
    by = {m["method"]: m for m in data["methods"]}
    assert set(by) == {"cp", "hoeffding", "onesided", "looks", "mixture", "betting", "curtail"}
    assert by["cp"]["episodes"] == 45  # CORE-RL Table 68, k = 0
    assert by["hoeffding"]["episodes"] == math.ceil(math.log(10) / (2 * 0.05**2))  # 461
    # zero failures: the looks rule stops at its first look, the mixture at its first PASS point
    looks = make_rule("looks", 0.05, 0.1, 2000)
    assert by["looks"]["episodes"] == looks.checks[0] == by["looks"]["median"]
    mix = make_rule("mixture", 0.05, 0.1, 2000)
    assert by["mixture"]["episodes"] == decide(mix, np.zeros(2000)).episodes
    one = make_rule("onesided", 0.05, 0.1, 2000)
    assert by["onesided"]["episodes"] == decide(one, np.zeros(2000)).episodes == 59
    assert by["curtail"]["episodes"] == 2000 - fixed_n_pass_max(2000, 0.05, 0.1)
    human = cli("plan", "--p-star", "0.05", "--method", "cp,sequential", "--expected-rate", "0.01")
    assert human.code == 0 and "sequential" in human.stdout and "cp" in human.stdout


def test_bad_method_one_line(cli):
    res = cli("plan", "--p-star", "0.05", "--method", "magic")
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--method" in res.stderr and "Traceback" not in res.stderr
    res = cli("plan", "--p-star", "0.05", "--method", "cp", "--expected-rate", "1.5")
    assert res.code == 2 and "--expected-rate" in res.stderr


@pytest.mark.parametrize("rate", [0.0, 0.005, 0.02, 0.04])
def test_cp_fixed_episodes_minimal(rate):
    n = cp_fixed_episodes(0.05, 0.1, rate)
    k = math.ceil(rate * n - 1e-9)
    assert cp_upper(k, n, 0.1).value <= 0.05
    # no smaller N passes at its own expected count (brute force)
    for m in range(1, n):
        km = math.ceil(rate * m - 1e-9)
        assert km >= m or cp_upper(km, m, 0.1).value > 0.05
    if rate == 0.0:
        assert n == min_episodes(0, 0.05, 0.1).episodes
    assert cp_fixed_episodes(0.05, 0.1, 0.05) is None


def test_sequential_expectation_against_simulation():
    """The exact expected episodes agree with a plain simulation of the rule."""
    rate, cap = 0.01, 3000
    plan = compare_methods(["looks", "mixture"], 0.05, 0.1 / 9, rate, cap)
    rng = np.random.default_rng(7)
    for p in plan:
        rule = make_rule(p.method, 0.05, 0.1 / 9, cap)
        used = [decide(rule, rng.random(cap) < rate).episodes for _ in range(400)]
        se = np.std(used) / math.sqrt(len(used))
        assert abs(np.mean(used) - p.episodes) < 5 * se + 1
