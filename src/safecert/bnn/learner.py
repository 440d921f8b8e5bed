"""The learner of the CEGIS loop: fit the invariant network g to D_spec and D_ce (Alg. 1, eq. 1–2).

Loss (docs/methods.md)::

    L(g) = mean_{(x,y) ∈ D_spec} L_cls(g(x), y) + λ · mean_{(x,x') ∈ D_ce} L_ce(g(x), g(x'))
    L_cls(z, y) = z − z·y + log(1 + e^{−z})                          (logistic loss)
    L_ce(z, z') = 1[z > −m] · 1[z' < m] · L_cls(z + m, 0) · L_cls(z' − m, 1)

With margin ``m = 0`` ``L_ce`` is exactly the paper's eq. 2; the default (``[learner] margin``,
:class:`~safecert.bnn.config.LearnerSettings`) is 0.05. A positive margin keeps
a counterexample's loss alive until both points sit ``m`` away from the boundary g = 0, which stops
the verifier from finding the same counterexample again an ulp further on. The learner only
proposes candidates; soundness comes from the verifier alone.

Training is deterministic given the seed: initial weights and mini-batch order come from torch
generators seeded explicitly, and torch runs on one thread unless configured otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from safecert.bnn.config import LearnerSettings
from safecert.bnn.sampling import SafeBNNPolicy, closed_loop
from safecert.errors import DataError

if TYPE_CHECKING:  # torch loads on first use: data handling and labels need only NumPy
    import torch

    from safecert.bnn.dynamics import System
    from safecert.bnn.invariant import InvariantNet

__all__ = [
    "Learner",
    "LearnerSettings",
    "TrainingData",
    "bootstrap_labels",
    "counterexample_loss",
    "invariant_loss",
    "logistic_loss",
]

log = logging.getLogger(__name__)


def logistic_loss(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``L_cls(z, y) = z − z·y + log(1 + e^{−z})`` elementwise (numerically stable form)."""
    import torch

    return z - z * y + torch.nn.functional.softplus(-z)


def counterexample_loss(z: torch.Tensor, z_next: torch.Tensor, margin: float = 0.0) -> torch.Tensor:
    """``L_ce(z, z')`` elementwise (eq. 2; see the module docstring for the margin)."""
    import torch

    active = (z > -margin) & (z_next < margin)
    zero = torch.zeros_like(z)
    loss = logistic_loss(z + margin, zero) * logistic_loss(z_next - margin, zero + 1.0)
    return torch.where(active, loss, zero)


@dataclass
class TrainingData:
    """D_spec (states with labels 1 = inside Inv, 0 = outside) and D_ce (closure pairs x → x')."""

    spec_x: np.ndarray
    spec_y: np.ndarray
    ce_x: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    ce_next: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def __post_init__(self) -> None:
        self.spec_x = np.asarray(self.spec_x, dtype=np.float64)
        self.spec_y = np.asarray(self.spec_y, dtype=np.float64).reshape(-1)
        d = self.spec_x.shape[1]
        if self.ce_x.size == 0:
            self.ce_x = np.zeros((0, d))
            self.ce_next = np.zeros((0, d))
        if self.spec_x.shape[0] != self.spec_y.shape[0] or self.ce_x.shape != self.ce_next.shape:
            raise DataError(
                f"D_spec has {self.spec_x.shape[0]} states but {self.spec_y.shape[0]} labels",
                field="learner.data",
            )
        if not np.all(np.isin(self.spec_y, (0.0, 1.0))):
            raise DataError("labels must be 0 or 1", field="learner.data.spec_y")

    @property
    def state_dim(self) -> int:
        return int(self.spec_x.shape[1])

    def add_spec(self, x: np.ndarray, label: int) -> None:
        """Add states ``x`` (shape ``(d,)`` or ``(k, d)``) with one label to D_spec."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.state_dim)
        self.spec_x = np.concatenate([self.spec_x, x])
        self.spec_y = np.concatenate([self.spec_y, np.full(len(x), float(label))])

    def add_ce(self, x: np.ndarray, x_next: np.ndarray) -> None:
        """Add closure counterexamples ``x → x'`` to D_ce."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.state_dim)
        x_next = np.asarray(x_next, dtype=np.float64).reshape(-1, self.state_dim)
        self.ce_x = np.concatenate([self.ce_x, x])
        self.ce_next = np.concatenate([self.ce_next, x_next])

    def relabel(self, x: np.ndarray, labels: np.ndarray) -> None:
        """Give every D_spec state equal to a row of ``x`` the matching label (exact labels of a
        finite system replace older ones, e.g. those of a smaller ε)."""
        index = {tuple(row): float(v) for row, v in zip(np.asarray(x), labels, strict=True)}
        for i, row in enumerate(self.spec_x):
            v = index.get(tuple(row))
            if v is not None:
                self.spec_y[i] = v

    def copy(self) -> TrainingData:
        return TrainingData(
            self.spec_x.copy(), self.spec_y.copy(), self.ce_x.copy(), self.ce_next.copy()
        )


def invariant_loss(
    g: InvariantNet, data: TrainingData, lam: float, margin: float = 0.0
) -> torch.Tensor:
    """The full loss ``L(g)`` of eq. 1 over all of ``data`` (empty D_ce contributes 0)."""
    return _loss(g, _tensor(data.spec_x), _tensor(data.spec_y), data, lam, margin)


def _tensor(a: np.ndarray) -> torch.Tensor:
    import torch

    return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64)


def _loss(
    g: InvariantNet,
    x: torch.Tensor,
    y: torch.Tensor,
    data: TrainingData,
    lam: float,
    margin: float,
    ce: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    loss = logistic_loss(g(x), y).mean()
    if len(data.ce_x) and lam > 0:
        cx, cn = ce if ce is not None else (_tensor(data.ce_x), _tensor(data.ce_next))
        loss = loss + lam * counterexample_loss(g(cx), g(cn), margin).mean()
    return loss


def warm_up() -> None:
    """Import torch and build one Adam optimizer (its first construction imports
    ``torch._dynamo``: ≈ 2–5 CPU-s once per process). Called before an attempt's wall-clock guard
    starts, so that the guard measures the attempt's work and not these one-off imports."""
    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


class Learner:
    """Trains ``g`` on the loss of eq. 1 with Adam on mini-batches of D_spec (all of D_ce each step).

    ``fit(data, seed, init=None)`` starts from ``init`` (a warm start: ``warm_epochs`` epochs on a
    copy) or from a fresh network seeded by ``seed`` (``epochs`` epochs). Same inputs and seed, same
    network, bit for bit.
    """

    def __init__(self, settings: LearnerSettings, *, low: np.ndarray, high: np.ndarray) -> None:
        self.settings = settings
        self.low = np.asarray(low, dtype=np.float64)
        self.high = np.asarray(high, dtype=np.float64)

    def new_network(self, seed: int) -> InvariantNet:
        from safecert.bnn.invariant import InvariantNet

        return InvariantNet(
            len(self.low), self.settings.hidden, low=self.low, high=self.high, seed=seed
        )

    def fit(
        self,
        data: TrainingData,
        seed: int,
        init: InvariantNet | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> InvariantNet:
        """``stop`` (a wall-clock guard) is asked before every mini-batch; when it says so,
        training ends early and the network so far is returned (the caller reports the guard)."""
        import torch

        s = self.settings
        torch.set_num_threads(s.threads)
        g = init.clone() if init is not None else self.new_network(seed)
        epochs = s.warm_epochs if init is not None else s.epochs
        opt = torch.optim.Adam(g.parameters(), lr=s.learning_rate)
        gen = torch.Generator().manual_seed(int(seed) + 1)
        x_all, y_all = _tensor(data.spec_x), _tensor(data.spec_y)
        ce = (_tensor(data.ce_x), _tensor(data.ce_next))
        n = len(x_all)
        for _ in range(epochs):
            if stop is not None and stop():
                break
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, s.batch_size):
                if stop is not None and start and stop():
                    break
                idx = order[start : start + s.batch_size]
                opt.zero_grad()
                loss = _loss(g, x_all[idx], y_all[idx], data, s.lam, s.margin, ce)
                loss.backward()
                opt.step()
        with torch.no_grad():
            final = float(invariant_loss(g, data, s.lam, s.margin))
        log.debug(
            "learner: %d epochs, |D_spec|=%d, |D_ce|=%d, loss %.4g",
            epochs,
            n,
            len(data.ce_x),
            final,
        )
        return g


def bootstrap_labels(
    bench: System,
    policy: SafeBNNPolicy,
    rng: np.random.Generator,
    *,
    states: int,
    rollouts: int,
    horizon: int,
    stop: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Optional bootstrap of Alg. 1: ``states`` uniform states of the verification box, each
    labelled by ``rollouts`` Monte-Carlo trajectories of ``horizon`` steps with weights drawn in the
    box (``policy``). Label 0 when some trajectory visits ``X_u`` or leaves the box (such a state
    lies in no valid invariant: the label is correct), else 1 (a heuristic guess). ``stop`` (a
    wall-clock guard) is asked at every step; the rollouts end early when it says so (the caller
    reports the guard)."""
    x = bench.box.sample(rng, int(states), bench.integer)
    result = closed_loop(
        bench, policy, np.repeat(x, int(rollouts), axis=0), int(horizon), stop=stop
    )
    bad = result.unsafe.any(axis=0) | ~bench.in_box(result.states).all(axis=0)
    labels = (~bad.reshape(len(x), int(rollouts)).any(axis=1)).astype(np.float64)
    return x, np.asarray(labels)
