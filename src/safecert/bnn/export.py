"""``safecert bnn export``: a certificate's queries as ONNX + VNN-LIB 1.0, for other verifiers.

What is written (``DIR/``), in the dialect every VNN-COMP tool loads (Marabou, α,β-CROWN, NNV):

* ``closed_loop.onnx`` — one float64 graph ``Y = F(X)`` of ``Gemm``, ``Relu`` and ``Concat`` only
  (plus ``ArgMax``/``Gather`` for a system with discrete ``choices``), with a single input row
  ``X = (x_0 … x_{n−1}, s_0 … s_{k−1})``: the state, then the **pre-activation of every neuron of
  the policy's Bayesian layers**, layer by layer. A weight box acts on one layer's pre-activations
  exactly as an interval per neuron: for an input ``a`` of either sign,
  ``{a·w + b : w ∈ [w_lo, w_hi], b ∈ [b_lo, b_hi]} = [z_lo(a), z_hi(a)]`` with
  ``z_lo = relu(a)·w_lo − relu(−a)·w_hi + b_lo`` and ``z_hi = relu(a)·w_hi − relu(−a)·w_lo + b_hi``
  (each neuron has its own weights, so the layer's set is the product of these intervals). So ``s``
  ranges over the layer's reachable pre-activations when the outputs ``s − z_lo(a) ≥ 0`` and
  ``z_hi(a) − s ≥ 0`` are asserted — the same exact encoding as the engine's MILP, with no product
  of two variables, so piecewise-linear verifiers accept it. Output row
  ``Y = (g(x), g(x'), x'_0 … x'_{n−1}, r_0 … r_{m−1}, s − z_lo, z_hi − s)`` where ``x' = f(x, π_s(x))``
  is one step of the certified closed loop (the dynamics of ``parameters.dynamics`` compiled node by
  node into affine maps and ReLUs: ``max(a, b) = a + relu(b − a)``, ``abs``, ``clip``, ``pwl`` as
  ramps), ``g`` the certified invariant and ``r = A x`` the rows of every polytope piece of X0 and
  X_u. No ``Slice``: columns are picked by constant ``Gemm`` matrices.
* ``closure.vnnlib`` — ``x`` in the step domain, ``s`` within sound interval bounds, the slack
  outputs ``≥ 0``, and the violation relaxed by the certificate's margin ``m``
  (``result.verifier_margin``): ``g(x) ≥ −m ∧ (g(x') ≤ m ∨ x'_i ≥ hi_i − m ∨ x'_i ≤ lo_i + m)``;
* ``initial_K.vnnlib`` — ``x`` in piece K of X0 (its rows relaxed by ``m``) and ``g(x) ≤ m``;
  ``unsafe_K.vnnlib`` — ``x`` in piece K of X_u (rows relaxed by ``m``) and ``g(x) ≥ −m``.

VNN-LIB 1.0: only ``<=``/``>=`` (no strict comparison), numbers in positional notation, one
``(assert (or (and …) …))`` for a disjunction. Each file states the *violation* (UNSAT = the
condition holds) exactly as the engine's relaxed MILP asked it, so the certificate claims all of
them UNSAT; they are supersets of the strict violations, so UNSAT still implies the condition.
Every file carries the certificate's verdict in its header (``; safecert verdict: SAFE``, the ONNX
model's ``doc_string`` and ``metadata_props``); a non-SAFE certificate is exported only when asked
(``force``), and its files say that nothing is claimed. Assumption: VNN-LIB inputs are boxes, so an
integer system's integrality is dropped (a superset question: UNSAT still implies the condition,
but a relaxed query may be SAT where the integer one is not).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from safecert.bnn.bounds import network_bounds, widen
from safecert.bnn.dynamics import System
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.pwl import Call, Const, Linear, Name, Node, _pwl_fn
from safecert.bnn.sets import Piece
from safecert.bnn.spec import WeightBox
from safecert.errors import ConfigError, DataError

OPSET = 17


@dataclass(frozen=True)
class Layout:
    """Where things are in ``X`` and ``Y``: state size, the pre-activation inputs' sound bounds,
    the row pieces and the slack outputs."""

    n: int
    s_lo: np.ndarray
    s_hi: np.ndarray
    rows: tuple[tuple[str, int, int, int], ...]  # (set, piece, first row in r, row count)
    slacks: int  # 2 · s.size: s − z_lo, then z_hi − s, per Bayesian layer

    @property
    def inputs(self) -> int:
        return self.n + self.s_lo.size

    @property
    def outputs(self) -> int:
        return 2 + self.n + sum(r[3] for r in self.rows) + self.slacks

    @property
    def first_slack(self) -> int:
        return self.outputs - self.slacks


@dataclass(frozen=True)
class Header:
    """What every exported file says about the certificate it comes from."""

    verdict: str
    epsilon: str
    margin: float
    source: str = ""

    def lines(self) -> list[str]:
        claim = (
            "the certificate claims this query UNSAT"
            if self.verdict == "SAFE"
            else "NOT SAFE: exported with --force; the certificate claims nothing, and this "
            "query may be SAT"
        )
        return [
            f"; safecert verdict: {self.verdict} ({claim})",
            f"; epsilon: {self.epsilon}; margin: {_num(self.margin)}"
            + (f"; certificate: {self.source}" if self.source else ""),
        ]


class _Graph:
    """A tiny ONNX graph builder (float64 tensors, unique names) emitting only ops that
    piecewise-linear verifiers parse: ``Gemm`` (variable × constant), ``Relu``, ``Concat``."""

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

    def affine(self, a: str, w: ArrayLike, b: ArrayLike) -> str:
        w = np.atleast_2d(np.asarray(w, dtype=np.float64))
        return self.op("Gemm", [a, self.const(w), self.const(np.broadcast_to(b, w.shape[1]))])

    def cols(self, x: str, width: int, lo: int, hi: int) -> str:
        """``x[:, lo:hi]`` as ``x @ E`` (a constant selection matrix; no ``Slice``)."""
        e = np.zeros((width, hi - lo))
        e[np.arange(lo, hi), np.arange(hi - lo)] = 1.0
        return self.affine(x, e, 0.0)

    def combine(self, terms: list[tuple[float, str]], const: float = 0.0) -> str:
        """``const + Σ c_i t_i`` for ``(N, 1)`` columns ``t_i``."""
        if not terms:
            return self.affine(self.one, [[0.0]], const)
        cat = terms[0][1] if len(terms) == 1 else self.op("Concat", [t for _, t in terms], axis=1)
        return self.affine(cat, [[c] for c, _ in terms], const)

    def relu(self, a: str) -> str:
        return self.op("Relu", [a])

    one = ""  # an (N, 1) column to hang constants on; set by closed_loop_model


def _network(g: _Graph, a: str, net: ReluNetwork) -> str:
    last = len(net.layers) - 1
    for k, (w, b) in enumerate(net.layers):
        a = g.affine(a, w, b)
        if k < last:
            a = g.relu(a)
    return a


def _policy(
    g: _Graph, x: str, s: str, box: WeightBox, bounds_lo: np.ndarray, bounds_hi: np.ndarray
) -> tuple[str, list[str], list[float], list[float]]:
    """``π(x)`` with each Bayesian layer's pre-activations read from ``s`` (module docstring).
    Returns the output, the slack tensors and the sound bounds of ``s``."""
    layer_bounds = network_bounds(box, bounds_lo, bounds_hi)
    lo: list[float] = []
    hi: list[float] = []
    slacks_lo: list[str] = []
    slacks_hi: list[str] = []
    width = int(sum(wl.shape[1] for k, (wl, _) in enumerate(box.lower) if box.is_bayesian(k)))
    a = x
    last = len(box.lower) - 1
    for k, ((wl, bl), (wu, bu)) in enumerate(zip(box.lower, box.upper, strict=True)):
        if box.is_bayesian(k):
            o = wl.shape[1]
            start = len(lo)
            zl, zh = widen(layer_bounds[k].z_lo, layer_bounds[k].z_hi, 1e-6)
            lo += zl.tolist()
            hi += zh.tolist()
            i = wl.shape[0]
            both = g.op("Concat", [g.relu(a), g.relu(g.affine(a, -np.eye(i), 0.0))], axis=1)
            z_lo = g.affine(both, np.vstack([wl, -wu]), bl)
            z_hi = g.affine(both, np.vstack([wu, -wl]), bu)
            sk = g.cols(s, width, start, start + o)
            # s − z_lo and z_hi − s
            slacks_lo.append(g.affine(g.op("Concat", [sk, z_lo], axis=1), _diff(o), 0.0))
            slacks_hi.append(g.affine(g.op("Concat", [z_hi, sk], axis=1), _diff(o), 0.0))
            z = sk
        else:
            z = g.affine(a, wl, bl)
        a = g.relu(z) if k < last else z
    return a, slacks_lo + slacks_hi, lo, hi


def _diff(o: int) -> np.ndarray:
    """``[[I], [−I]]``: ``(p, q) ↦ p − q`` for two ``(N, o)`` blocks side by side."""
    return np.vstack([np.eye(o), -np.eye(o)])


def _expr(g: _Graph, node: Node, env: dict[str, str]) -> str:
    """One pwl expression over ``(N, 1)`` columns, node for node, in affine maps and ReLUs."""
    if isinstance(node, Const):
        return g.combine([], float(node.value))
    if isinstance(node, Name):
        return env[node.name]
    if isinstance(node, Linear):
        return g.combine([(float(c), _expr(g, t, env)) for c, t in node.terms], float(node.const))
    assert isinstance(node, Call)
    args = [_expr(g, a, env) for a in node.args]
    if node.fn in ("min", "max"):
        sign = 1.0 if node.fn == "max" else -1.0
        acc = args[0]
        for b in args[1:]:  # max(a, b) = a + relu(b − a); min(a, b) = a − relu(a − b)
            acc = g.combine([(1.0, acc), (sign, g.relu(g.combine([(sign, b), (-sign, acc)])))])
        return acc
    v = args[0]
    if node.fn == "relu":
        return g.relu(v)
    if node.fn == "abs":
        return g.combine([(1.0, g.relu(v)), (1.0, g.relu(g.combine([(-1.0, v)])))])
    if node.fn == "clip":  # lo + relu(v − lo) − relu(v − hi), lo ≤ hi
        lo, hi = float(node.params[0]), float(node.params[1])
        return g.combine(
            [
                (1.0, g.relu(g.combine([(1.0, v)], -lo))),
                (-1.0, g.relu(g.combine([(1.0, v)], -hi))),
            ],
            lo,
        )
    xs, ys = _pwl_fn(node.params)  # y0 + Σ s_k (relu(v − x_k) − relu(v − x_{k+1})): np.interp
    terms: list[tuple[float, str]] = []
    for k in range(xs.size - 1):
        s = float((ys[k + 1] - ys[k]) / (xs[k + 1] - xs[k]))
        terms.append((s, g.relu(g.combine([(1.0, v)], -float(xs[k])))))
        terms.append((-s, g.relu(g.combine([(1.0, v)], -float(xs[k + 1])))))
    return g.combine(terms, float(ys[0]))


def _step(g: _Graph, system: System, x: str, u: str, u_width: int) -> str:
    d = system.dynamics
    n = system.state_dim
    env = {name: g.cols(x, n, i, i + 1) for i, name in enumerate(d.state)}
    if d.choices is not None:  # not piecewise linear: ArgMax + Gather (docs/bnn.md)
        idx = g.op("ArgMax", [u], axis=1, keepdims=0, select_last_index=0)
        chosen = g.op("Gather", [g.const(d.choices), idx], axis=0)  # (N, len(action))
        width = len(d.action)
        env.update({name: g.cols(chosen, width, j, j + 1) for j, name in enumerate(d.action)})
    else:
        env.update({name: g.cols(u, u_width, j, j + 1) for j, name in enumerate(d.action)})
    for name, node in d.define:
        env[name] = _expr(g, node, env)
    return g.op("Concat", [_expr(g, e, env) for e in d.next], axis=1)


def closed_loop_model(
    system: System, box: WeightBox, inv: ReluNetwork, header: Header | None = None
) -> tuple[object, Layout]:
    """The ONNX model of the module docstring and its layout."""
    from onnx import TensorProto, helper

    g = _Graph()
    n = system.state_dim
    s_count = int(sum(wl.shape[1] for k, (wl, _) in enumerate(box.lower) if box.is_bayesian(k)))
    k_in = n + s_count
    x = g.cols("X", k_in, 0, n)
    s = g.cols("X", k_in, n, k_in)
    g.one = g.affine(x, np.zeros((n, 1)), 1.0)
    hull_lo = np.minimum(system.box.lo, system.step_box.lo)
    hull_hi = np.maximum(system.box.hi, system.step_box.hi)
    u, slacks, lo, hi = _policy(g, x, s, box, hull_lo, hull_hi)
    x1 = _step(g, system, x, u, int(box.lower[-1][0].shape[1]))
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
        outs.append(g.affine(x, np.vstack(mats).T, 0.0))
    outs += slacks
    y = g.op("Concat", outs, axis=1)
    g.nodes.append(helper.make_node("Identity", [y], ["Y"]))
    layout = Layout(n, np.array(lo), np.array(hi), tuple(rows), 2 * s_count)
    graph = helper.make_graph(
        g.nodes,
        "safecert_closed_loop",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, ["N", k_in])],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, ["N", layout.outputs])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    if header is not None:
        model.doc_string = "\n".join(line.removeprefix("; ") for line in header.lines())
        helper.set_model_props(
            model,
            {
                "safecert.verdict": header.verdict,
                "safecert.epsilon": header.epsilon,
                "safecert.margin": _num(header.margin),
            },
        )
    return model, layout


# ---- VNN-LIB 1.0 ---------------------------------------------------------------------------------
def _num(v: float) -> str:
    """A float in positional notation (VNN-LIB 1.0 has no exponents), exact to the last digit."""
    text = np.format_float_positional(float(v), unique=True, trim="0")
    return "0.0" if text in ("0.0", "-0.0") else text


def _header(layout: Layout, title: str, header: Header | None) -> list[str]:
    lines = [f"; {title}", "; written by safecert bnn export (VNN-LIB 1.0; see docs/bnn.md)"]
    lines += header.lines() if header is not None else []
    lines += [f"(declare-const X_{i} Real)" for i in range(layout.inputs)]
    lines += [f"(declare-const Y_{j} Real)" for j in range(layout.outputs)]
    return lines


def _inputs(layout: Layout, lo: np.ndarray, hi: np.ndarray) -> list[str]:
    """The state box, the pre-activation inputs' bounds and the slack outputs ``≥ 0``."""
    lows = np.concatenate([lo, layout.s_lo])
    highs = np.concatenate([hi, layout.s_hi])
    out = []
    for i, (a, b) in enumerate(zip(lows, highs, strict=True)):
        out += [f"(assert (>= X_{i} {_num(a)}))", f"(assert (<= X_{i} {_num(b)}))"]
    out += [f"(assert (>= Y_{layout.first_slack + j} 0.0))" for j in range(layout.slacks)]
    return out


def vnnlib_files(
    system: System, layout: Layout, margin: float, header: Header | None = None
) -> dict[str, str]:
    """File name → VNN-LIB 1.0 text of each condition's violation, relaxed by ``margin`` exactly
    as the engine's MILP (module docstring)."""
    if not margin >= 0:
        raise ConfigError(f"margin must be ≥ 0, got {margin}", field="margin", fix="e.g. 1e-6")
    n, m = layout.n, margin
    files: dict[str, str] = {}
    b = system.box
    lines = _header(
        layout,
        f"closure violated (margin {_num(m)}): g(x) >= -m and (g(x') <= m or x' outside B)",
        header,
    )
    lines += _inputs(layout, system.step_box.lo, system.step_box.hi)
    lines.append(f"(assert (>= Y_0 {_num(-m)}))")
    alts = [f"(and (<= Y_1 {_num(m)}))"]
    for i in range(n):
        alts.append(f"(and (>= Y_{2 + i} {_num(b.hi[i] - m)}))")
        alts.append(f"(and (<= Y_{2 + i} {_num(b.lo[i] + m)}))")
    lines.append(f"(assert (or {' '.join(alts)}))")
    files["closure.vnnlib"] = "\n".join(lines) + "\n"
    for which, region, cond in (
        ("initial", system.initial, f"(assert (<= Y_0 {_num(m)}))"),
        ("unsafe", system.unsafe, f"(assert (>= Y_0 {_num(-m)}))"),
    ):
        for k, piece in enumerate(region.pieces):
            lines = _header(layout, f"{which} piece {k} violated (margin {_num(m)})", header)
            lines += _inputs(layout, piece.box.lo, piece.box.hi)
            lines += _row_constraints(layout, which, k, piece, m)
            lines.append(cond)
            files[f"{which}_{k}.vnnlib"] = "\n".join(lines) + "\n"
    return files


def _row_constraints(layout: Layout, which: str, k: int, piece: Piece, m: float) -> list[str]:
    for w, p, first, count in layout.rows:
        if (w, p) == (which, k):
            return [
                f"(assert (<= Y_{2 + layout.n + first + j} {_num(piece.rows.b[j] + m)}))"
                for j in range(count)
            ]
    return []


@dataclass(frozen=True)
class Claim:
    """What a ``bnn`` certificate claims: its system, weight box, invariant, verdict and margin."""

    system: System
    box: WeightBox
    invariant: ReluNetwork
    header: Header


def export(claim: Claim, out: Path, *, force: bool = False) -> list[Path]:
    """Write ``closed_loop.onnx`` and the VNN-LIB files into ``out``; returns their paths.

    A claim whose verdict is not SAFE is refused (one DataError line) unless ``force``; its files
    then say so in their headers."""
    if claim.header.verdict != "SAFE" and not force:
        raise DataError(
            f"the certificate's verdict is {claim.header.verdict}: it claims nothing, and its "
            "exported queries may be satisfiable",
            field="certificate.verdict",
            fix="export a SAFE certificate, or pass --force (every file then states the verdict)",
        )
    try:
        import onnx
    except ImportError:
        raise ConfigError(
            "export needs the onnx package", field="export", fix="pip install 'safecert[bnn]'"
        ) from None
    from safecert.document import durable_write

    model, layout = closed_loop_model(claim.system, claim.box, claim.invariant, claim.header)
    onnx.checker.check_model(model)  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    paths = [durable_write(out / "closed_loop.onnx", model.SerializeToString())]  # type: ignore[attr-defined]
    texts = vnnlib_files(claim.system, layout, claim.header.margin, claim.header)
    for name, text in texts.items():
        paths.append(durable_write(out / name, text.encode()))
    return paths


def certificate_claim(cert_path: Path, data_dir: Path | None = None) -> Claim:
    """The system, weight box, invariant and verdict a ``bnn`` certificate claims (from its
    parameters, its policy copy and its ``result``); one DataError line when it has no invariant."""
    from safecert.audit import Evidence
    from safecert.bnn.check import parameters_config, policy_copy, sigma_network
    from safecert.bnn.config import bayesian_spec
    from safecert.bnn.networks import read_policy_file
    from safecert.bnn.spec import Epsilon
    from safecert.bnn.system import build_system
    from safecert.certificate import BnnCertificate, read_certificate

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
    evidence = Evidence(Path(cert_path), data_dir=data_dir)
    box = bayesian_spec(cfg, mean, sigma_network(cfg, cert, evidence, None)).box(mean, eps)
    inv = ReluNetwork.from_lists(
        [layer.model_dump() for layer in r.invariant.layers], name="certificate.result.invariant"
    )
    unit = "sigma" if r.epsilon.unit == "sigma" else ""
    header = Header(
        cert.verdict, f"{_num(r.epsilon.value)}{unit}", r.verifier_margin, Path(cert_path).name
    )
    return Claim(system, box, inv, header)
