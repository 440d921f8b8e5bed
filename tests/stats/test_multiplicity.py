from __future__ import annotations

import numpy as np
import pytest

from safecert.errors import ConfigError
from safecert.stats import bonferroni, holm


def test_bonferroni():
    assert bonferroni(0.1, 9) == pytest.approx(0.1 / 9)
    with pytest.raises(ConfigError, match="family_size"):
        bonferroni(0.1, 0)


def test_holm_matches_brute_force_definition():
    rng = np.random.default_rng(1)
    for _ in range(200):
        m = int(rng.integers(1, 12))
        p = rng.uniform(0, 0.05, size=m) ** rng.uniform(0.5, 2)
        res = holm(p, 0.05)
        order = np.argsort(p, kind="stable")
        expected = np.zeros(m, dtype=bool)
        for rank, idx in enumerate(order):
            if p[idx] <= 0.05 / (m - rank):
                expected[idx] = True
            else:
                break
        assert res.rejected == tuple(expected)
        # Holm rejects everything Bonferroni rejects
        assert all(r for r, q in zip(res.rejected, p, strict=True) if q <= 0.05 / m)


def test_holm_familywise_error_by_simulation():
    # all nulls true, p-values uniform: P(any rejection) ≤ δ
    rng = np.random.default_rng(2)
    reps, m, delta = 4000, 9, 0.1
    any_rej = [any(holm(rng.uniform(size=m), delta).rejected) for _ in range(reps)]
    assert np.mean(any_rej) <= delta + 3 * np.sqrt(delta * (1 - delta) / reps)
