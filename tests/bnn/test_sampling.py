from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from safecert.bnn.networks import ReluNetwork, load_policy
from safecert.bnn.sampling import (
    SafeBNNPolicy,
    acceptance_probability,
    batched_forward,
    network_at,
    project_means,
)
from safecert.bnn.spec import BayesianSpec, default_spec


def _closed_form(n_weights: int, eps_in_sigma: float) -> float:
    # independent route: P(|N(0, σ)| ≤ kσ) = 2Φ(k) − 1, one factor per Bayesian weight
    return (2 * stats.norm.cdf(eps_in_sigma) - 1) ** n_weights


@pytest.mark.parametrize("eps", [1.0, 1.5, 2.0])
def test_acceptance_rate_matches_the_closed_form(eps):
    net, spec = load_policy("lds"), default_spec("lds")
    box = spec.box(net, f"{eps}sigma")
    n_bayes = net.layers[1][0].size  # kernel 16x1; biases are not Bayesian
    expect = _closed_form(n_bayes, eps)
    assert acceptance_probability(box, spec) == pytest.approx(expect, rel=1e-12)
    policy = SafeBNNPolicy(box, spec, np.random.default_rng(0))
    n = 40_000
    policy.sample(n)
    # binomial count: within 5 standard deviations of the closed form
    assert abs(policy.accepted - n * expect) <= 5 * np.sqrt(n * expect * (1 - expect))


def test_all_layer_acceptance_is_tiny_but_sampling_still_works():
    net, spec = load_policy("lds_all"), default_spec("lds_all")
    box = spec.box(net, "0.5sigma")
    n_bayes = net.layers[1][0].size + net.layers[2][0].size
    assert acceptance_probability(box, spec) == pytest.approx(_closed_form(n_bayes, 0.5), rel=1e-10)
    draws = SafeBNNPolicy(box, spec, np.random.default_rng(1)).sample(500)
    for j in (0, 250, 499):
        assert box.contains(network_at(draws, j))


def test_accepted_weights_follow_the_truncated_posterior():
    net, spec = load_policy("lds"), default_spec("lds")
    box = spec.box(net, "1sigma")
    w1 = SafeBNNPolicy(box, spec, np.random.default_rng(2)).sample(20_000)[1][0]
    dev = (w1 - net.layers[1][0]).reshape(len(w1), -1) / 0.1
    # independent route: scipy's truncated normal on [-1, 1]
    tn = stats.truncnorm(-1.0, 1.0)
    assert np.all(np.abs(dev) <= 1.0 + 1e-12)
    assert abs(dev.var() - tn.var()) < 0.01
    ks = stats.kstest(dev[:, 0], tn.cdf)
    assert ks.pvalue > 1e-3
    # fixed layers never move
    assert np.array_equal(
        SafeBNNPolicy(box, spec, np.random.default_rng(3)).sample(3)[0][0], net.layers[0][0]
    )


def test_actions_use_one_draw_per_row_and_match_the_network():
    net, spec = load_policy("pend"), default_spec("pend")
    point = spec.box(net, 0.0)  # zero width: the mean network exactly
    x = np.random.default_rng(4).uniform(-1, 1, size=(7, 2))
    got = SafeBNNPolicy(point, spec, np.random.default_rng(0)).act(x)
    np.testing.assert_allclose(got, net.forward(x), rtol=1e-13, atol=1e-13)
    wide = SafeBNNPolicy(spec.box(net, "2sigma"), spec, np.random.default_rng(0))
    same = np.repeat(x[:1], 50, axis=0)
    assert np.unique(wide.act(same).round(12)).size > 40  # different weights per row
    layers = wide.sample(2)
    single = network_at(layers, 1)
    np.testing.assert_allclose(batched_forward(layers, x[:2])[1], ReluNetwork(single).forward(x[1]))


def test_projection_keeps_means_in_the_box():
    net = load_policy("lds")
    spec = BayesianSpec.from_first_bayesian(2, 0.1, first=1)
    box = spec.box(net, "1sigma")
    rng = np.random.default_rng(5)
    proposal = [(w + rng.normal(0, 1, w.shape), b + 1.0) for w, b in net.layers]
    proj = project_means(proposal, box)
    assert box.contains(proj.layers)
    assert np.array_equal(proj.layers[0][0], net.layers[0][0])  # deterministic layer unchanged
    inside = [(w + 0.01, b) for w, b in net.layers]
    inside[0] = net.layers[0]
    np.testing.assert_array_equal(project_means(inside, box).layers[1][0], inside[1][0])
