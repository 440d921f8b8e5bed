from __future__ import annotations

import numpy as np
import pytest

from safecert.bnn.cegis import CegisResult
from safecert.bnn.invariant import InvariantNet
from safecert.bnn.learner import TrainingData
from safecert.bnn.search import search_epsilon
from safecert.bnn.spec import Epsilon


class Threshold:
    """A run function whose CEGIS 'certifies' exactly the ε ≤ threshold (the search logic is what
    is tested here; the real Alg. 1 is exercised in test_cegis and test_bnn_cli)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.calls: list[tuple[float, object]] = []

    def __call__(self, eps: Epsilon, warm, limit_s: float) -> CegisResult:
        self.calls.append((eps.value, warm))
        g = InvariantNet(2, (2,), low=[-1, -1], high=[1, 1], seed=int(eps.value * 1000))
        data = TrainingData(np.zeros((1, 2)), np.ones(1))
        ok = eps.value <= self.threshold
        return CegisResult(
            "SAFE" if ok else "UNKNOWN", "t", g, None, data, runtimes_s={"total_s": 0.0}
        )


LADDER = ["0.5sigma", "1sigma", "1.5sigma", "2sigma"]


@pytest.mark.parametrize("threshold,best", [(1.2, 1.0), (5.0, 2.0), (0.1, None), (1.5, 1.5)])
def test_ladder_stops_at_the_first_failure(threshold, best):
    run = Threshold(threshold)
    res = search_epsilon(run, LADDER, total_time_s=60)
    assert (res.best.epsilon.value if res.best else None) == best
    tried = [c[0] for c in run.calls]
    expect = [v for v in (0.5, 1.0, 1.5, 2.0) if v <= threshold]
    assert tried == (expect + [v for v in (0.5, 1.0, 1.5, 2.0) if v > threshold][:1])


def test_each_attempt_is_warm_started_from_the_last_certified_one():
    run = Threshold(1.2)
    res = search_epsilon(run, LADDER, total_time_s=60, bisection_steps=3)
    assert run.calls[0][1] is None
    assert all(warm is not None for _, warm in run.calls[1:])
    certified = [a for a in res.attempts if a.certified]
    # the warm start of each attempt is the invariant of the previous certified attempt
    last_ok = None
    for attempt, (_, warm) in zip(res.attempts, run.calls, strict=True):
        if last_ok is not None:
            assert warm[0] is last_ok.result.invariant
        if attempt.certified:
            last_ok = attempt
    assert certified


def test_bisection_converges_to_the_threshold():
    run = Threshold(1.2)
    res = search_epsilon(run, LADDER, total_time_s=60, bisection_steps=6)
    # between 1σ (certified) and 1.5σ (failed): 6 halvings leave a gap of 0.5/64
    assert 1.2 - 0.5 / 64 <= res.best.epsilon.value <= 1.2
    assert res.best.epsilon.in_sigma


def test_first_rung_failing_bisects_towards_zero_and_budget_stops():
    run = Threshold(0.3)
    res = search_epsilon(run, LADDER, total_time_s=60, bisection_steps=2)
    assert [a.epsilon.value for a in res.attempts] == [0.5, 0.25, 0.375]
    assert res.best.epsilon.value == 0.25
    spent = search_epsilon(Threshold(9), LADDER, total_time_s=0.0)
    assert spent.attempts == [] and spent.best is None
