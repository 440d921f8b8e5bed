"""The invariant network g of a positive-invariant certificate (METHODS.md §4, Def. 1).

``Inv = {x ∈ X : g(x) ≥ 0}`` for a deterministic ReLU network ``g : R^d → R``. The learner trains
:class:`InvariantNet` (torch, float64); the verifier and the certificate use its exact export
:meth:`InvariantNet.layers` — plain float64 ``(W, b)`` pairs in Keras layout (``z = x @ W + b``, ReLU
after every layer but the last) with the input normalisation folded into the first layer, so that
what is verified is exactly what is stored. This module imports torch; the command line imports it
lazily.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch

from safecert.errors import DataError

Layers = list[tuple[np.ndarray, np.ndarray]]


class InvariantNet(torch.nn.Module):
    """Torch ReLU network ``g`` (float64) with a fixed affine input normalisation.

    ``forward(x)`` returns ``g(x)`` with shape ``(B,)``. Inputs are mapped to ``(x − c)/h`` with
    ``c, h`` the centre and half-width of the state box — a constant, not trained, folded into the
    first layer by :meth:`layers`. Initial weights come from ``generator`` (uniform ±1/√fan_in,
    PyTorch's default range), so the same seed gives the same network.

    Example::

        g = InvariantNet(2, [12], low=[-1.2, -1.2], high=[1.2, 1.2], seed=0)
        layers = g.layers()          # [(W0 (2,12), b0 (12,)), (W1 (12,1), b1 (1,))]
    """

    def __init__(
        self,
        state_dim: int,
        hidden: Sequence[int],
        *,
        low: Sequence[float] | np.ndarray,
        high: Sequence[float] | np.ndarray,
        seed: int = 0,
    ) -> None:
        super().__init__()
        lo = np.asarray(low, dtype=np.float64).reshape(-1)
        hi = np.asarray(high, dtype=np.float64).reshape(-1)
        if lo.shape != (state_dim,) or hi.shape != (state_dim,) or np.any(hi <= lo):
            raise DataError(
                f"state box low={lo.tolist()} high={hi.tolist()} does not fit dimension "
                f"{state_dim}",
                field="invariant.box",
                fix="give low < high with one entry per state variable",
            )
        if not hidden or any(int(h) < 1 for h in hidden):
            raise DataError(
                f"hidden widths {list(hidden)} invalid",
                field="invariant.hidden",
                fix="give one or more positive widths, e.g. [12]",
            )
        self.state_dim = int(state_dim)
        self.hidden = tuple(int(h) for h in hidden)
        self.register_buffer("in_center", torch.tensor((lo + hi) / 2.0, dtype=torch.float64))
        self.register_buffer("in_scale", torch.tensor((hi - lo) / 2.0, dtype=torch.float64))
        widths = [self.state_dim, *self.hidden, 1]
        self.linears = torch.nn.ModuleList(
            torch.nn.Linear(a, b, dtype=torch.float64)
            for a, b in zip(widths, widths[1:], strict=False)
        )
        gen = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            for lin in self.linears:
                bound = 1.0 / np.sqrt(lin.in_features)
                lin.weight.uniform_(-bound, bound, generator=gen)
                lin.bias.uniform_(-bound, bound, generator=gen)

    @property
    def low(self) -> np.ndarray:
        return (self.in_center - self.in_scale).detach().numpy().copy()

    @property
    def high(self) -> np.ndarray:
        return (self.in_center + self.in_scale).detach().numpy().copy()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.in_center) / self.in_scale
        last = len(self.linears) - 1
        for i, lin in enumerate(self.linears):
            z = lin(z)
            if i < last:
                z = torch.relu(z)
        return z[..., 0]

    def layers(self) -> Layers:
        """The exact float64 ``(W, b)`` layers (Keras layout) with the normalisation folded in."""
        out: Layers = []
        c = self.in_center.detach().numpy()
        h = self.in_scale.detach().numpy()
        for i, lin in enumerate(self.linears):
            w = lin.weight.detach().numpy().T.copy()  # (in, out)
            b = lin.bias.detach().numpy().copy()
            if i == 0:
                b = b - (c / h) @ w
                w = w / h[:, None]
            out.append((w, b))
        return out

    def clone(self) -> InvariantNet:
        """A deep copy: warm starts never share parameters with the network they start from."""
        return copy.deepcopy(self)


def evaluate_layers(layers: Layers, x: np.ndarray) -> np.ndarray:
    """``g(x)`` in float64 NumPy from exported layers, for a batch ``x`` of shape ``(B, d)``."""
    z = np.asarray(x, dtype=np.float64)
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        z = z @ w + b
        if i < last:
            z = np.maximum(z, 0.0)
    return z[..., 0]


def layers_to_json(layers: Layers) -> list[dict[str, list]]:
    """Layers as JSON lists ``[{"W": [[…]], "b": […]}, …]`` (exact float64 via repr round trip)."""
    return [{"W": np.asarray(w).tolist(), "b": np.asarray(b).tolist()} for w, b in layers]


def layers_from_json(data: object) -> Layers:
    """Inverse of :func:`layers_to_json`, with shape checks (one :class:`DataError` line)."""
    if not isinstance(data, list) or not data:
        raise DataError("invariant layers missing", field="result.invariant.layers")
    layers: Layers = []
    prev: int | None = None
    for i, item in enumerate(data):
        try:
            w = np.asarray(item["W"], dtype=np.float64)
            b = np.asarray(item["b"], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            raise DataError(
                f"layer {i} is not {{'W': matrix, 'b': vector}}",
                field=f"result.invariant.layers.{i}",
            ) from None
        if w.ndim != 2 or b.shape != (w.shape[1],) or (prev is not None and w.shape[0] != prev):
            raise DataError(
                f"layer {i} has shapes W{w.shape} b{b.shape}",
                field=f"result.invariant.layers.{i}",
                fix="regenerate the certificate",
            )
        prev = w.shape[1]
        layers.append((w, b))
    if prev != 1:
        raise DataError(
            f"the last layer has {prev} outputs, not 1", field="result.invariant.layers"
        )
    return layers
