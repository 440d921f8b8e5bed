"""Rejection sampling and safe exploration (docs/methods.md; paper §4.2 "Safety via rejection
sampling", §4.4 and Alg. 2).

A certificate for ``W_ε`` says: every trajectory whose weights stay in the box avoids ``X_u``
forever. :class:`SafeBNNPolicy` makes the BNN obey that premise: it draws weights from the
posterior ``N(μ, σ²)`` and executes only draws inside ``W_ε``. The posterior is mean-field (every
weight independent), so rejecting a whole draw until it lies in the box and redrawing each weight
until it lies in its own interval give the *same* distribution (the product of truncated normals);
the second costs ``1/P(|N(0,σ)| ≤ ε)`` draws per weight instead of ``1/Π_i P(…)`` per network,
which for the ``*_all`` networks (80+ Bayesian weights) is the difference between milliseconds and
never. Either way the policy reports the joint acceptance rate — the fraction of raw posterior
draws that already lay in the box — next to its closed form ``Π_i P(|N(0, σ_i)| ≤ ε_i)``.

:func:`safe_exploration` is Alg. 2: roll out with rejection sampling, take a gradient step on the
means, project the means back into ``[μ_prev − ε, μ_prev + ε]``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import erf, ndtr, ndtri

from safecert.bnn.networks import ReluNetwork
from safecert.bnn.spec import BayesianSpec, WeightBox
from safecert.errors import ConfigError

if TYPE_CHECKING:
    from safecert.bnn.dynamics import System

log = logging.getLogger(__name__)

#: batched layers: kernels ``(n, in, out)`` and biases ``(n, out)``
BatchedLayers = list[tuple[np.ndarray, np.ndarray]]


def batched_forward(layers: BatchedLayers, x: np.ndarray) -> np.ndarray:
    """Row ``j`` of ``x`` (shape ``(n, in)``) through network ``j`` of ``layers`` (float64); a
    2-D kernel or 1-D bias is shared by all rows."""
    a = np.asarray(x, dtype=np.float64)
    last = len(layers) - 1
    for k, (w, b) in enumerate(layers):
        a = (a @ w if w.ndim == 2 else np.einsum("ni,nio->no", a, w)) + b
        if k < last:
            a = np.maximum(a, 0.0)
    return a


def network_at(layers: BatchedLayers, j: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``j``-th network of a batch (shared entries returned as they are)."""
    return [(w if w.ndim == 2 else w[j], b if b.ndim == 1 else b[j]) for w, b in layers]


def _stds(spec: BayesianSpec, mean: ReluNetwork) -> list[tuple[np.ndarray, np.ndarray]]:
    """Posterior σ of every kernel and bias entry (0 where the weight is deterministic): one σ
    per layer or one per weight (:meth:`BayesianSpec.stds`)."""
    return spec.stds(mean)


def acceptance_probability(box: WeightBox, spec: BayesianSpec) -> float:
    """Closed form ``Π_i P(|N(0, σ_i)| ≤ ε_i)`` over the Bayesian weights (ε_i = box half-width),
    i.e. the chance that one raw posterior draw lies in ``box``."""
    log_p = 0.0
    for (sw, sb), (wl, bl), (wu, bu) in zip(
        _stds(spec, box.mean), box.lower, box.upper, strict=True
    ):
        for s, lo, hi in ((sw, wl, wu), (sb, bl, bu)):
            sel = s > 0
            if np.any(sel):
                half = (hi[sel] - lo[sel]) / 2.0
                p = erf(half / (s[sel] * math.sqrt(2.0)))
                if np.any(p <= 0.0):
                    return 0.0
                log_p += float(np.sum(np.log(p)))
    return math.exp(log_p)


class SafeBNNPolicy:
    """A BNN policy that only executes weights inside a certified box ``W_ε``.

    Every call of :meth:`act` draws one fresh weight vector per row of ``x`` from the posterior
    ``N(μ, σ²)`` conditioned on ``W_ε`` (exact truncated sampling, see the module docstring), so the
    premise of the certificate — weights stay in the box — holds at every step. Deterministic given
    ``rng``. Weights with σ = 0, or whose interval has zero width, are fixed at the mean.

    Example::

        spec = default_spec("lds"); net = load_policy("lds")
        policy = SafeBNNPolicy(spec.box(net, "1sigma"), spec, np.random.default_rng(0))
        u = policy.act(np.zeros((5, 2)))          # five actions, five weight draws
        policy.acceptance_rate                     # ≈ acceptance_probability(box, spec) = 0.0022 at 1σ
    """

    def __init__(self, box: WeightBox, spec: BayesianSpec, rng: np.random.Generator) -> None:
        if len(spec.sigma) != len(box.mean.layers):
            raise ConfigError(
                f"spec has {len(spec.sigma)} layers, the policy {len(box.mean.layers)}",
                field="bayesian.sigma",
                fix="give one σ per policy layer",
            )
        self.box = box
        self.spec = spec
        self.rng = rng
        self.stds = _stds(spec, box.mean)
        self.draws = 0  # raw posterior network draws
        self.accepted = 0  # raw draws that lay in the box as drawn

    @property
    def acceptance_rate(self) -> float:
        """Fraction of raw posterior draws that lay inside ``W_ε`` (NaN before the first draw)."""
        return self.accepted / self.draws if self.draws else float("nan")

    @property
    def expected_acceptance(self) -> float:
        return acceptance_probability(self.box, self.spec)

    def _truncated(self, mu: np.ndarray, sd: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int):
        """``n`` draws of N(mu, sd²) conditioned on [lo, hi] per entry, and whether each draw lay
        inside as drawn. An entry outside its interval is replaced by an inverse-CDF draw of the
        truncated normal, which is the distribution rejection would end with."""
        x = mu + sd * self.rng.standard_normal((n, *mu.shape))
        bad = (x < lo) | (x > hi)
        first_ok = ~bad.reshape(n, -1).any(axis=1)
        idx = np.nonzero(bad)
        if idx[0].size:
            m, s, a, b = (arr[idx[1:]] for arr in (mu, sd, lo, hi))
            pa, pb = ndtr((a - m) / s), ndtr((b - m) / s)
            u = pa + (pb - pa) * self.rng.uniform(size=idx[0].size)
            x[idx] = np.clip(m + s * ndtri(u), a, b)
        return x, first_ok

    def sample(self, n: int) -> BatchedLayers:
        """``n`` weight vectors from the posterior conditioned on ``W_ε`` (each inside the box).
        Deterministic entries are returned unbatched (a shared ``(in, out)`` kernel)."""
        out: BatchedLayers = []
        ok = np.ones(n, dtype=bool)
        for (w, b), (sw, sb), (wl, bl), (wu, bu) in zip(
            self.box.mean.layers, self.stds, self.box.lower, self.box.upper, strict=True
        ):
            pair = []
            for mu, sd, lo, hi in ((w, sw, wl, wu), (b, sb, bl, bu)):
                if not np.any((sd > 0) & (hi > lo)):
                    pair.append(np.asarray(mu))
                    continue
                draw, first_ok = self._truncated(mu, np.where(hi > lo, sd, 0.0), lo, hi, n)
                ok &= first_ok
                pair.append(draw)
            out.append((pair[0], pair[1]))
        self.draws += n
        self.accepted += int(ok.sum())
        return out

    def act(self, x: np.ndarray) -> np.ndarray:
        """Raw policy outputs for states ``x`` of shape ``(n, d)``, one fresh weight draw per row."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        return batched_forward(self.sample(len(x)), x)


def sample_box_weights(box: WeightBox, rng: np.random.Generator, n: int) -> BatchedLayers:
    """``n`` weight vectors from ``box`` for falsification, in four equal parts: uniform in the
    box, random vertices (every weight at ``μ ± ε``), the lower corner and the upper corner (for
    non-negative layer inputs, as after a ReLU, the corners give the extreme outputs of a layer).
    Not a posterior: these look for counterexamples."""
    q = n // 4
    out: BatchedLayers = []
    for (wl, bl), (wu, bu) in zip(box.lower, box.upper, strict=True):
        pair = []
        for lo, hi in ((wl, wu), (bl, bu)):
            u = rng.uniform(size=(n, *lo.shape))
            u[q : 2 * q] = rng.integers(0, 2, size=(q, *lo.shape))
            u[2 * q : 3 * q] = 0.0
            u[3 * q :] = 1.0
            pair.append(lo + (hi - lo) * u)
        out.append((pair[0], pair[1]))
    return out


@dataclass(frozen=True)
class ClosedLoopResult:
    """Monte-Carlo closed loop: ``steps`` transitions of ``n`` parallel trajectories."""

    states: np.ndarray  # (steps + 1, n, d)
    unsafe: np.ndarray  # (steps + 1, n) bool
    acceptance_rate: float

    @property
    def transitions(self) -> int:
        return int((self.states.shape[0] - 1) * self.states.shape[1])

    @property
    def unsafe_states(self) -> int:
        return int(self.unsafe.sum())

    @property
    def reached_unsafe(self) -> np.ndarray:
        """Per trajectory: did it ever visit ``X_u``?"""
        return np.asarray(self.unsafe.any(axis=0))


def closed_loop(
    bench: System,
    policy: SafeBNNPolicy,
    x0: np.ndarray,
    steps: int,
    stop: Callable[[], bool] | None = None,
) -> ClosedLoopResult:
    """Run ``x_{t+1} = f(x_t, π_{w_t}(x_t))`` from each row of ``x0`` with fresh weights ``w_t``
    from ``policy`` at every step (vectorised across trajectories) and mark unsafe states.
    ``stop`` (a wall-clock guard), asked before every step, ends the rollouts early."""
    xs = [np.asarray(x0, dtype=np.float64)]
    for _ in range(int(steps)):
        if stop is not None and stop():
            break
        xs.append(bench.step(xs[-1], policy.act(xs[-1])))
    states = np.stack(xs)
    return ClosedLoopResult(states, bench.in_unsafe(states), policy.acceptance_rate)


def project_means(layers: list[tuple[np.ndarray, np.ndarray]], box: WeightBox) -> ReluNetwork:
    """Projection of proposed means onto ``box`` = ``[μ_prev − ε, μ_prev + ε]`` (elementwise clip;
    the Euclidean projection onto a box). Deterministic weights (zero-width intervals) stay put."""
    return box.mean.with_layers(
        [
            (np.clip(w, wl, wu), np.clip(b, bl, bu))
            for (w, b), (wl, bl), (wu, bu) in zip(layers, box.lower, box.upper, strict=True)
        ]
    )


#: ``gradient(mean, result) -> per-layer (dW, db)`` of the objective to *minimise*
Gradient = Callable[[ReluNetwork, ClosedLoopResult], list[tuple[np.ndarray, np.ndarray]]]
#: ``certify(mean) -> box`` — a certified weight box around ``mean`` (e.g. from the ε search)
Certify = Callable[[ReluNetwork], WeightBox | None]


@dataclass(frozen=True)
class ExplorationStep:
    """One iteration of Alg. 2: the means rolled out, their certified box, the projected update."""

    mean: ReluNetwork
    next_mean: ReluNetwork
    box: WeightBox
    unsafe_states: int
    acceptance_rate: float


def safe_exploration(
    bench: System,
    spec: BayesianSpec,
    mean: ReluNetwork,
    certify: Certify,
    gradient: Gradient,
    *,
    learning_rate: float,
    iterations: int,
    rollouts: int,
    steps: int,
    rng: np.random.Generator,
) -> list[ExplorationStep]:
    """Alg. 2 (Appendix B). Each iteration: ``box ← certify(μ_{i−1})`` (stop if none); collect
    ``rollouts`` trajectories from ``X0`` with :class:`SafeBNNPolicy` on that box; take
    ``μ_i = μ_{i−1} − α ∇`` and project it into the box. Guarantee: every executed weight lay in a
    certified box, and every ``μ_i`` lies in the box certified for ``μ_{i−1}``."""
    history: list[ExplorationStep] = []
    for i in range(int(iterations)):
        box = certify(mean)
        if box is None:
            log.info("safe exploration: no certified box for iteration %d; stopping", i)
            break
        policy = SafeBNNPolicy(box, spec, rng)
        result = closed_loop(bench, policy, bench.sample_initial(rng, rollouts), steps)
        grads = gradient(mean, result)
        proposal = [
            (w - learning_rate * gw, b - learning_rate * gb)
            for (w, b), (gw, gb) in zip(mean.layers, grads, strict=True)
        ]
        projected = project_means(proposal, box)
        history.append(
            ExplorationStep(mean, projected, box, result.unsafe_states, result.acceptance_rate)
        )
        mean = projected
    return history
