"""Certified runtime shields from logs (paper 001; docs/methods.md).

Pipeline: :mod:`model` (TOML → :class:`ShieldModel`) → :mod:`logs` (:func:`iter_steps`, streaming
JSONL) → :mod:`estimate` (committed budgets, :class:`RowEstimates`) → :mod:`confidence` (β, the
inner maximisation σ) → :mod:`reach` (robust / exact value iteration) → :mod:`synthesis`
(least-restrictive shields). The 7×7 benchmark grid with a known kernel is experiment code and
lives in ``benchmarks/_experiments/gridworld.py``.
"""

from __future__ import annotations

from safecert.expressions import eval_labels as eval_expression
from safecert.shield.estimate import RowEstimates, estimate
from safecert.shield.logs import Step, iter_steps
from safecert.shield.model import ShieldModel, load_model, model_from_dict

__all__ = [
    "RowEstimates",
    "ShieldModel",
    "Step",
    "estimate",
    "eval_expression",
    "iter_steps",
    "load_model",
    "model_from_dict",
]
