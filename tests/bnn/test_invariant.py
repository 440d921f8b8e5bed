from __future__ import annotations

import numpy as np
import pytest
import torch

from safecert.bnn.invariant import (
    InvariantNet,
    evaluate_layers,
    layers_from_json,
    layers_to_json,
)
from safecert.errors import DataError


def _net(seed=0, hidden=(12,)):
    return InvariantNet(2, hidden, low=[-1.2, -0.5], high=[1.2, 3.5], seed=seed)


@pytest.mark.parametrize("hidden", [(12,), (8, 5)])
def test_exported_layers_equal_the_torch_network(hidden):
    g = _net(3, hidden)
    x = np.random.default_rng(0).uniform(-3, 4, size=(500, 2))
    with torch.no_grad():
        expect = g(torch.as_tensor(x)).numpy()
    got = evaluate_layers(g.layers(), x)
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-12)
    shapes = [(w.shape, b.shape) for w, b in g.layers()]
    widths = [2, *hidden, 1]
    assert shapes == [((a, b), (b,)) for a, b in zip(widths, widths[1:], strict=False)]


def test_seed_determines_the_network_and_clone_is_independent():
    a, b, c = _net(5), _net(5), _net(6)
    for (wa, ba), (wb, bb) in zip(a.layers(), b.layers(), strict=True):
        assert np.array_equal(wa, wb) and np.array_equal(ba, bb)
    assert not np.array_equal(a.layers()[0][0], c.layers()[0][0])
    d = a.clone()
    with torch.no_grad():
        d.linears[0].weight.add_(1.0)
    assert np.array_equal(a.layers()[0][0], b.layers()[0][0])


def test_json_round_trip_is_exact_and_checked():
    layers = _net(1).layers()
    back = layers_from_json(layers_to_json(layers))
    for (w, b), (w2, b2) in zip(layers, back, strict=True):
        assert np.array_equal(w, w2) and np.array_equal(b, b2)
    bad = layers_to_json(layers)
    bad[1]["W"] = [[1.0, 2.0]]
    with pytest.raises(DataError, match="layers.1"):
        layers_from_json(bad)
    with pytest.raises(DataError, match="missing"):
        layers_from_json([])


def test_bad_box_is_one_error_line():
    with pytest.raises(DataError, match="invariant.box"):
        InvariantNet(2, (4,), low=[0, 0], high=[1, 0])
    with pytest.raises(DataError, match="invariant.hidden"):
        InvariantNet(2, (), low=[0, 0], high=[1, 1])
