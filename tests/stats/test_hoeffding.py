from __future__ import annotations

import math

import numpy as np
import pytest

from safecert.errors import DataError
from safecert.stats import hoeffding_from_mean, hoeffding_lcb, hoeffding_ucb


def test_table_b7():
    # CORE-RL Table B.7: N = 10,000, δ = 0.1 over M = 9.
    lcb = hoeffding_from_mean(23.35, 10_000, 0.1 / 9, -10_000.0, 10_000.0, "lower")
    assert round(lcb.value, 2) == -276.64
    ucb = hoeffding_from_mean(28.88, 10_000, 0.1 / 9, 0.0, 1000.0, "upper")
    assert round(ucb.value, 2) == 43.88


def test_closed_form_and_coverage():
    rng = np.random.default_rng(3)
    n, delta = 100, 0.1
    x = rng.uniform(0, 1, size=n)
    b = hoeffding_lcb(x, delta, 0.0, 1.0)
    assert b.value == pytest.approx(x.mean() - math.sqrt(math.log(1 / delta) / (2 * n)))
    # coverage: Bernoulli(0.3) means, LCB below 0.3 at least 90 % of the time
    reps = 3000
    samples = rng.binomial(1, 0.3, size=(reps, n)).astype(float)
    lcbs = samples.mean(axis=1) - math.sqrt(math.log(1 / delta) / (2 * n))
    ucbs = samples.mean(axis=1) + math.sqrt(math.log(1 / delta) / (2 * n))
    assert np.mean(lcbs <= 0.3) >= 0.9
    assert np.mean(ucbs >= 0.3) >= 0.9
    assert hoeffding_ucb(x, delta, 0.0, 1.0).value > x.mean()


def test_values_outside_declared_range_rejected():
    with pytest.raises(DataError, match="range"):
        hoeffding_lcb(np.array([0.5, 2.0]), 0.1, 0.0, 1.0)
