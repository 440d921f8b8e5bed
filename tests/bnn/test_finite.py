"""Exhaustive analysis of the finite collision-avoidance system: action sets against a closed form,
the maximal invariant against a brute-force fixed point, the witness trajectory replayed by hand,
and the ε search ending at once where no invariant exists."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest

from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.finite import (
    STRICT_GAP,
    FiniteAnalysis,
    analyse_finite,
    grid_states,
    is_finite,
)
from safecert.bnn.networks import forward
from safecert.bnn.search import BnnProblem, search_epsilon
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import parse_epsilon
from safecert.bnn.system import build_system, get_benchmark
from safecert.errors import ConfigError


@cache
def _car(name: str = "car"):
    cfg = benchmark_config(name)
    mean, _ = load_policy_network(cfg, None)
    return build_system(cfg.system, cfg.dynamics, cfg.sets), mean, bayesian_spec(cfg, mean), cfg


@cache
def _analysis(name: str, eps: str):
    bench, mean, spec, _ = _car(name)
    box = spec.box(mean, parse_epsilon(eps))
    return box, analyse_finite(bench, box)


def _closed_form_margin(mean, box, x: np.ndarray) -> np.ndarray:
    """For ``car`` (only the last kernel is Bayesian, its inputs h ≥ 0): the largest
    ``min_j (y_k − y_j)`` over the box is reached with column k at its upper and every other column
    at its lower end, so choice k is possible iff this margin is ≥ 0 (independent of any MILP)."""
    (w0, b0), (w1, b1) = mean.layers
    h = np.maximum(x @ w0 + b0, 0.0)
    lo, hi = box.lower[1][0], box.upper[1][0]
    m = len(b1)
    out = np.empty(m)
    for k in range(m):
        out[k] = min(h @ (hi[:, k] - lo[:, j]) + b1[k] - b1[j] for j in range(m) if j != k)
    return out


@pytest.mark.parametrize("eps", ["1sigma", "1.5sigma"])
def test_action_sets_match_the_closed_form(eps) -> None:
    bench, mean, _, _ = _car()
    box, a = _analysis("car", eps)
    live = bench.step_box.contains(a.states)
    assert a.admitted[~live].sum() == 0
    for i in np.flatnonzero(live):
        margin = _closed_form_margin(mean, box, a.states[i])
        sure = np.abs(margin) > 1e-6
        assert np.array_equal(a.admitted[i][sure], margin[sure] > 0), a.states[i]
        strict = (margin > 2 * STRICT_GAP) | (margin < 0)  # a strict winner by the gap, or none
        assert np.array_equal(a.replayed[i][strict], margin[strict] > 0), a.states[i]
        assert not np.any(a.replayed[i] & ~a.admitted[i])
    assert (a.admitted.sum(axis=1)[live] >= 1).all()  # some choice is always the argmax


def _brute_force_maximal(bench, states, admitted) -> set[tuple]:
    """Greatest fixed point by repeated deletion over Python sets (second route)."""
    safe = {tuple(s) for s in states if not bench.in_unsafe(s)}
    inv = set(safe)
    while True:
        drop = set()
        for i, s in enumerate(states):
            if tuple(s) not in inv:
                continue
            for k in np.flatnonzero(admitted[i]):
                nxt = tuple(bench.step(s, np.eye(bench.n_actions)[k]))
                if nxt not in inv:
                    drop.add(tuple(s))
        if not drop:
            return inv
        inv -= drop


@pytest.mark.parametrize("name,eps", [("car", "1sigma"), ("car_all", "1sigma")])
def test_maximal_invariant_is_the_greatest_closed_safe_set(name, eps) -> None:
    bench = _car(name)[0]
    _, a = _analysis(name, eps)
    got = {tuple(s) for s in a.states[a.maximal]}
    assert got == _brute_force_maximal(bench, a.states, a.admitted)
    assert not bench.in_unsafe(a.states[a.maximal]).any()


@pytest.mark.parametrize(
    "name,eps,inside",
    [
        ("car", "1sigma", True),
        ("car", "1.5sigma", False),
        ("car_all", "0.5sigma", True),
        ("car_all", "1sigma", False),
    ],
)
def test_witness_trajectory_replays_by_hand(name, eps, inside) -> None:
    bench = _car(name)[0]
    box, a = _analysis(name, eps)
    assert a.initial_inside is inside
    assert (a.witness is None) is inside
    if inside:
        return
    path = a.witness
    assert bench.in_initial(path[0].x)
    for t, step in enumerate(path):
        assert box.contains(step.weights)
        u = forward(step.weights, step.x)
        assert int(np.argmax(u)) == step.action and np.sort(u)[-1] - np.sort(u)[-2] > 0
        np.testing.assert_array_equal(bench.step(step.x, u), step.x_next)
        if t + 1 < len(path):
            np.testing.assert_array_equal(step.x_next, path[t + 1].x)
    end = path[-1].x_next
    assert bench.in_unsafe(end) or not bench.in_box(end)
    assert "no positive invariant exists" in a.describe()


def test_describe_without_a_replayed_trajectory() -> None:
    """X0 outside M only through actions without a replayed strict witness: no certificate is
    possible, but nothing is claimed about an unsafe trajectory."""
    states = np.array([[0.0], [1.0]])
    a = FiniteAnalysis(
        states=states,
        admitted=np.ones((2, 1), bool),
        replayed=np.zeros((2, 1), bool),
        maximal=np.array([False, True]),
        initial=np.array([True, False]),
        witness=None,
        milps=4,
    )
    assert not a.initial_inside
    assert a.describe() == (
        "no invariant the verifier can prove: 1 of 1 states of X0 lie outside the maximal "
        "invariant of the actions the MILP admits (ties included); no strictly unsafe trajectory "
        "replays"
    )


def test_grid_and_applicability() -> None:
    bench, *_ = _car()
    states = grid_states(bench)
    assert len(states) == 150 and len({tuple(s) for s in states}) == 150
    assert set(itertools.chain.from_iterable(states[:, 2:].tolist())) == {0, 1, 2, 3, 4, 5}
    assert is_finite(bench) and not is_finite(get_benchmark("lds"))
    with pytest.raises(ConfigError, match="not finite"):
        analyse_finite(get_benchmark("lds"), None)  # type: ignore[arg-type]


def _problem(**limits) -> BnnProblem:
    bench, mean, spec, _ = _car()
    cfg = benchmark_config("car", limits=limits)
    return BnnProblem(bench, mean, spec, cfg)


def test_attempt_ends_at_once_where_no_invariant_exists() -> None:
    res = _problem().run(parse_epsilon("1.5sigma"))
    assert res.verdict == "UNKNOWN" and res.witness is not None
    assert res.reason == res.witness.describe()  # the analysis's trajectory, replayed once more
    assert res.reason.startswith("no positive invariant exists")
    path = _analysis("car", "1.5sigma")[1].witness
    assert path is not None and np.array_equal(res.witness.path[0], path[0].x)
    assert res.verifier_calls == 0 and res.iterations == 0 and res.proof is None
    assert res.runtimes_s["total_s"] == res.runtimes_s["verifier_s"] > 0


@pytest.mark.slow
def test_search_with_exact_labels_certifies_then_stops() -> None:
    problem = _problem(per_epsilon_s=60, total_s=120)
    found = search_epsilon(
        lambda e, w, lim: problem.run(e, w, lim),
        ["1sigma", "1.5sigma", "2sigma"],
        total_time_s=120,
    )
    assert [a.result.verdict for a in found.attempts] == ["SAFE", "UNKNOWN"]
    g = found.attempts[0].result.network
    _, a = _analysis("car", "1sigma")
    assert np.all(g.forward(a.states[a.initial])[:, 0] >= 0)  # the proof covers X0
