"""How hard is a packaged 3-D / 4-D system to certify? Closed-loop probes with weights in the box.

    .venv/bin/python benchmarks/bnn_scale_probe.py --benchmark cartpole --epsilons 0.5,1

For each ε (in σ) the policy's output layer ranges over its box (mean ± ε·0.1, the only Bayesian
layer of these systems; inputs to it are ReLU outputs, so the reachable actions at ``x`` are exactly
``[h·W_lo + b, h·W_hi + b]``). Printed per ε:

* the eigenvalue moduli of the mean closed loop's Jacobian at the origin (finite differences);
* from X0 (its corners and 4000 uniform states), 400 steps with (a) a random end of the action
  interval each step and (b) the end that increases ``xᵀPx`` (``P`` the Lyapunov matrix of that
  Jacobian: a greedy adversary): the largest ``|x_i|`` / B's half-width reached, and how many left B.
  A trajectory that leaves B is a witness that no invariant exists (``safecert`` replays its own);
  an excursion well inside B says a small invariant exists in principle;
* the same from 20 000 uniform states of B: the fraction that leaves B (B itself is not invariant
  when it is > 0);
* the room an invariant has (``--x0-scales``): for X0 scaled by each factor, ``c`` the smallest
  level of ``V = xᵀPx`` whose sublevel set holds X0's corners, and the sets ``V ≤ s²c``: the largest
  ``V(x')/V(x)`` over 60 000 points of their boundary inside B (the worse end of the action
  interval). Below 1, V decreases across that boundary under every action the box allows (as far as
  the sample shows), so the band of ``s`` with ratios below 1 is the room an invariant has between
  holding X0 and closing;
* the fraction of the bootstrap's labels that are 1 (``[data] bootstrap``: 2000 states, 4 rollouts of
  60 steps) — the share of B the learner is asked to put inside the invariant.

A probe, not evidence: sampling proves nothing either way.
"""

from __future__ import annotations

import argparse
import itertools
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg as sl

from safecert.bnn.config import bayesian_spec
from safecert.bnn.learner import bootstrap_labels
from safecert.bnn.networks import load_policy
from safecert.bnn.sampling import SafeBNNPolicy
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import parse_epsilon
from safecert.bnn.system import get_benchmark

if TYPE_CHECKING:
    from collections.abc import Callable

    from safecert.bnn.dynamics import System

    Interval = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

SIGMA = 0.1


def lyapunov_band(
    bench: System, interval: Interval, p: np.ndarray, x0_scale: float, seed: int = 0
) -> list[tuple[float, float]]:
    """``(s, largest V(x')/V(x))`` on the boundary of ``{V ≤ s²c}`` inside B (module docstring)."""
    box = bench.initial.pieces[0].box
    corners = x0_scale * np.array(list(itertools.product(*zip(box.lo, box.hi, strict=True))))
    c = float(np.einsum("ij,jk,ik->i", corners, p, corners).max())
    z = np.random.default_rng(seed).standard_normal((60000, bench.state_dim))
    unit = np.linalg.solve(np.linalg.cholesky(p).T, (z / np.linalg.norm(z, axis=1)[:, None]).T).T
    out = []
    for s in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0):
        x = s * np.sqrt(c) * unit
        x = x[bench.in_box(x) & ~bench.in_unsafe(x)]
        ratio = 0.0
        if len(x):
            lo, hi = interval(x)
            v = [
                np.einsum("ij,jk,ik->i", y, p, y)
                for y in (x, *(bench.step(x, a[:, None]) for a in (lo, hi)))
            ]
            ratio = float((np.maximum(v[1], v[2]) / v[0]).max())
        out.append((s, ratio))
    return out


def probe(name: str, eps: float, seed: int = 1, x0_scales: tuple[float, ...] = (1.0,)) -> None:
    bench, net = get_benchmark(name), load_policy(name)
    (w0, b0), (w1, b1) = net.layers
    half = (bench.box.hi - bench.box.lo) / 2.0
    d = bench.state_dim

    def interval(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = np.maximum(x @ w0 + b0, 0.0)
        mid, width = (h @ w1 + b1)[:, 0], eps * SIGMA * h.sum(axis=1)
        return mid - width, mid + width

    jac = np.zeros((d, d))
    for i in range(d):
        e = np.zeros((1, d))
        e[0, i] = 1e-5
        jac[:, i] = (bench.step(e, net.forward(e)) - bench.step(-e, net.forward(-e)))[0] / 2e-5
    p = sl.solve_discrete_lyapunov(jac.T, np.eye(d))
    print(f"{name} {eps}σ: mean closed loop |eig| {np.abs(np.linalg.eigvals(jac)).round(3)}")
    for k in x0_scales:
        band = " ".join(f"s={s:g}: {r:.3f}" for s, r in lyapunov_band(bench, interval, p, k))
        print(f"  X0 × {k:g}: largest V(x')/V(x) on {{V ≤ s²c}} ∩ B: {band}")
    rng = np.random.default_rng(seed)
    x0 = bench.initial.pieces[0].box
    corners = np.array(list(itertools.product(*zip(x0.lo, x0.hi, strict=True))))
    starts = {
        "X0": np.concatenate([corners, rng.uniform(x0.lo, x0.hi, (4000, d))]),
        "B": rng.uniform(bench.box.lo, bench.box.hi, (20000, d)),
    }
    for where, x_start in starts.items():
        for mode in ("random", "greedy"):
            x, worst = x_start.copy(), np.abs(x_start) / half
            left = np.zeros(len(x), dtype=bool)
            for _ in range(400):
                lo, hi = interval(x)
                if mode == "random":
                    u = np.where(rng.random(len(x)) < 0.5, lo, hi)
                else:
                    xl, xh = bench.step(x, lo[:, None]), bench.step(x, hi[:, None])
                    vl = np.einsum("ij,jk,ik->i", xl, p, xl)
                    vh = np.einsum("ij,jk,ik->i", xh, p, xh)
                    u = np.where(vl > vh, lo, hi)
                x = bench.step(x, u[:, None])
                left |= np.any(np.abs(x) >= half, axis=1)
                worst = np.maximum(worst, np.abs(x) / half)
            kept = worst[~left].max(axis=0) if (~left).any() else np.full(d, np.nan)
            print(
                f"  from {where} ({len(x)}), {mode:6s}: left B {left.mean():.3f}; "
                f"largest |x_i|/half-width of those that stayed {kept.round(3)}"
            )
    cfg = benchmark_config(name)
    spec = bayesian_spec(cfg, net)
    policy = SafeBNNPolicy(spec.box(net, parse_epsilon(f"{eps}sigma")), spec, rng)
    _, labels = bootstrap_labels(bench, policy, rng, states=2000, rollouts=4, horizon=60)
    print(f"  bootstrap labels = 1: {labels.mean():.3f} of 2000 states of B")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--epsilons", default="0.5", help="in σ, comma-separated")
    ap.add_argument("--x0-scales", default="1", help="X0 scaled by these factors (Lyapunov band)")
    args = ap.parse_args()
    scales = tuple(float(k) for k in args.x0_scales.split(","))
    for eps in args.epsilons.split(","):
        probe(args.benchmark, float(eps), x0_scales=scales)


if __name__ == "__main__":
    main()
