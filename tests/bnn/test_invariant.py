from __future__ import annotations

import numpy as np
import pytest
import torch

from safecert.bnn.invariant import InvariantNet
from safecert.bnn.networks import ReluNetwork
from safecert.errors import DataError


def _net(seed=0, hidden=(12,)):
    return InvariantNet(2, hidden, low=[-1.2, -0.5], high=[1.2, 3.5], seed=seed)


@pytest.mark.parametrize("hidden", [(12,), (8, 5)])
def test_exported_network_equals_the_torch_network(hidden):
    g = _net(3, hidden)
    x = np.random.default_rng(0).uniform(-3, 4, size=(500, 2))
    with torch.no_grad():
        expect = g(torch.as_tensor(x)).numpy()
    net = g.network()
    np.testing.assert_allclose(net.forward(x)[:, 0], expect, rtol=1e-12, atol=1e-12)
    assert net.widths == (2, *hidden, 1)
    # the exported weights survive the certificate's JSON round trip exactly
    back = ReluNetwork.from_lists(net.to_lists())
    assert all(
        np.array_equal(w, w2) and np.array_equal(b, b2)
        for (w, b), (w2, b2) in zip(net.layers, back.layers, strict=True)
    )


def test_seed_determines_the_network_and_clone_is_independent():
    a, b, c = _net(5), _net(5), _net(6)
    for (wa, ba), (wb, bb) in zip(a.layers(), b.layers(), strict=True):
        assert np.array_equal(wa, wb) and np.array_equal(ba, bb)
    assert not np.array_equal(a.layers()[0][0], c.layers()[0][0])
    d = a.clone()
    with torch.no_grad():
        d.linears[0].weight.add_(1.0)
    assert np.array_equal(a.layers()[0][0], b.layers()[0][0])
    np.testing.assert_array_equal(a.low, [-1.2, -0.5])
    np.testing.assert_array_equal(a.high, [1.2, 3.5])


def test_bad_box_is_one_error_line():
    with pytest.raises(DataError, match="invariant.box"):
        InvariantNet(2, (4,), low=[0, 0], high=[1, 0])
    with pytest.raises(DataError, match="invariant.hidden"):
        InvariantNet(2, (), low=[0, 0], high=[1, 1])
