"""β and the inner maximisation σ(C; V) against an LP (scipy) and vertex enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from safecert.shield.confidence import beta, inner_max, worst_distribution


def lp_sigma(v, p, radius):
    """max <q,v> s.t. q in simplex, ||q-p||_1 <= radius; variables (q, t), t >= |q - p|.

    At radius 0 the only feasible q is p itself (the LP solver may call that single point
    infeasible when p sums to 1 only up to rounding), so the value is <p, v>."""
    if radius == 0.0:
        return float(np.dot(p, v))
    k = len(v)
    c = np.r_[-np.asarray(v), np.zeros(k)]
    eye = np.eye(k)
    a_ub = np.block([[eye, -eye], [-eye, -eye], [np.zeros((1, k)), np.ones((1, k))]])
    b_ub = np.r_[p, -np.asarray(p), radius]
    a_eq = np.r_[np.ones(k), np.zeros(k)][None, :]
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=[(0, None)] * (2 * k))
    assert res.status == 0
    return -res.fun


def vertex_sigma(v, p, radius):
    """Brute force: enumerate every vertex of the lifted polytope {(q,t)} and take the best."""
    k = len(v)
    eye = np.eye(k)
    a = np.block(
        [[eye, -eye], [-eye, -eye], [np.zeros((1, k)), np.ones((1, k))], [-eye, np.zeros((k, k))]]
    )
    b = np.r_[p, -np.asarray(p), radius, np.zeros(k)]
    eq = np.r_[np.ones(k), np.zeros(k)]
    best = -np.inf
    for active in itertools.combinations(range(len(b)), 2 * k - 1):
        mat = np.vstack([a[list(active)], eq])
        if abs(np.linalg.det(mat)) < 1e-12:
            continue
        x = np.linalg.solve(mat, np.r_[b[list(active)], 1.0])
        if np.all(a @ x <= b + 1e-9):
            best = max(best, float(np.dot(v, x[:k])))
    return best


_dist = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6).filter(lambda x: sum(x) > 0.1)


@settings(max_examples=150, deadline=None)
@given(_dist, st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6), st.floats(0.0, 2.5))
def test_inner_max_is_feasible_and_lp_optimal(w, vals, radius):
    p = np.array(w) / sum(w)
    v = np.array(vals[: len(p)])
    ones = np.ones(len(p), bool)
    got = inner_max(v[None], p[None], np.array([radius]), ones[None])[0]
    q = worst_distribution(v[None], p[None], np.array([radius]), ones[None])[0]
    assert np.all(q >= -1e-12) and abs(q.sum() - 1) < 1e-9
    assert np.abs(q - p).sum() <= radius + 1e-9
    assert abs(float(q @ v) - got) < 1e-9
    assert got == pytest.approx(lp_sigma(v, p, radius), abs=1e-7)


@pytest.mark.parametrize("seed", range(25))
def test_inner_max_equals_vertex_enumeration(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 4))
    p = rng.dirichlet(np.ones(k) * 0.7)
    v = rng.random(k) if seed % 3 else np.round(rng.random(k), 1)  # ties too
    radius = float(rng.uniform(0, 2.2))
    got = inner_max(v[None], p[None], np.array([radius]), np.ones((1, k), bool))[0]
    assert got == pytest.approx(vertex_sigma(v, p, radius), abs=1e-8)


def test_special_cases():
    ones = np.ones((1, 2), bool)
    # the paper's zero-gain example: p = (1, 0), V = (1, 0)
    assert inner_max(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0]]), np.array([0.5]), ones)[0] == 1
    # vacuous row: max over K; padding never receives mass
    v = np.array([[0.2, 0.7, 5.0]])
    valid = np.array([[True, True, False]])
    p = np.array([[1.0, 0.0, 0.0]])
    assert inner_max(v, p, np.array([np.inf]), valid)[0] == pytest.approx(0.7)
    assert inner_max(v, p, np.array([0.4]), valid)[0] == pytest.approx(0.8 * 0.2 + 0.2 * 0.7)
    # radius 0 = plug-in
    assert inner_max(v, np.array([[0.5, 0.5, 0]]), np.array([0.0]), valid)[0] == pytest.approx(0.45)


def test_beta_closed_form():
    got = beta(np.array([100, 0, 50]), np.array([3, 3, 1]), rows=200, delta=0.05)
    assert got[0] == pytest.approx(math.sqrt(2 / 100 * math.log(200 * 6 / 0.05)))
    assert math.isinf(got[1]) and got[2] == 0.0
    big = beta(np.array([10]), np.array([200]), rows=5, delta=0.1)[0]
    assert big == pytest.approx(math.sqrt(0.2 * (200 * math.log(2) + math.log(50))), rel=1e-12)


def test_beta_covers_true_rows_at_the_stated_rate():
    """Coverage simulation: with δ = 0.2 over R = 20 rows of k = 3, the event fails ≤ 20 %."""
    rng = np.random.default_rng(7)
    k, rows, n0, delta = 3, 20, 40, 0.2
    radius = beta(np.array([n0]), np.array([k]), rows, delta)[0]
    truth = rng.dirichlet(np.ones(k), size=rows)
    fails = 0
    for _ in range(400):
        counts = np.stack([rng.multinomial(n0, t) for t in truth])
        fails += np.any(np.abs(counts / n0 - truth).sum(1) > radius)
    assert fails / 400 <= delta


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 8), st.integers(0, 10_000))
def test_sorting_network_path_equals_sort_path(k, seed):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(k) * 0.5, size=40)
    v = np.round(rng.random((40, k)), int(rng.integers(1, 4)))  # many ties
    radius = np.where(rng.random(40) < 0.2, np.inf, rng.uniform(0, 2, 40))
    net = inner_max(v, p, radius)  # valid=None: sorting network for k <= 6
    ref = inner_max(v, p, radius, np.ones((40, k), bool))  # argsort path
    assert np.allclose(net, ref, atol=1e-12)
