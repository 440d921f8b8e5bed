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
    return {"<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b}[op]


def _property(text: str, n_in: int, n_out: int):
    """Declared variables checked; returns (input bounds, predicate over X and Y)."""
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
    sess = ort.InferenceSession(model.SerializeToString())
    m = 300
    x = system.step_box.sample(rng, m, system.integer)
    layers = sample_box_weights(box, rng, m)  # uniform, vertices and both corners
    w = np.concatenate(
        [
            np.concatenate([wk.reshape(m, -1)] + ([bk] if np.any(bl < bu) else []), axis=1)
            for k, ((wk, bk), (wl, bl), (wu, bu)) in enumerate(
                zip(layers, box.lower, box.upper, strict=True)
            )
            if box.is_bayesian(k)
        ],
        axis=1,
    )
    assert w.shape[1] == layout.w_lo.size
    assert np.all(w >= layout.w_lo - 1e-12) and np.all(w <= layout.w_hi + 1e-12)
    (y,) = sess.run(None, {"X": np.concatenate([x, w], axis=1)})
    u = np.stack([forward([(wk[i], bk[i]) for wk, bk in layers], x[i]) for i in range(m)])
    x1 = system.step(x, u)
    np.testing.assert_allclose(y[:, 0], g.forward(x)[:, 0], atol=1e-9)
    np.testing.assert_allclose(y[:, 2 : 2 + n], x1, atol=1e-9)
    np.testing.assert_allclose(y[:, 1], g.forward(x1)[:, 0], atol=1e-9)
    # the VNN-LIB closure property, evaluated on these points, is the engine's violation test
    files = vnnlib_files(system, layout)
    lo, hi, pred = _property(files["closure.vnnlib"], layout.inputs, y.shape[1])
    np.testing.assert_array_equal(lo[:n], system.step_box.lo)
    np.testing.assert_array_equal(hi[n:], layout.w_hi)
    violated = (g.forward(x)[:, 0] >= 0) & ((g.forward(x1)[:, 0] < 0) | ~system.in_box(x1))
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
            assert inside == piece.rows.contains(x).tolist()
