"""Anytime-valid (time-uniform) Hoeffding boundaries by stitching over geometric epochs.

For a martingale S_n = Σ_{i ≤ n} (X_i − μ) with increments in an interval of length 1 (e.g.
indicators 1[s'_i ∈ A] − P(A) of a kernel row's successive visits, collected by any closed loop),
Hoeffding's lemma makes ``exp(λ S_n − λ² n / 8)`` a non-negative supermartingale for every fixed
λ > 0, and Ville's inequality gives

    P( ∃ n ≥ 1 : S_n ≥ L / λ + λ n / 8 ) ≤ e^{−L}.

Stitching (Howard, Ramdas, McAuliffe, Sekhon 2021, "Time-uniform, nonparametric,
nonasymptotic confidence sequences", Sec. 3): epoch j = 0, 1, 2, … covers n ≈ g^j (g =
:data:`GROWTH`); it gets δ_j = δ / ((j + 1)(j + 2)) (Σ_j δ_j = δ) and the line with
λ_j = sqrt(8 L_j / (g^j √g)), L_j = ln(1/δ_j), tuned to the epoch's geometric centre. On the event
that no line is ever crossed (probability ≥ 1 − δ, a union over epochs), *every* line bounds S_n at
*every* n, so the deviation of the running mean is at most

    d(n) = min_j ( L_j / (λ_j n) + λ_j / 8 )

simultaneously for all n — the user may look at the estimate after every new sample and stop
whenever they like. The min over all epochs (not only the one containing n) costs nothing and
avoids a floating-point epoch assignment. Compared with a fixed-n Hoeffding bound the radius is
about 1.2–1.3× larger (n = 10 … 10^6, δ ≈ 10^-4), a price paid once for validity at every n.

Example:
    >>> from safecert.stats.anytime import anytime_deviation
    >>> round(float(anytime_deviation(1000, 0.05)), 4)
    0.0588
"""

from __future__ import annotations

import numpy as np

from safecert.errors import ConfigError

#: epoch growth ratio g (epoch j is centred on n = g^j · √g); g = 3 gives the smallest radii over
#: n = 10 … 10^6 among 1.05 … 6 (docs/methods.md §3.3b)
GROWTH = 3.0


def _epochs(n_max: float, growth: float) -> np.ndarray:
    """Epoch indices 0..J covering every n ≤ n_max with two epochs to spare (later epochs' lines
    are only steeper at n ≤ n_max, so they never attain the min)."""
    top = int(np.ceil(np.log(max(float(n_max), 1.0)) / np.log(growth))) + 3
    return np.arange(top, dtype=np.float64)


def anytime_deviation(
    n: np.ndarray | float, log_inv_delta: np.ndarray | float, growth: float = GROWTH
) -> np.ndarray:
    """d(n): with probability ≥ 1 − δ, S_n / n < d(n) for every n ≥ 1 at once (module docstring).

    ``n``: sample sizes (any shape, ≥ 0; d = ∞ at n = 0); ``log_inv_delta``: ln(1/δ) broadcast
    with ``n`` (pass logs, so tiny δ from large unions never underflow). One-sided; apply it to
    −S_n as well (with its own δ) for two sides.
    """
    if not growth > 1.0:
        raise ConfigError(f"must be > 1, got {growth}", field="growth")
    n = np.asarray(n, dtype=np.float64)
    log_inv = np.asarray(log_inv_delta, dtype=np.float64)
    if np.any(log_inv <= 0) or np.any(~np.isfinite(log_inv)):
        raise ConfigError("ln(1/delta) must be finite and > 0", field="delta")
    n, log_inv = np.broadcast_arrays(n, log_inv)
    j = _epochs(float(n.max()) if n.size else 1.0, growth)
    big_l = log_inv[..., None] + np.log((j + 1.0) * (j + 2.0))
    lam = np.sqrt(8.0 * big_l / (growth**j * np.sqrt(growth)))
    with np.errstate(divide="ignore", invalid="ignore"):
        lines = big_l / (lam * n[..., None]) + lam / 8.0
    out = lines.min(axis=-1)
    return np.where(n > 0, out, np.inf)
