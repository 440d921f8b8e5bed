"""Family-wise error control over a family of M simultaneous certificates.

Bonferroni: each of the M bounds is computed at δ/M, so all hold simultaneously with probability
≥ 1−δ (union bound; no independence assumption). Holm's step-down procedure tests the M null
hypotheses with sorted p-values p_(1) ≤ … ≤ p_(M) against δ/(M−i+1) and controls the same
family-wise error while rejecting at least as often.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def holm(pvalues: Sequence[float], delta: float) -> HolmResult:
    """Holm's step-down procedure at family-wise level δ.

    Rejects H_(1), …, H_(j) where j is the largest index with p_(i) ≤ δ/(M−i+1) for all i ≤ j.
    """
    validate_delta(delta)
    p = [float(v) for v in pvalues]
    m = len(p)
    _check_family(m)
    order = sorted(range(m), key=p.__getitem__)  # stable, like argsort(kind="stable")
    rejected = [False] * m
    thresholds = [0.0] * m
    stopped = False
    for rank, idx in enumerate(order):
        thresholds[idx] = delta / (m - rank)
        if not stopped and p[idx] <= thresholds[idx]:
            rejected[idx] = True
        else:
            stopped = True
    return HolmResult(delta, tuple(rejected), tuple(thresholds))
