"""Family-wise error control over a family of M simultaneous certificates.

Bonferroni: each of the M bounds is computed at δ/M, so all hold simultaneously with probability
≥ 1−δ (union bound; no independence assumption). Holm's step-down procedure tests the M null
hypotheses with sorted p-values p_(1) ≤ … ≤ p_(M) against δ/(M−i+1) and controls the same
family-wise error while rejecting at least as often.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from safecert.errors import ConfigError
from safecert.stats.binomial import validate_delta


@dataclass(frozen=True)
class HolmResult:
    """Holm step-down decisions, in the input order."""

    delta: float
    rejected: tuple[bool, ...]
    thresholds: tuple[float, ...]  # the level each hypothesis was compared with (input order)


def _check_family(family_size: int) -> None:
    if family_size < 1:
        raise ConfigError(
            f"{family_size} must be at least 1", field="family_size", fix="pass M >= 1"
        )


def bonferroni(delta: float, family_size: int) -> float:
    """Per-member error level δ/M that keeps the family-wise error ≤ δ."""
    validate_delta(delta)
    _check_family(family_size)
    return delta / family_size


def holm(pvalues: list[float] | np.ndarray, delta: float) -> HolmResult:
    """Holm's step-down procedure at family-wise level δ.

    Rejects H_(1), …, H_(j) where j is the largest index with p_(i) ≤ δ/(M−i+1) for all i ≤ j.
    """
    validate_delta(delta)
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    _check_family(m)
    order = np.argsort(p, kind="stable")
    levels = delta / (m - np.arange(m))
    rejected = np.zeros(m, dtype=bool)
    thresholds = np.empty(m)
    stopped = False
    for rank, idx in enumerate(order):
        thresholds[idx] = levels[rank]
        if not stopped and p[idx] <= levels[rank]:
            rejected[idx] = True
        else:
            stopped = True
    return HolmResult(delta, tuple(bool(r) for r in rejected), tuple(float(t) for t in thresholds))
