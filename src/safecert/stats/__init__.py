"""Shared statistics: exact binomial bounds, Hoeffding bounds, multiplicity, planning, sequential."""

from safecert.stats.betting import BettingRule
from safecert.stats.binomial import BinomialBound, BinomialInterval, cp_interval, cp_lower, cp_upper
from safecert.stats.hoeffding import (
    HoeffdingBound,
    hoeffding_from_mean,
    hoeffding_lcb,
    hoeffding_ucb,
)
from safecert.stats.multiplicity import HolmResult, bonferroni, holm
from safecert.stats.planning import SamplePlan, min_episodes, zero_failure_episodes
from safecert.stats.sequential import (
    Boundaries,
    SequentialDecision,
    curtailed_boundaries,
    looks_boundaries,
    mixture_boundaries,
)
from safecert.stats.sequential_plan import compare_methods, make_rule, operating_characteristics

__all__ = [
    "BinomialBound",
    "BinomialInterval",
    "HoeffdingBound",
    "HolmResult",
    "SamplePlan",
    "bonferroni",
    "cp_interval",
    "cp_lower",
    "cp_upper",
    "hoeffding_from_mean",
    "hoeffding_lcb",
    "hoeffding_ucb",
    "holm",
    "min_episodes",
    "zero_failure_episodes",
    "Boundaries",
    "SequentialDecision",
    "curtailed_boundaries",
    "looks_boundaries",
    "mixture_boundaries",
    "BettingRule",
    "compare_methods",
    "make_rule",
    "operating_characteristics",
]
