"""The claim in benchmarks/README.md that pend_all admits no positive invariant at 1.5σ: the
witness search (``safecert.bnn.witness``) finds a trajectory from X0 into X_u with the weights in
W_1.5σ at every step, and this test replays it a second way — the pendulum written out by hand from
``pend.system.toml``, the weight box built by hand (mean ± ε·σ on the two Bayesian kernels, σ =
0.05, biases fixed) and a plain NumPy forward pass — so the claim does not rest on the package's
own simulator alone."""

from __future__ import annotations

import math

import numpy as np

from safecert.bnn.config import bayesian_spec, load_policy_network
from safecert.bnn.networks import load_policy
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import Epsilon
from safecert.bnn.system import build_system
from safecert.bnn.witness import find_witness


def pendulum(x: np.ndarray, u: float) -> np.ndarray:
    th, thd = float(x[0]), float(x[1])
    assert abs(th) <= math.pi / 2  # the triangle wave is −2θ/π there
    new_thd = thd - 30 / 2 * 0.05 * (-2 * th / math.pi) + 3 / 0.8 * 2.5 * 0.05 * min(max(u, -1), 1)
    return np.array([th + 0.05 * new_thd, min(max(new_thd, -8.0), 8.0)])


def test_pend_all_has_no_invariant_at_one_and_a_half_sigma():
    cfg = benchmark_config("pend_all")
    mean, _ = load_policy_network(cfg, None)
    box = bayesian_spec(cfg, mean).box(mean, Epsilon(1.5, True))
    bench = build_system(cfg.system, cfg.dynamics, cfg.sets)
    witness = find_witness(bench, box, np.random.default_rng(0), evals=40_000, horizon=12)
    assert witness is not None
    net = load_policy("pend_all")
    eps = 1.5 * 0.05
    x = np.array(witness.path[0])
    assert abs(x[0]) <= math.pi / 6 and abs(x[1]) <= 0.2  # starts in X0
    for step in witness.weights:
        a = x
        for k, ((w, b), (mw, mb)) in enumerate(zip(step, net.layers, strict=True)):
            w, b = np.asarray(w), np.asarray(b)
            e = eps if k >= 1 else 0.0  # the first layer ([I, −I]) is deterministic
            assert np.all(w >= mw - e) and np.all(w <= mw + e) and np.array_equal(b, mb)
            a = a @ w + b
            if k < len(net.layers) - 1:
                a = np.maximum(a, 0.0)
        x = pendulum(x, float(a[0]))
    assert abs(x[0]) >= 0.9 or abs(x[1]) >= 2  # ends in X_u
