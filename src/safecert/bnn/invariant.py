"""The invariant network g of a positive-invariant certificate (docs/methods.md; Def. 1).

``Inv = {x ∈ X : g(x) ≥ 0}`` for a deterministic ReLU network ``g : R^d → R``. The learner trains
:class:`InvariantNet` (torch, float64); the verifier and the certificate use its exact export
:meth:`InvariantNet.layers` — plain float64 ``(W, b)`` pairs in Keras layout (``z = x @ W + b``, ReLU
after every layer but the last) with the input normalisation folded into the first layer, so that
what is verified is exactly what is stored. This module imports torch; the command line imports it
lazily.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import cast

import numpy as np
import torch

from safecert.bnn.networks import ReluNetwork
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
        g.network().forward(x)       # the same g(x) in float64 NumPy, for the verifier
    """

    in_center: torch.Tensor  # buffers (registered in __init__)
    in_scale: torch.Tensor

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
            for lin in self._linears():
                bound = 1.0 / math.sqrt(lin.in_features)
                lin.weight.uniform_(-bound, bound, generator=gen)
                lin.bias.uniform_(-bound, bound, generator=gen)

    def _linears(self) -> list[torch.nn.Linear]:
        return [cast(torch.nn.Linear, m) for m in self.linears]

    @property
    def low(self) -> np.ndarray:
        return (self.in_center - self.in_scale).detach().numpy().copy()

    @property
    def high(self) -> np.ndarray:
        return (self.in_center + self.in_scale).detach().numpy().copy()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.in_center) / self.in_scale
        last = len(self.linears) - 1
        for i, lin in enumerate(self._linears()):
            z = lin(z)
            if i < last:
                z = torch.relu(z)
        return z[..., 0]

    def layers(self) -> Layers:
        """The exact float64 ``(W, b)`` layers (Keras layout) with the normalisation folded in."""
        out: Layers = []
        c = self.in_center.detach().numpy()
        h = self.in_scale.detach().numpy()
        for i, lin in enumerate(self._linears()):
            w = lin.weight.detach().numpy().T.copy()  # (in, out)
            b = lin.bias.detach().numpy().copy()
            if i == 0:
                b = b - (c / h) @ w
                w = w / h[:, None]
            out.append((w, b))
        return out

    def network(self) -> ReluNetwork:
        """The exported ``g`` as the verifier's deterministic :class:`ReluNetwork`."""
        return ReluNetwork(self.layers(), name="invariant")

    def clone(self) -> InvariantNet:
        """A deep copy: warm starts never share parameters with the network they start from."""
        return copy.deepcopy(self)
