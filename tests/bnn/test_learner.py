from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from safecert.bnn.invariant import InvariantNet
from safecert.bnn.learner import (
    Learner,
    LearnerSettings,
    TrainingData,
    counterexample_loss,
    invariant_loss,
    logistic_loss,
)
from safecert.errors import ConfigError, DataError


def _sp(z):
    return math.log1p(math.exp(z))


def test_logistic_loss_by_hand():
    z = torch.tensor([2.0, 2.0, -1.5, 0.0], dtype=torch.float64)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    expect = [_sp(-2.0), 2.0 + _sp(-2.0), _sp(1.5), math.log(2.0)]
    np.testing.assert_allclose(logistic_loss(z, y).numpy(), expect, rtol=1e-14)
    # it is binary cross-entropy with logits
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
    np.testing.assert_allclose(logistic_loss(z, y).numpy(), bce.numpy(), rtol=1e-12)


def test_counterexample_loss_by_hand():
    z = torch.tensor([1.0, -0.5, 1.0, 0.3], dtype=torch.float64)
    zn = torch.tensor([-2.0, -2.0, 0.5, -0.1], dtype=torch.float64)
    got = counterexample_loss(z, zn).numpy()
    # active only where z > 0 and z' < 0: L(z,0) = softplus(z), L(z',1) = softplus(-z')
    expect = [_sp(1.0) * _sp(2.0), 0.0, 0.0, _sp(0.3) * _sp(0.1)]
    np.testing.assert_allclose(got, expect, rtol=1e-14)
    # a margin of 0.6 activates the second pair and shifts the arguments
    got_m = counterexample_loss(z, zn, margin=0.6).numpy()
    assert got_m[1] == pytest.approx(_sp(0.1) * _sp(2.6), rel=1e-14)
    assert got_m[2] == pytest.approx(_sp(1.6) * _sp(0.1), rel=1e-14)


def test_full_loss_by_hand_on_a_fixed_network():
    g = InvariantNet(1, (1,), low=[-1.0], high=[1.0], seed=0)
    with torch.no_grad():  # g(x) = relu(x) - 0.5
        g.linears[0].weight.fill_(1.0)
        g.linears[0].bias.fill_(0.0)
        g.linears[1].weight.fill_(1.0)
        g.linears[1].bias.fill_(-0.5)
    data = TrainingData(np.array([[0.0], [1.0]]), np.array([1, 0]))
    data.add_ce(np.array([[1.0]]), np.array([[0.2]]))  # g: 0.5 -> -0.3
    spec = (_sp(0.5) + (0.5 + _sp(-0.5))) / 2
    ce = _sp(0.5) * _sp(0.3)
    with torch.no_grad():
        assert float(invariant_loss(g, data, lam=2.0)) == pytest.approx(spec + 2 * ce, rel=1e-13)
        assert float(invariant_loss(g, data, lam=0.0)) == pytest.approx(spec, rel=1e-13)


def _rings(rng, n):
    x = rng.uniform(-1.2, 1.2, size=(n, 2))
    r = np.linalg.norm(x, axis=1)
    keep = (r < 0.5) | (r > 0.9)
    return x[keep], (r[keep] < 0.5).astype(float)


def test_training_separates_labelled_points_and_is_deterministic():
    x, y = _rings(np.random.default_rng(1), 1500)
    learner = Learner(LearnerSettings(hidden=(12,), epochs=80), low=[-1.2, -1.2], high=[1.2, 1.2])
    data = TrainingData(x, y)
    g = learner.fit(data, seed=0)
    pred = g.network().forward(x)[:, 0] >= 0
    assert np.mean(pred == (y == 1)) == 1.0
    again = learner.fit(data, seed=0)
    for (w, b), (w2, b2) in zip(g.layers(), again.layers(), strict=True):
        assert np.array_equal(w, w2) and np.array_equal(b, b2)


def test_counterexamples_are_repaired_and_warm_start_does_not_mutate_init():
    x, y = _rings(np.random.default_rng(2), 1500)
    learner = Learner(
        LearnerSettings(hidden=(12,), epochs=60, warm_epochs=40, lam=10.0, margin=0.05),
        low=[-1.2, -1.2],
        high=[1.2, 1.2],
    )
    data = TrainingData(x, y)
    g = learner.fit(data, seed=0)
    # claim that an inside point steps to a point in the unlabelled gap outside Inv
    a, b = np.array([[0.3, 0.0]]), np.array([[0.7, 0.0]])
    za, zb = g.network().forward(np.vstack([a, b]))[:, 0]
    if zb >= 0:  # the gap happens to be inside: use a point of the outer ring instead
        b = np.array([[1.0, 0.0]])
        zb = g.network().forward(b)[0, 0]
    assert za > 0 > zb
    before = [w.copy() for w, _ in g.layers()]
    data.add_ce(a, b)
    g2 = learner.fit(data, seed=1, init=g)
    za2, zb2 = g2.network().forward(np.vstack([a, b]))[:, 0]
    assert not (za2 > 0 > zb2)  # the pair no longer violates closure
    assert all(np.array_equal(w, w0) for (w, _), w0 in zip(g.layers(), before, strict=True))


def test_bad_inputs():
    with pytest.raises(ConfigError, match="epochs"):
        LearnerSettings(epochs=0)
    with pytest.raises(ConfigError, match="learner"):
        LearnerSettings(learning_rate=-1)
    with pytest.raises(DataError, match="labels"):
        TrainingData(np.zeros((2, 2)), np.array([0, 2]))
    with pytest.raises(DataError, match="labels"):
        TrainingData(np.zeros((2, 2)), np.array([0]))


def test_relabel_changes_only_the_matching_states() -> None:
    data = TrainingData(np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0]]), np.array([1.0, 1.0, 0.0]))
    data.relabel(np.array([[0.0, 1.0], [9.0, 9.0]]), np.array([0.0, 1.0]))
    np.testing.assert_array_equal(data.spec_y, [0.0, 1.0, 0.0])
    data.relabel(np.array([[2.0, 3.0]]), np.array([0.0]))
    np.testing.assert_array_equal(data.spec_y, [0.0, 0.0, 0.0])
