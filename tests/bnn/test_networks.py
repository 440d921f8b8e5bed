"""Networks, ε parsing, Bayesian spec and weight box."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from safecert.bnn.networks import BENCHMARK_POLICIES, ReluNetwork, forward, load_policy
from safecert.bnn.spec import BayesianSpec, Epsilon, WeightBox, default_spec, parse_epsilon
from safecert.errors import ConfigError, DataError

PI0 = {
    "lds": [0.069183],
    "lds_all": [0.133746],
    "pend": [1.365554],
    "pend_all": [-0.110172],
    "car": [1.927415, -8.967775, 19.509785],
    "car_all": [-45.156271, 17.126465, 13.203932],
}
SHAPES = {
    "lds": (2, 16, 1),
    "lds_all": (2, 4, 16, 1),
    "pend": (2, 16, 1),
    "pend_all": (2, 4, 16, 1),
    "car": (3, 16, 3),
    "car_all": (3, 6, 16, 3),
}


def _random_net(rng: np.random.Generator, widths: tuple[int, ...]) -> ReluNetwork:
    return ReluNetwork(
        [
            (rng.normal(size=(a, b)), rng.normal(size=b))
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        ]
    )


@pytest.mark.parametrize("name", BENCHMARK_POLICIES)
def test_published_policies_match_readme(name: str) -> None:
    net = load_policy(name)
    assert net.widths == SHAPES[name]
    np.testing.assert_allclose(net.forward(np.zeros(net.in_dim)), PI0[name], atol=5e-7)


def test_all_networks_start_with_the_sign_split_layer() -> None:
    for name in ("lds_all", "pend_all"):
        w, b = load_policy(name).layers[0]
        np.testing.assert_array_equal(w, np.hstack([np.eye(2), -np.eye(2)]))
        np.testing.assert_array_equal(b, 0.0)


def test_forward_matches_explicit_loop() -> None:
    rng = np.random.default_rng(0)
    net = _random_net(rng, (3, 5, 4, 2))
    x = rng.normal(size=(7, 3))
    ref = []
    for row in x:
        a = row
        for k, (w, b) in enumerate(net.layers):
            a = np.array(
                [sum(a[i] * w[i, j] for i in range(w.shape[0])) + b[j] for j in range(w.shape[1])]
            )
            if k < 2:
                a = np.array([max(v, 0.0) for v in a])
        ref.append(a)
    np.testing.assert_allclose(net.forward(x), np.array(ref), rtol=1e-12)
    assert net.forward(x[0]).shape == (2,)


def test_npz_and_list_round_trips_are_exact(tmp_path) -> None:
    net = _random_net(np.random.default_rng(1), (2, 6, 1))
    net.save_npz(tmp_path / "n.npz")
    back = ReluNetwork.from_npz(tmp_path / "n.npz")
    again = ReluNetwork.from_lists(net.to_lists())
    for other in (back, again):
        for (w, b), (w2, b2) in zip(net.layers, other.layers, strict=True):
            np.testing.assert_array_equal(w, w2)
            np.testing.assert_array_equal(b, b2)


def test_torch_round_trip_agrees_with_torch_forward() -> None:
    import torch

    net = _random_net(np.random.default_rng(2), (3, 8, 8, 2))
    mod = net.to_torch()
    x = np.random.default_rng(3).normal(size=(11, 3))
    with torch.no_grad():
        y_torch = mod(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y_torch, net.forward(x), rtol=1e-12, atol=1e-12)
    back = ReluNetwork.from_torch(mod)
    np.testing.assert_allclose(back.forward(x), net.forward(x), rtol=0, atol=0)
    with pytest.raises(ConfigError):
        ReluNetwork.from_torch(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh()))


def test_onnx_import_agrees_with_onnxruntime(tmp_path) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    net = _random_net(np.random.default_rng(4), (2, 5, 1))
    (w0, b0), (w1, b1) = net.layers
    inits = [
        numpy_helper.from_array(w0.T.astype(np.float32), "W0"),
        numpy_helper.from_array(b0.astype(np.float32), "B0"),
        numpy_helper.from_array(w1.astype(np.float32), "W1"),
        numpy_helper.from_array(b1.astype(np.float32), "B1"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "W0", "B0"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "W1"], ["m"]),
        helper.make_node("Add", ["m", "B1"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "n.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(5).normal(size=(9, 2)).astype(np.float32)
    y_ort = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(ReluNetwork.from_onnx(path).forward(x), y_ort, rtol=1e-5, atol=1e-5)


def test_bad_networks_raise_one_line_errors(tmp_path) -> None:
    with pytest.raises(DataError, match="layer 1 expects"):
        ReluNetwork([(np.ones((2, 3)), np.zeros(3)), (np.ones((4, 1)), np.zeros(1))])
    np.savez(tmp_path / "bad.npz", kernel=np.ones((2, 2)))
    with pytest.raises(DataError, match="W0, b0"):
        ReluNetwork.from_npz(tmp_path / "bad.npz")
    with pytest.raises(DataError):
        ReluNetwork.from_npz(tmp_path / "missing.npz")
    with pytest.raises(ConfigError, match="unknown benchmark"):
        load_policy("acrobot")


@pytest.mark.parametrize(
    ("text", "value", "in_sigma"),
    [
        ("1.5sigma", 1.5, True),
        ("2σ", 2.0, True),
        ("0.5 sigma", 0.5, True),
        ("0.02", 0.02, False),
        (0.1, 0.1, False),
    ],
)
def test_parse_epsilon(text, value, in_sigma) -> None:
    eps = parse_epsilon(text)
    assert eps == Epsilon(value, in_sigma)
    assert parse_epsilon(str(eps)) == eps


@pytest.mark.parametrize(
    "text", ["", "sigma", "-1", "1.5sigmas", "abc", "nan", "1e308sigma", "2e6", "inf"]
)
def test_parse_epsilon_rejects(text) -> None:
    with pytest.raises(ConfigError, match="epsilon"):
        parse_epsilon(text)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.booleans())
def test_parse_epsilon_round_trip(value: float, in_sigma: bool) -> None:
    text = f"{value!r}sigma" if in_sigma else repr(value)
    assert parse_epsilon(text) == Epsilon(value, in_sigma)


def test_default_specs_and_box() -> None:
    net = load_policy("lds")
    box = default_spec("lds").box(net, "1.5sigma")
    np.testing.assert_array_equal(box.lower[0][0], net.layers[0][0])  # layer 0 deterministic
    np.testing.assert_allclose(box.upper[1][0] - net.layers[1][0], 0.15)
    np.testing.assert_array_equal(box.upper[1][1], net.layers[1][1])  # biases fixed
    assert not box.is_bayesian(0) and box.is_bayesian(1)
    all_box = default_spec("pend_all").box(load_policy("pend_all"), "2sigma")
    assert not all_box.is_bayesian(0) and all_box.is_bayesian(1) and all_box.is_bayesian(2)
    np.testing.assert_allclose(all_box.upper[2][0] - all_box.lower[2][0], 0.2)
    abs_box = default_spec("car").box(load_policy("car"), 0.03)
    np.testing.assert_allclose(abs_box.upper[1][0] - abs_box.mean.layers[1][0], 0.03)


def test_box_contains_and_samples() -> None:
    rng = np.random.default_rng(6)
    net = _random_net(rng, (2, 4, 1))
    spec = BayesianSpec((0.1, 0.2), (True, True), bayesian_biases=True)
    box = spec.box(net, "1sigma")
    for _ in range(20):
        assert box.contains(box.sample_uniform(rng))
    outside = [(w.copy(), b.copy()) for w, b in net.layers]
    outside[1][0][0, 0] += 0.21
    assert not box.contains(outside)
    assert WeightBox.point(net).contains(net.layers)
    draws = np.array([spec.sample(net, rng)[1][0][0, 0] for _ in range(4000)])
    assert abs(draws.mean() - net.layers[1][0][0, 0]) < 0.02 and abs(draws.std() - 0.2) < 0.02
    with pytest.raises(ConfigError, match="sigma"):
        BayesianSpec((0.1,), (True, False))
    with pytest.raises(ConfigError):
        BayesianSpec((0.1,), (True,)).box(net, "1sigma")


def test_forward_function_with_box_weights() -> None:
    net = load_policy("pend")
    box = default_spec("pend").box(net, "2sigma")
    x = np.array([0.1, -0.2])
    lo = forward(box.lower, x)[0]
    hi = forward(box.upper, x)[0]
    assert lo != hi
