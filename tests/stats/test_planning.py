from __future__ import annotations

import math

import pytest

from safecert.stats import cp_upper, min_episodes, zero_failure_episodes

TABLE_68 = {
    0: (45, 0.04988),
    1: (77, 0.04958),
    2: (105, 0.04989),
    3: (132, 0.04991),
    5: (184, 0.04982),
    10: (306, 0.04990),
    20: (538, 0.04994),
    50: (1202, 0.04998),
    100: (2275, 0.04999),
}


@pytest.mark.parametrize("k", sorted(TABLE_68))
def test_table_68(k):
    plan = min_episodes(k, 0.05, 0.1)
    assert (plan.episodes, round(plan.upper_bound, 5)) == TABLE_68[k]
    # minimality: one fewer episode does not reach p*
    assert cp_upper(k, plan.episodes - 1, 0.1).value > 0.05


@pytest.mark.parametrize(("p", "d"), [(0.05, 0.1), (0.01, 0.05), (0.001, 0.01), (0.3, 0.2)])
def test_zero_failure_closed_form(p, d):
    n = zero_failure_episodes(p, d)
    assert n == math.ceil(math.log(d) / math.log(1 - p))
    assert min_episodes(0, p, d).episodes == n


def test_brute_force_small():
    for k in range(6):
        n = k + 1
        while cp_upper(k, n, 0.2).value > 0.2:
            n += 1
        assert min_episodes(k, 0.2, 0.2).episodes == n
