"""Bayesian weight specifications, ε and the weight box W_ε (docs/methods.md).

A :class:`BayesianSpec` says which layers carry Bayesian weights, the posterior standard deviation
σ of each layer, and whether biases are Bayesian too. Given a mean network and an
:class:`Epsilon` (absolute, or in units of σ as in the paper's Table 1), :meth:`BayesianSpec.box`
returns the :class:`WeightBox` ``W_ε = Π [μ − ε_k, μ + ε_k]`` (ε_k = ε·σ_k when ε is in σ).

Example::

    net = load_policy("lds")                 # the published mean weights
    spec = default_spec("lds")               # σ = 0.1, Bayesian from the second layer on
    box = spec.box(net, parse_epsilon("1.5sigma"))
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from safecert.bnn.networks import Layer, ReluNetwork, load_policy
from safecert.errors import ConfigError

_EPS_RE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(sigma|σ|s)?\s*$")


@dataclass(frozen=True)
class Epsilon:
    """Half-width of the weight box: ``value`` absolute, or ``value`` × σ_k per layer."""

    value: float
    in_sigma: bool

    def for_layer(self, sigma: float) -> float:
        return self.value * sigma if self.in_sigma else self.value

    def __str__(self) -> str:
        return f"{self.value:g}sigma" if self.in_sigma else f"{self.value:g}"


#: a weight box wider than this (absolute, or in σ) makes every bound overflow: refused at the door
MAX_EPSILON = 1e6


def parse_epsilon(text: str | float | Epsilon) -> Epsilon:
    """``"1.5sigma"``, ``"1.5σ"`` → 1.5 σ; ``"0.02"`` or ``0.02`` → absolute. Must be ≥ 0."""
    if isinstance(text, Epsilon):
        return text
    if isinstance(text, int | float):
        value, in_sigma = float(text), False
    else:
        m = _EPS_RE.match(str(text))
        if m is None:
            raise ConfigError(
                f"cannot read epsilon {text!r}",
                field="epsilon",
                fix='write a number ("0.05") or "1.5sigma"',
            )
        value, in_sigma = float(m.group(1)), m.group(2) is not None
    if not np.isfinite(value) or value < 0:
        raise ConfigError(
            f"epsilon must be finite and ≥ 0, got {text!r}",
            field="epsilon",
            fix="a weight box half-width, e.g. 0.1 or 1.5sigma",
        )
    if value > MAX_EPSILON:
        raise ConfigError(
            f"epsilon {value:g} is above the limit {MAX_EPSILON:g} (no MILP is meaningful there)",
            field="epsilon",
            fix="use e.g. 1.5sigma",
        )
    return Epsilon(value, in_sigma)


@dataclass(frozen=True)
class WeightBox:
    """``lower[k] ≤ (W_k, b_k) ≤ upper[k]`` elementwise; ``mean`` is the network it surrounds.

    A layer is *Bayesian* in the box when some of its entries have ``lower < upper``.
    """

    mean: ReluNetwork
    lower: tuple[Layer, ...]
    upper: tuple[Layer, ...]

    def is_bayesian(self, k: int) -> bool:
        (wl, bl), (wu, bu) = self.lower[k], self.upper[k]
        return bool(np.any(wl < wu) or np.any(bl < bu))

    def contains(self, layers: Sequence[Layer], atol: float = 0.0) -> bool:
        """True when every weight lies in the box (up to ``atol``)."""
        for (w, b), (wl, bl), (wu, bu) in zip(layers, self.lower, self.upper, strict=True):
            if (
                np.any(w < wl - atol)
                or np.any(w > wu + atol)
                or np.any(b < bl - atol)
                or np.any(b > bu + atol)
            ):
                return False
        return True

    @staticmethod
    def point(net: ReluNetwork) -> WeightBox:
        """The degenerate box {net} (a deterministic network)."""
        return WeightBox(net, net.layers, net.layers)

    def sample_uniform(self, rng: np.random.Generator) -> list[Layer]:
        """Weights drawn uniformly from the box (for brute-force checks)."""
        return [
            (rng.uniform(wl, wu), rng.uniform(bl, bu))
            for (wl, bl), (wu, bu) in zip(self.lower, self.upper, strict=True)
        ]


@dataclass(frozen=True)
class BayesianSpec:
    """Posterior σ per layer, which layers are Bayesian, and whether their biases are.

    ``weights`` (optional): one σ **per weight** — ``(σ_W, σ_b)`` per layer, the policy's shapes —
    as a BNN trained by variational inference has; it replaces ``sigma`` in the Bayesian layers
    (``sigma`` then holds each layer's largest σ, for reports). In σ units the box is then
    ``μ_i ± ε·σ_i`` entry by entry; an absolute ε is ``±ε`` on every entry with ``σ_i > 0``.

    Example::

        spec = BayesianSpec.per_weight(net, [(0.1 * np.ones_like(w), 0 * b) for w, b in net.layers],
                                       bayesian_layers=(False, True))
        box = spec.box(net, "1sigma")
    """

    sigma: tuple[float, ...]
    bayesian_layers: tuple[bool, ...]
    bayesian_biases: bool = False
    weights: tuple[Layer, ...] | None = field(default=None, compare=False)

    @classmethod
    def per_weight(
        cls,
        mean: ReluNetwork,
        sigmas: Sequence[Layer],
        bayesian_layers: Sequence[bool],
        biases: bool = False,
    ) -> BayesianSpec:
        """A spec with one σ per weight (``sigmas``: ``(σ_W, σ_b)`` per layer, shaped as
        ``mean``); one ConfigError line for a wrong shape, a negative or non-finite σ."""
        if len(sigmas) != len(mean.layers):
            raise ConfigError(
                f"{len(sigmas)} σ layers for a {len(mean.layers)}-layer policy",
                field="bayesian.sigma_file",
                fix="give σ_W, σ_b for every layer",
            )
        out: list[Layer] = []
        for k, ((sw, sb), (w, b)) in enumerate(zip(sigmas, mean.layers, strict=True)):
            sw, sb = np.asarray(sw, dtype=np.float64), np.asarray(sb, dtype=np.float64)
            if sw.shape != w.shape or sb.shape != b.shape:
                raise ConfigError(
                    f"layer {k}: σ shapes {sw.shape}, {sb.shape}, weights {w.shape}, {b.shape}",
                    field="bayesian.sigma_file",
                    fix="σ per weight, shaped as the policy's layers",
                )
            if not (np.all(np.isfinite(sw)) and np.all(np.isfinite(sb))) or (
                np.any(sw < 0) or np.any(sb < 0)
            ):
                raise ConfigError(
                    f"layer {k}: σ must be finite and ≥ 0",
                    field="bayesian.sigma_file",
                    fix="standard deviations, not log-variances",
                )
            out.append((sw, sb))
        flags = tuple(bool(f) for f in bayesian_layers)
        top = tuple(
            float(max(sw.max(initial=0.0), sb.max(initial=0.0) if biases else 0.0)) if f else 0.0
            for (sw, sb), f in zip(out, flags, strict=True)
        )
        return cls(top, flags, biases, tuple(out))

    def stds(self, mean: ReluNetwork) -> list[Layer]:
        """The posterior σ of every kernel and bias entry (0 where the weight is deterministic)."""
        self._check(mean)
        out: list[Layer] = []
        for k, (w, b) in enumerate(mean.layers):
            if self.weights is not None:
                sw, sb = self.weights[k]
                if not self.bayesian_layers[k]:
                    sw = np.zeros(w.shape)
                out.append(
                    (
                        sw,
                        sb
                        if self.bayesian_layers[k] and self.bayesian_biases
                        else np.zeros(b.shape),
                    )
                )
                continue
            s = self.sigma[k] if self.bayesian_layers[k] else 0.0
            sb_ = s if self.bayesian_biases else 0.0
            out.append((np.full(w.shape, s), np.full(b.shape, sb_)))
        return out

    def half_widths(self, mean: ReluNetwork, epsilon: Epsilon | str | float) -> list[Layer]:
        """The box's half-width of every kernel and bias entry at ``epsilon``."""
        eps = parse_epsilon(epsilon)
        if self.weights is None:
            out: list[Layer] = []
            for k, (w, b) in enumerate(mean.layers):
                e = eps.for_layer(self.sigma[k]) if self.bayesian_layers[k] else 0.0
                eb = e if self.bayesian_biases else 0.0
                out.append((np.full(w.shape, e), np.full(b.shape, eb)))
            return out
        return [
            (
                eps.value * sw if eps.in_sigma else np.where(sw > 0, eps.value, 0.0),
                eps.value * sb if eps.in_sigma else np.where(sb > 0, eps.value, 0.0),
            )
            for sw, sb in self.stds(mean)
        ]

    def __post_init__(self) -> None:
        if len(self.sigma) != len(self.bayesian_layers):
            raise ConfigError(
                f"{len(self.sigma)} sigmas for {len(self.bayesian_layers)} layers",
                field="bayesian.sigma",
                fix="give one σ per layer",
            )
        if any((not np.isfinite(s)) or s < 0 for s in self.sigma):
            raise ConfigError(
                f"σ must be finite and ≥ 0, got {self.sigma}",
                field="bayesian.sigma",
                fix="use e.g. 0.1",
            )

    @classmethod
    def from_first_bayesian(
        cls, n_layers: int, sigma: float, first: int, biases: bool = False
    ) -> BayesianSpec:
        """Layers ``first, first+1, …`` Bayesian with one σ (the paper's setups)."""
        flags = tuple(k >= first for k in range(n_layers))
        return cls(tuple(sigma if f else 0.0 for f in flags), flags, biases)

    def _check(self, net: ReluNetwork) -> None:
        if len(self.sigma) != len(net.layers):
            raise ConfigError(
                f"spec has {len(self.sigma)} layers, network has {len(net.layers)}",
                field="bayesian.sigma",
                fix="give one σ per network layer",
            )

    def box(self, mean: ReluNetwork, epsilon: Epsilon | str | float) -> WeightBox:
        """``W_ε``: ``μ ± ε_k`` on Bayesian kernels (and biases when ``bayesian_biases``)."""
        self._check(mean)
        eps = parse_epsilon(epsilon)
        lower: list[Layer] = []
        upper: list[Layer] = []
        if self.weights is not None:
            for (w, b), (hw, hb) in zip(mean.layers, self.half_widths(mean, eps), strict=True):
                lower.append((w - hw, b - hb))
                upper.append((w + hw, b + hb))
            return WeightBox(mean, tuple(lower), tuple(upper))
        for k, (w, b) in enumerate(mean.layers):  # one σ per layer: scalars, as before
            e = eps.for_layer(self.sigma[k]) if self.bayesian_layers[k] else 0.0
            eb = e if self.bayesian_biases else 0.0
            lower.append((w - e, b - eb))
            upper.append((w + e, b + eb))
        return WeightBox(mean, tuple(lower), tuple(upper))

    def sample(self, mean: ReluNetwork, rng: np.random.Generator) -> list[Layer]:
        """One draw of the weights from the Gaussian posterior N(μ, σ_k²) on the Bayesian parts."""
        self._check(mean)
        out: list[Layer] = []
        for k, ((w, b), (sw, sb)) in enumerate(zip(mean.layers, self.stds(mean), strict=True)):
            if self.bayesian_layers[k]:
                w = w + (self.sigma[k] if self.weights is None else sw) * rng.standard_normal(
                    w.shape
                )
                if self.bayesian_biases:
                    b = b + (self.sigma[k] if self.weights is None else sb) * rng.standard_normal(
                        b.shape
                    )
            out.append((np.array(w), np.array(b)))
        return out


def default_spec(name: str) -> BayesianSpec:
    """The published experiments' spec: kernels only; σ = 0.1 from the second layer on
    (``lds``, ``pend``, ``car``); σ = 0.05 after the fixed ``[I, −I]`` layer (``*_all``)."""
    net = load_policy(name)
    sigma = 0.05 if name.endswith("_all") else 0.1
    return BayesianSpec.from_first_bayesian(len(net.layers), sigma, first=1)
