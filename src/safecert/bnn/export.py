"""``safecert bnn export``: a certificate's queries as ONNX + VNN-LIB, for other verifiers.

What is written (``DIR/``):

* ``closed_loop.onnx`` — one float64 graph ``Y = F(X)`` with a single input row
  ``X = (x_0 … x_{n−1}, w_0 … w_{k−1})``: the state, then every weight (and bias, when the spec makes
  biases Bayesian) of the policy's Bayesian layers, layer by layer, row-major. Output row
  ``Y = (g(x), g(x'), x'_0 … x'_{n−1}, r_0 … r_{m−1})`` where ``x' = f(x, π_w(x))`` is one step of
  the certified closed loop (the policy with weights ``w``, the dynamics of ``parameters.dynamics``
  compiled node by node: Gemm/MatMul, Relu, Clip, Min, Max, Abs, ArgMax + Gather; ``pwl`` as a sum
  of Relu ramps), ``g`` the certified invariant, and ``r = A x`` the rows of every polytope piece
  of X0 and X_u (so that those sets are expressible as output constraints).
* ``closure.vnnlib`` — ``x`` in the step domain, ``w`` in the certified weight box, and
  ``g(x) ≥ 0 ∧ (g(x') < 0 ∨ x' ∉ B)``;
* ``initial_K.vnnlib`` — ``x`` in piece K of X0 and ``g(x) < 0``; ``unsafe_K.vnnlib`` — ``x`` in
  piece K of X_u and ``g(x) ≥ 0``.

Each VNN-LIB file states the *violation* (the VNN-COMP convention: UNSAT = the condition holds);
the certificate claims all of them UNSAT. Assumptions: VNN-LIB input constraints are boxes, so an
integer system's integrality is dropped (a superset question: UNSAT still implies the condition;
a SAT witness may be fractional); the engine's margin (1e-6) is not added.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from safecert.bnn.dynamics import System
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.pwl import Call, Const, Linear, Name, Node, _pwl_fn
from safecert.bnn.sets import Piece
from safecert.bnn.spec import WeightBox
from safecert.errors import ConfigError

OPSET = 17


@dataclass(frozen=True)
class Layout:
    """Where things are in ``X`` and ``Y``: state size, weight-input bounds, row pieces."""

    n: int
    w_lo: np.ndarray
    w_hi: np.ndarray
    rows: tuple[tuple[str, int, int, int], ...]  # (set, piece, first row in r, row count)

    @property
    def inputs(self) -> int:
        return self.n + self.w_lo.size


class _Graph:
    """A tiny ONNX graph builder (float64 tensors, unique names)."""

    def __init__(self) -> None:
        from onnx import helper

        self.h = helper
        self.nodes: list = []
        self.inits: list = []
        self.k = 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def const(self, value: ArrayLike, dtype: type = np.float64) -> str:
        from onnx import numpy_helper

        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def op(self, op: str, inputs: list[str], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(self.h.make_node(op, inputs, [out], **attrs))
        return out

    def cols(self, x: str, lo: int, hi: int) -> str:
        """``x[:, lo:hi]``."""
        return self.op(
            "Slice",
            [x, self.const([lo], np.int64), self.const([hi], np.int64), self.const([1], np.int64)],
        )


def _network(g: _Graph, a: str, net: ReluNetwork) -> str:
    last = len(net.layers) - 1
    for k, (w, b) in enumerate(net.layers):
        a = g.op("Gemm", [a, g.const(w), g.const(b)])
        if k < last:
            a = g.op("Relu", [a])
    return a


def _policy(g: _Graph, x: str, w: str, box: WeightBox) -> tuple[str, list[float], list[float]]:
    """``π_w(x)`` with the Bayesian layers' weights read from ``w``; returns the output and the
    weight inputs' bounds."""
    lo: list[float] = []
    hi: list[float] = []
    a = x
    last = len(box.lower) - 1
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        if box.is_bayesian(k):
            i, o = wl.shape
            start = len(lo)
            lo += wl.ravel().tolist()
            hi += wu.ravel().tolist()
            wk = g.op("Reshape", [g.cols(w, start, start + i * o), g.const([-1, i, o], np.int64)])
            a3 = g.op("Unsqueeze", [a, g.const([1], np.int64)])
            z = g.op("Squeeze", [g.op("MatMul", [a3, wk]), g.const([1], np.int64)])
            if np.any(bl < bu):
                start = len(lo)
                lo += bl.tolist()
                hi += bu.tolist()
                z = g.op("Add", [z, g.cols(w, start, start + o)])
            else:
                z = g.op("Add", [z, g.const(bl)])
        else:
            z = g.op("Gemm", [a, g.const(wl), g.const(bl)])
        a = g.op("Relu", [z]) if k < last else z
    return a, lo, hi


def _expr(g: _Graph, node: Node, env: dict[str, str]) -> str:
    """One pwl expression over ``(N,)`` tensors, node for node."""
    if isinstance(node, Const):
        return g.const(node.value)  # broadcasts
    if isinstance(node, Name):
        return env[node.name]
    if isinstance(node, Linear):
        acc = g.const(node.const)
        for c, t in node.terms:
            acc = g.op("Add", [acc, g.op("Mul", [g.const(c), _expr(g, t, env)])])
        return acc
    assert isinstance(node, Call)
    args = [_expr(g, a, env) for a in node.args]
    if node.fn in ("min", "max"):
        return g.op(node.fn.capitalize(), args)
    v = args[0]
    if node.fn == "relu":
        return g.op("Relu", [v])
    if node.fn == "abs":
        return g.op("Abs", [v])
    if node.fn == "clip":
        return g.op("Clip", [v, g.const(node.params[0]), g.const(node.params[1])])
    xs, ys = _pwl_fn(node.params)  # y0 + Σ s_k (relu(v − x_k) − relu(v − x_{k+1})): np.interp
    acc = g.const(ys[0])
    for k in range(xs.size - 1):
        s = (ys[k + 1] - ys[k]) / (xs[k + 1] - xs[k])
        ramp = g.op(
            "Sub",
            [
                g.op("Relu", [g.op("Sub", [v, g.const(xs[k])])]),
                g.op("Relu", [g.op("Sub", [v, g.const(xs[k + 1])])]),
            ],
        )
        acc = g.op("Add", [acc, g.op("Mul", [g.const(s), ramp])])
    return acc


def _step(g: _Graph, system: System, x: str, u: str) -> str:
    d = system.dynamics
    col = lambda t, j: g.op("Squeeze", [g.cols(t, j, j + 1), g.const([1], np.int64)])  # noqa: E731
    env = {n: col(x, i) for i, n in enumerate(d.state)}
    if d.choices is not None:
        idx = g.op("ArgMax", [u], axis=1, keepdims=0, select_last_index=0)
        chosen = g.op("Gather", [g.const(d.choices), idx], axis=0)  # (N, len(action))
        env.update({n: col(chosen, j) for j, n in enumerate(d.action)})
    else:
        env.update({n: col(u, j) for j, n in enumerate(d.action)})
    for name, node in d.define:
        env[name] = _expr(g, node, env)
    parts = [g.op("Unsqueeze", [_expr(g, e, env), g.const([1], np.int64)]) for e in d.next]
    return g.op("Concat", parts, axis=1)


def closed_loop_model(system: System, box: WeightBox, inv: ReluNetwork) -> tuple[object, Layout]:
    """The ONNX model of the module docstring and its layout."""
    from onnx import TensorProto, helper

    g = _Graph()
    n = system.state_dim
    x = g.cols("X", 0, n)
    # the weight inputs start at column n; their count is known once the policy is built
    w = g.op(
        "Slice", ["X", g.const([n], np.int64), g.const([2**62], np.int64), g.const([1], np.int64)]
    )
    u, lo, hi = _policy(g, x, w, box)
    x1 = _step(g, system, x, u)
    gx, g1 = _network(g, x, inv), _network(g, x1, inv)
    rows: list[tuple[str, int, int, int]] = []
    mats = []
    first = 0
    for which, region in (("initial", system.initial), ("unsafe", system.unsafe)):
        for k, piece in enumerate(region.pieces):
            m = piece.rows.A.shape[0]
            if m:
                rows.append((which, k, first, m))
                mats.append(piece.rows.A)
                first += m
    outs = [gx, g1, x1]
    if mats:
        outs.append(g.op("MatMul", [x, g.const(np.vstack(mats).T)]))
    y = g.op("Concat", outs, axis=1)
    g.nodes.append(helper.make_node("Identity", [y], ["Y"]))
    k_in = n + len(lo)
    graph = helper.make_graph(
        g.nodes,
        "safecert_closed_loop",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, ["N", k_in])],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, ["N", 2 + n + first])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model, Layout(n, np.array(lo), np.array(hi), tuple(rows))


# ---- VNN-LIB -------------------------------------------------------------------------------------
def _num(v: float) -> str:
    return repr(float(v))


def _header(layout: Layout, outputs: int, title: str) -> list[str]:
    lines = [f"; {title}", "; written by safecert bnn export (see docs/bnn.md)"]
    lines += [f"(declare-const X_{i} Real)" for i in range(layout.inputs)]
    lines += [f"(declare-const Y_{j} Real)" for j in range(outputs)]
    return lines


def _input_box(layout: Layout, lo: np.ndarray, hi: np.ndarray) -> list[str]:
    lows = np.concatenate([lo, layout.w_lo])
    highs = np.concatenate([hi, layout.w_hi])
    out = []
    for i, (a, b) in enumerate(zip(lows, highs, strict=True)):
        out += [f"(assert (>= X_{i} {_num(a)}))", f"(assert (<= X_{i} {_num(b)}))"]
    return out


def vnnlib_files(system: System, layout: Layout) -> dict[str, str]:
    """File name → VNN-LIB text of each condition's violation (module docstring)."""
    n = layout.n
    outputs = 2 + n + sum(r[3] for r in layout.rows)
    files: dict[str, str] = {}
    b = system.box
    lines = _header(layout, outputs, "closure violated: g(x) >= 0 and (g(x') < 0 or x' outside B)")
    lines += _input_box(layout, system.step_box.lo, system.step_box.hi)
    lines.append("(assert (>= Y_0 0.0))")
    alts = ["(and (< Y_1 0.0))"]
    for i in range(n):
        alts.append(f"(and (> Y_{2 + i} {_num(b.hi[i])}))")
        alts.append(f"(and (< Y_{2 + i} {_num(b.lo[i])}))")
    lines.append(f"(assert (or {' '.join(alts)}))")
    files["closure.vnnlib"] = "\n".join(lines) + "\n"
    for which, region, cond in (
        ("initial", system.initial, "(assert (< Y_0 0.0))"),
        ("unsafe", system.unsafe, "(assert (>= Y_0 0.0))"),
    ):
        for k, piece in enumerate(region.pieces):
            lines = _header(layout, outputs, f"{which} piece {k} violated")
            lines += _input_box(layout, piece.box.lo, piece.box.hi)
            lines += _row_constraints(layout, which, k, piece)
            lines.append(cond)
            files[f"{which}_{k}.vnnlib"] = "\n".join(lines) + "\n"
    return files


def _row_constraints(layout: Layout, which: str, k: int, piece: Piece) -> list[str]:
    for w, p, first, m in layout.rows:
        if (w, p) == (which, k):
            return [
                f"(assert (<= Y_{2 + layout.n + first + j} {_num(piece.rows.b[j])}))"
                for j in range(m)
            ]
    return []


def export(system: System, box: WeightBox, inv: ReluNetwork, out: Path) -> list[Path]:
    """Write ``closed_loop.onnx`` and the VNN-LIB files into ``out``; returns their paths."""
    try:
        import onnx
    except ImportError:
        raise ConfigError(
            "export needs the onnx package", field="export", fix="pip install 'safecert[all]'"
        ) from None
    from safecert.document import durable_write

    model, layout = closed_loop_model(system, box, inv)
    onnx.checker.check_model(model)  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    paths = [durable_write(out / "closed_loop.onnx", model.SerializeToString())]  # type: ignore[attr-defined]
    for name, text in vnnlib_files(system, layout).items():
        paths.append(durable_write(out / name, text.encode()))
    return paths


def certificate_claim(
    cert_path: Path, data_dir: Path | None = None
) -> tuple[System, WeightBox, ReluNetwork]:
    """The system, weight box and invariant a ``bnn`` certificate claims (from its parameters,
    its policy copy and its ``result``); one DataError line when it has no invariant."""
    from safecert.audit import Evidence
    from safecert.bnn.check import parameters_config, policy_copy
    from safecert.bnn.config import bayesian_spec
    from safecert.bnn.networks import read_policy_file
    from safecert.bnn.spec import Epsilon
    from safecert.bnn.system import build_system
    from safecert.certificate import BnnCertificate, read_certificate
    from safecert.errors import DataError

    cert = read_certificate(cert_path)
    if not isinstance(cert, BnnCertificate):
        raise DataError(f"kind {cert.kind!r} is not bnn", field="certificate.kind")
    r = cert.result
    if r.invariant is None:
        raise DataError(
            "the certificate holds no invariant (nothing to export)",
            field="certificate.result.invariant",
            fix="export a certificate whose run found one",
        )
    cfg = parameters_config(cert.parameters)
    _, path = policy_copy(cert, Evidence(Path(cert_path), data_dir=data_dir))
    try:
        system = build_system(cfg.system, cfg.dynamics, cfg.sets)
    except ConfigError as exc:
        raise DataError(str(exc), field="certificate.parameters") from None
    mean = read_policy_file(path)
    eps = Epsilon(r.epsilon.value, r.epsilon.unit == "sigma")
    box = bayesian_spec(cfg, mean).box(mean, eps)
    inv = ReluNetwork.from_lists(
        [layer.model_dump() for layer in r.invariant.layers], name="certificate.result.invariant"
    )
    return system, box, inv
