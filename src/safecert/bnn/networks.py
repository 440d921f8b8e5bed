"""ReLU networks in Keras layout and the six published benchmark policies (docs/methods.md).

A :class:`ReluNetwork` is a list of float64 layers ``(W, b)`` in Keras layout: ``W`` has shape
``(in, out)`` and a layer computes ``z = x @ W + b``; ReLU follows every layer but the last, whose
output is linear. Policies and invariant candidates are both ``ReluNetwork`` objects:

* a **policy** ``π`` maps a state to actions (LDS/pendulum: one output, clipped by the dynamics;
  collision avoidance: three scores, argmax);
* an **invariant candidate** ``g`` is deterministic, has exactly one output, and defines
  ``Inv = {x ∈ B : g(x) ≥ 0}`` over the benchmark's verification box ``B``.

The Bayesian specification and the weight box ``W_ε`` built around a mean network live in
:mod:`safecert.bnn.spec`.

Example::

    net = load_policy("lds")                 # the published mean weights
    net.forward(np.zeros(2))                 # array([0.069183...])
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from safecert.document import durable_write
from safecert.errors import ConfigError, DataError

Layer = tuple[np.ndarray, np.ndarray]

BENCHMARK_POLICIES = ("lds", "lds_all", "pend", "pend_all", "car", "car_all")
#: the 3-D and 4-D systems' policies (trained by ``benchmarks/bnn_scale_train.py``, issue 25.5)
SCALE_POLICIES = ("lane", "cartpole", "lane4", "reactor")


def forward(layers: Sequence[Layer], x: np.ndarray) -> np.ndarray:
    """Float64 forward pass of a ReLU network given explicit weights (Keras layout).

    ``x`` has shape ``(..., in)``; returns ``(..., out)``. ReLU after every layer but the last.
    """
    a = np.asarray(x, dtype=np.float64)
    last = len(layers) - 1
    for k, (w, b) in enumerate(layers):
        a = a @ w + b
        if k < last:
            a = np.maximum(a, 0.0)
    return a


def _as_layers(layers: Sequence[tuple[Any, Any]], *, field: str) -> tuple[Layer, ...]:
    out: list[Layer] = []
    prev: int | None = None
    for k, (w, b) in enumerate(layers):
        w = np.array(w, dtype=np.float64)
        b = np.array(b, dtype=np.float64).reshape(-1)
        if w.ndim != 2 or b.shape != (w.shape[1],):
            raise DataError(
                f"layer {k} has kernel shape {w.shape} and bias shape {b.shape}",
                field=field,
                fix="use Keras layout: kernel (in, out), bias (out,)",
            )
        if prev is not None and w.shape[0] != prev:
            raise DataError(
                f"layer {k} expects {w.shape[0]} inputs but layer {k - 1} gives {prev}",
                field=field,
                fix="chain layers so each kernel's first dimension matches the previous output",
            )
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise DataError(
                f"layer {k} holds non-finite weights", field=field, fix="retrain or re-export"
            )
        w.setflags(write=False)
        b.setflags(write=False)
        out.append((w, b))
        prev = w.shape[1]
    if not out:
        raise DataError("network has no layers", field=field, fix="give at least one (W, b) layer")
    return tuple(out)


@dataclass(frozen=True, eq=False)
class ReluNetwork:
    """A ReLU network with fixed float64 weights (read-only arrays, Keras layout).

    ``layers[k] = (W_k, b_k)`` with ``W_k`` of shape ``(in_k, out_k)``.
    """

    layers: tuple[Layer, ...]

    def __init__(self, layers: Sequence[tuple[Any, Any]], *, name: str = "network") -> None:
        object.__setattr__(self, "layers", _as_layers(layers, field=name))

    @property
    def in_dim(self) -> int:
        return int(self.layers[0][0].shape[0])

    @property
    def out_dim(self) -> int:
        return int(self.layers[-1][0].shape[1])

    @property
    def widths(self) -> tuple[int, ...]:
        """``(in, hidden..., out)``."""
        return (self.in_dim, *(int(w.shape[1]) for w, _ in self.layers))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Float64 output for states ``x`` of shape ``(..., in)``."""
        return forward(self.layers, x)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.forward(x)

    def with_layers(self, layers: Sequence[tuple[Any, Any]]) -> ReluNetwork:
        """Same architecture, other weights (checked for shape)."""
        new = ReluNetwork(layers)
        if new.widths != self.widths:
            raise DataError(
                f"widths {new.widths} differ from {self.widths}",
                field="layers",
                fix="keep the architecture",
            )
        return new

    # ---- persistence ----------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """``{"W0": …, "b0": …, …}`` — the ``.npz`` layout."""
        out: dict[str, np.ndarray] = {}
        for k, (w, b) in enumerate(self.layers):
            out[f"W{k}"] = np.array(w)
            out[f"b{k}"] = np.array(b)
        return out

    def to_lists(self) -> list[dict[str, list]]:
        """JSON-friendly weights: ``[{"W": [[…]], "b": […]}, …]`` (exact float64 round trip)."""
        return [{"W": w.tolist(), "b": b.tolist()} for w, b in self.layers]

    @classmethod
    def from_lists(cls, data: Sequence[dict[str, Any]], *, name: str = "network") -> ReluNetwork:
        """Inverse of :meth:`to_lists`."""
        try:
            return cls([(d["W"], d["b"]) for d in data], name=name)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"cannot read layers ({exc})", field=name, fix='use [{"W": …, "b": …}, …]'
            ) from exc

    def npz_bytes(self) -> bytes:
        """The ``.npz`` file of :meth:`to_arrays` as bytes (what :meth:`save_npz` writes)."""
        buf = io.BytesIO()
        np.savez(buf, **self.to_arrays())  # type: ignore[arg-type]
        return buf.getvalue()

    def save_npz(self, path: str | Path) -> None:
        """Write :meth:`npz_bytes` to ``path`` durably (a crash leaves the old file or the new)."""
        durable_write(Path(path), self.npz_bytes())

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], *, name: str = "network") -> ReluNetwork:
        n = 0
        while f"W{n}" in arrays:
            n += 1
        if n == 0 or any(f"b{k}" not in arrays for k in range(n)):
            raise DataError(
                f"keys {sorted(arrays)} are not W0, b0, W1, b1, …",
                field=name,
                fix="save as W0, b0, W1, b1, …",
            )
        return cls([(arrays[f"W{k}"], arrays[f"b{k}"]) for k in range(n)], name=name)

    @classmethod
    def from_npz(cls, path: str | Path) -> ReluNetwork:
        """Load ``W0, b0, W1, b1, …`` from an ``.npz`` file (Keras layout)."""
        path = Path(path)
        try:
            with np.load(path) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
            raise DataError(
                f"cannot read {path} ({type(exc).__name__}: {exc})",
                field="policy",
                fix="give a complete .npz with W0, b0, W1, b1, …",
            ) from None
        return cls.from_arrays(arrays, name=str(path))

    @classmethod
    def from_torch(cls, module: Any) -> ReluNetwork:
        """From a torch ``nn.Sequential`` of ``Linear`` and ``ReLU`` (ReLU between every pair of
        Linear layers, none after the last). Torch stores ``(out, in)``; we transpose."""
        import torch.nn as nn

        mods = list(module.children()) if isinstance(module, nn.Sequential) else [module]
        layers: list[tuple[np.ndarray, np.ndarray]] = []
        expect_linear = True
        for m in mods:
            if isinstance(m, nn.Linear) and expect_linear:
                w = m.weight.detach().cpu().double().numpy().T
                b = (
                    m.bias.detach().cpu().double().numpy()
                    if m.bias is not None
                    else np.zeros(w.shape[1])
                )
                layers.append((w, b))
                expect_linear = False
            elif isinstance(m, nn.ReLU) and not expect_linear:
                expect_linear = True
            else:
                raise ConfigError(
                    f"unsupported module sequence at {type(m).__name__}",
                    field="policy",
                    fix="use nn.Sequential(Linear, ReLU, Linear, …, Linear)",
                )
        if expect_linear:
            raise ConfigError(
                "network ends with ReLU", field="policy", fix="end with a Linear layer"
            )
        return cls(layers, name="torch module")

    def to_torch(self) -> Any:
        """An equivalent float64 torch ``nn.Sequential`` (for training; import is lazy)."""
        import torch
        import torch.nn as nn

        mods: list[nn.Module] = []
        for k, (w, b) in enumerate(self.layers):
            lin = nn.Linear(w.shape[0], w.shape[1]).double()
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(np.array(w.T)))
                lin.bias.copy_(torch.from_numpy(np.array(b)))
            mods.append(lin)
            if k < len(self.layers) - 1:
                mods.append(nn.ReLU())
        return nn.Sequential(*mods)

    @classmethod
    def from_onnx(cls, path: str | Path) -> ReluNetwork:
        """From an ONNX graph that is a chain ``(Linear, Relu)*, Linear`` where ``Linear`` is a
        ``Gemm`` or a ``MatMul`` followed by an ``Add``, weights as initializers (``Flatten`` and
        ``Identity`` are skipped). Any other op, or a misplaced ``Relu``, is a one-line error."""
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError:
            raise ConfigError(
                "reading .onnx policies needs the onnx package",
                field="policy",
                fix="pip install 'safecert[bnn]'",
            ) from None
        try:
            model = onnx.load(str(path))
        except Exception as exc:  # onnx raises DecodeError, OSError, … for a bad file
            raise DataError(
                f"cannot read {path} ({type(exc).__name__})",
                field="policy",
                fix="export the policy with torch.onnx.export",
            ) from None
        init = {
            t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer
        }

        def weight(node: Any, k: int) -> np.ndarray:
            if len(node.input) <= k or node.input[k] not in init:
                raise DataError(
                    f"{node.op_type} node {node.name!r} has no constant weight input {k}",
                    field="policy",
                    fix="export with weights as initializers (do_constant_folding=True)",
                )
            return init[node.input[k]]

        layers: list[tuple[np.ndarray, np.ndarray]] = []
        pending: np.ndarray | None = None
        relu_due = False  # a Relu is allowed right after a linear layer
        for node in model.graph.node:
            op = node.op_type
            if op == "Gemm" and pending is None:
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                w = weight(node, 1)
                w = w.T if attrs.get("transB", 0) else w
                if attrs.get("transA", 0):
                    raise ConfigError("Gemm with transA", field="policy", fix="export x @ W + b")
                b = weight(node, 2) if len(node.input) > 2 else np.zeros(w.shape[1])
                layers.append((w * attrs.get("alpha", 1.0), b * attrs.get("beta", 1.0)))
                relu_due = True
            elif op == "MatMul" and pending is None:
                pending = weight(node, 1)
            elif op == "Add" and pending is not None:
                layers.append((pending, weight(node, 1)))
                pending, relu_due = None, True
            elif op == "Relu" and relu_due and pending is None:
                relu_due = False
            elif op in ("Flatten", "Identity") and not layers:
                continue
            else:
                raise ConfigError(
                    f"unsupported ONNX node {op} (node {len(layers)} of the chain)",
                    field="policy",
                    fix="export a chain of Gemm (or MatMul+Add) and Relu only",
                )
        if not relu_due or pending is not None:
            raise ConfigError(
                "the ONNX graph does not end with a linear layer",
                field="policy",
                fix="end the network with Gemm (or MatMul+Add), no Relu after it",
            )
        return cls(layers, name=str(path))

    @classmethod
    def from_state_dict(cls, path: str | Path) -> ReluNetwork:
        """From a torch ``state_dict`` of an ``nn.Sequential(Linear, ReLU, …, Linear)`` saved with
        ``torch.save(model.state_dict(), path)``, read with ``weights_only=True`` (no pickled code
        runs). ``*.weight``/``*.bias`` pairs in order; ReLU between every pair of layers."""
        try:
            import torch
        except ImportError:
            raise ConfigError(
                "reading torch policies needs torch",
                field="policy",
                fix="pip install 'safecert[bnn]'",
            ) from None
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # unpickling errors of every kind
            raise DataError(
                f"cannot read {path} as a state_dict ({type(exc).__name__})",
                field="policy",
                fix="save model.state_dict() (a whole pickled module is not read: it runs code)",
            ) from None
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
        ):
            raise DataError(
                f"{path} is not a state_dict", field="policy", fix="save model.state_dict()"
            )
        names = [k.removesuffix(".weight") for k in state if k.endswith(".weight")]
        if not names or len(state) != 2 * len(names):
            raise DataError(
                f"keys {list(state)[:6]} are not weight/bias pairs",
                field="policy",
                fix="save the state_dict of nn.Sequential(Linear, ReLU, …, Linear)",
            )
        layers = []
        for n in names:
            if f"{n}.bias" not in state:
                raise DataError(f"{n}.bias is missing", field="policy", fix="use Linear(bias=True)")
            w = state[f"{n}.weight"].detach().double().numpy()
            layers.append((w.T, state[f"{n}.bias"].detach().double().numpy()))
        return cls(layers, name=str(path))


#: policy file formats by suffix (``safecert bnn verify``'s ``policy = "…"``)
POLICY_SUFFIXES = (".npz", ".onnx", ".pt", ".pth")


def read_policy_file(path: str | Path) -> ReluNetwork:
    """The mean network in ``path``: ``.npz`` (W0, b0, …), ``.onnx`` (:meth:`ReluNetwork.from_onnx`)
    or a torch ``state_dict`` (``.pt``/``.pth``, :meth:`ReluNetwork.from_state_dict`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return ReluNetwork.from_npz(path)
    if suffix == ".onnx":
        return ReluNetwork.from_onnx(path)
    if suffix in (".pt", ".pth"):
        return ReluNetwork.from_state_dict(path)
    raise ConfigError(
        f"{path.name}: unknown policy format {suffix or '(no suffix)'!r}",
        field="policy",
        fix=f"use one of {', '.join(POLICY_SUFFIXES)}",
    )


def load_policy(name: str) -> ReluNetwork:
    """One of the mean-weight policies shipped as package data: the six published ones and the
    3-D / 4-D ones (``SCALE_POLICIES``)."""
    if name not in (*BENCHMARK_POLICIES, *SCALE_POLICIES):
        raise ConfigError(
            f"unknown benchmark policy {name!r}",
            field="benchmark",
            fix=f"use one of {(*BENCHMARK_POLICIES, *SCALE_POLICIES)}",
        )
    ref = resources.files("safecert.bnn").joinpath("data", f"{name}.npz")
    with resources.as_file(ref) as path:
        return ReluNetwork.from_npz(path)
