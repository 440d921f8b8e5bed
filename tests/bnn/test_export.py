"""`safecert bnn export`: the ONNX closed loop equals the engine's simulator, and the VNN-LIB files
parse (a small s-expression reader written here) and say what the engine's conditions say."""

from __future__ import annotations

import re

import numpy as np
import pytest

from safecert.bnn.config import bayesian_spec
from safecert.bnn.export import closed_loop_model, vnnlib_files
from safecert.bnn.networks import ReluNetwork, forward, load_policy
from safecert.bnn.sampling import sample_box_weights
from safecert.bnn.setup import benchmark_config
from safecert.bnn.system import build_system

ort = pytest.importorskip("onnxruntime")


def _sexprs(text: str) -> list:
    """Parse every top-level s-expression of a VNN-LIB file (comments dropped)."""
    toks = re.findall(r"\(|\)|[^\s()]+", re.sub(r";[^\n]*", "", text))
    out, stack = [], [[]]
    for t in toks:
        if t == "(":
            stack.append([])
        elif t == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(t)
    assert len(stack) == 1, "unbalanced parentheses"
    out = stack[0]
    return out


def _holds(expr, env: dict[str, float]) -> bool:
    op, *args = expr
    if op == "and":
        return all(_holds(a, env) for a in args)
    if op == "or":
        return any(_holds(a, env) for a in args)
    a, b = (env[v] if v in env else float(v) for v in args)
    return {"<=": a <= b, ">=": a >= b}[op]


def _property(text: str, n_in: int, n_out: int):
    """Declared variables checked; returns (input bounds, predicate over X and Y). Non-strict
    comparisons only (VNN-LIB 1.0 as Marabou reads it)."""
    exprs = _sexprs(text)
    decl = [e[1] for e in exprs if e[0] == "declare-const"]
    assert decl == [f"X_{i}" for i in range(n_in)] + [f"Y_{j}" for j in range(n_out)]
    asserts = [e[1] for e in exprs if e[0] == "assert"]
    lo, hi = np.full(n_in, -np.inf), np.full(n_in, np.inf)
    rest = []
    for a in asserts:
        if isinstance(a[1], str) and a[1].startswith("X_"):
            i = int(a[1][2:])
            (lo if a[0] == ">=" else hi)[i] = float(a[2])
        else:
            rest.append(a)

    def pred(y: np.ndarray) -> bool:
        env = {f"Y_{j}": float(v) for j, v in enumerate(y)}
        return all(_holds(a, env) for a in rest)

    return lo, hi, pred


def _pre_activations(layers, box, x: np.ndarray) -> tuple[np.ndarray, list]:
    """Per sample: the Bayesian layers' pre-activations (the export's ``s``) and their inputs."""
    s_rows, inputs = [], []
    for i in range(x.shape[0]):
        a, s, ins = x[i], [], []
        last = len(layers) - 1
        for k, (wk, bk) in enumerate(layers):
            z = a @ wk[i] + bk[i]
            if box.is_bayesian(k):
                s.append(z)
                ins.append(a)
            a = np.maximum(z, 0.0) if k < last else z
        s_rows.append(np.concatenate(s))
        inputs.append(ins)
    return np.array(s_rows), inputs


def _interval(box, inputs: list) -> tuple[np.ndarray, np.ndarray]:
    """The exact pre-activation interval per neuron: ``Σ_i min/max(w_lo a_i, w_hi a_i) + b``."""
    lo, hi = [], []
    for ins in inputs:
        rl, rh = [], []
        j = 0
        for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
            if box.is_bayesian(k):
                a = ins[j][:, None]
                j += 1
                rl.append(np.minimum(wl * a, wu * a).sum(axis=0) + bl)
                rh.append(np.maximum(wl * a, wu * a).sum(axis=0) + bu)
        lo.append(np.concatenate(rl))
        hi.append(np.concatenate(rh))
    return np.array(lo), np.array(hi)


PWL_OPS = {"Gemm", "Relu", "Concat", "Identity"}


@pytest.mark.parametrize("name", ["lds_x04", "pend_all", "car"])
def test_exported_closed_loop_equals_the_engine(name: str) -> None:
    cfg = benchmark_config(name)
    system = build_system(cfg.system, cfg.dynamics, cfg.sets)
    mean = load_policy(name.removesuffix("_x04"))
    box = bayesian_spec(cfg, mean).box(mean, "1sigma")
    rng = np.random.default_rng(0)
    n = system.state_dim
    g = ReluNetwork(
        [
            (rng.normal(size=(n, 6)), rng.normal(size=6)),
            (rng.normal(size=(6, 1)), rng.normal(size=1)),
        ]
    )
    model, layout = closed_loop_model(system, box, g)
    ops = {node.op_type for node in model.graph.node}
    assert "Slice" not in ops
    if system.dynamics.choices is None:  # piecewise linear: what Marabou's ONNX reader parses
        assert ops <= PWL_OPS, ops
    else:
        assert ops <= PWL_OPS | {"ArgMax", "Gather"}, ops
    sess = ort.InferenceSession(model.SerializeToString())
    m = 300
    x = system.step_box.sample(rng, m, system.integer)
    layers = sample_box_weights(box, rng, m)  # uniform, vertices and both corners
    s, inputs = _pre_activations(layers, box, x)
    assert s.shape[1] == layout.s_lo.size
    assert np.all(s >= layout.s_lo) and np.all(s <= layout.s_hi)  # the declared input bounds
    (y,) = sess.run(None, {"X": np.concatenate([x, s], axis=1)})
    u = np.stack([forward([(wk[i], bk[i]) for wk, bk in layers], x[i]) for i in range(m)])
    x1 = system.step(x, u)
    np.testing.assert_allclose(y[:, 0], g.forward(x)[:, 0], atol=1e-9)
    np.testing.assert_allclose(y[:, 2 : 2 + n], x1, atol=1e-9)
    np.testing.assert_allclose(y[:, 1], g.forward(x1)[:, 0], atol=1e-9)
    # the slack outputs are s − z_lo and z_hi − s of the exact interval, computed independently
    z_lo, z_hi = _interval(box, inputs)
    k = s.shape[1]
    np.testing.assert_allclose(
        y[:, layout.first_slack : layout.first_slack + k], s - z_lo, atol=1e-9
    )
    np.testing.assert_allclose(y[:, layout.first_slack + k :], z_hi - s, atol=1e-9)
    assert np.all(y[:, layout.first_slack :] >= -1e-9)  # weights in the box: slacks ≥ 0
    # a pre-activation beyond its interval makes its slack negative (the box is enforced); the
    # last Bayesian layer's, so that no later interval moves
    last = box.lower[max(k for k in range(len(box.lower)) if box.is_bayesian(k))][0].shape[1]
    beyond = s.copy()
    beyond[:, k - last :] = z_hi[:, k - last :] + 0.01
    (y_out,) = sess.run(None, {"X": np.concatenate([x, beyond], axis=1)})
    np.testing.assert_allclose(y_out[:, layout.outputs - last :], -0.01, atol=1e-9)
    # the VNN-LIB closure property, evaluated on these points, is the engine's relaxed test
    margin = 1e-6
    files = vnnlib_files(system, layout, margin)
    y = y.copy()
    y[:, layout.first_slack :] = np.maximum(y[:, layout.first_slack :], 0.0)  # rounding only
    for text in files.values():
        assert not re.search(r"\((<|>) ", text), "strict comparison in VNN-LIB 1.0"
        assert not re.search(r"\d[eE][-+]?\d", text), "exponent notation"
    lo, hi, pred = _property(files["closure.vnnlib"], layout.inputs, y.shape[1])
    np.testing.assert_array_equal(lo[:n], system.step_box.lo)
    np.testing.assert_array_equal(hi[n:], layout.s_hi)
    g0, g1 = g.forward(x)[:, 0], g.forward(x1)[:, 0]
    leaves = np.any((x1 >= system.box.hi - margin) | (x1 <= system.box.lo + margin), axis=1)
    violated = (g0 >= -margin) & ((g1 <= margin) | leaves)
    assert [pred(row) for row in y] == violated.tolist()
    for fname, text in files.items():
        if fname.startswith(("initial", "unsafe")):
            lo, hi, pred = _property(text, layout.inputs, y.shape[1])
            region = system.initial if fname.startswith("initial") else system.unsafe
            piece = region.pieces[int(fname.split("_")[1].split(".")[0])]
            np.testing.assert_array_equal(lo[:n], piece.box.lo)
            inside = [
                pred(np.r_[0.0 if fname.startswith("unsafe") else -1.0, row[1:]]) for row in y
            ]
            # with g forced to the violating sign, the rows' constraints are the piece's rows
            # relaxed by the margin
            rows_ok = np.all(x @ piece.rows.A.T <= piece.rows.b + margin, axis=1)
            assert inside == rows_ok.tolist()
