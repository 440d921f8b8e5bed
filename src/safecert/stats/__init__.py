"""Shared statistics: exact binomial bounds, Hoeffding bounds, multiplicity, planning, sequential.

Names are imported lazily (PEP 562): ``from safecert.stats import cp_upper`` loads only the
binomial module, so a command that needs one bound does not pay for SciPy's whole stats package.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "BettingRule": "betting",
    "BinomialBound": "binomial",
    "BinomialInterval": "binomial",
    "cp_interval": "binomial",
    "cp_lower": "binomial",
    "cp_upper": "binomial",
    "HoeffdingBound": "hoeffding",
    "hoeffding_from_mean": "hoeffding",
    "hoeffding_lcb": "hoeffding",
    "hoeffding_ucb": "hoeffding",
    "HolmResult": "multiplicity",
    "bonferroni": "multiplicity",
    "holm": "multiplicity",
    "SamplePlan": "planning",
    "min_episodes": "planning",
    "zero_failure_episodes": "planning",
    "Boundaries": "sequential",
    "SequentialDecision": "sequential",
    "curtailed_boundaries": "sequential",
    "looks_boundaries": "sequential",
    "mixture_boundaries": "sequential",
    "onesided_boundaries": "eprocess",
    "compare_methods": "sequential_plan",
    "make_rule": "sequential_plan",
    "operating_characteristics": "sequential_plan",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'safecert.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"safecert.stats.{module}"), name)
    globals()[name] = value
    return value
