"""Train the mean policies of the 3-D and 4-D BNN systems (issue 25.5) and write them as package data.

    .venv/bin/python benchmarks/bnn_scale_train.py     # writes src/safecert/bnn/data/{lane,cartpole,lane4,reactor}.npz

Systems: ``lane`` (3 states, lane keeping with a lagged yaw rate), ``cartpole`` (4 states, linearised
cart-pole with saturated force), ``lane4`` (4 states, ``lane`` with a first-order steering
actuator) and ``reactor`` (4 states, an exothermic reactor with a cooling jacket and a valve lag);
their dynamics and sets are ``src/safecert/bnn/data/*.system.toml``.
Each policy is a ``d → h → 1`` ReLU network (``lane``, ``lane4`` h = 16, ``cartpole``, ``reactor`` h = 8: half the
binaries of the closure MILP's policy part; 16 units had no certificate after 505 CPU-s)
imitating the discrete LQR feedback ``u = −K x`` of the linear part (gains from ``scipy.linalg.solve_discrete_are``; the dynamics clip ``u`` to ±1), trained
with the output layer's weights perturbed by N(0, σ²), σ = 0.1 (the σ the systems are certified with,
layer 1 Bayesian as in the paper), so the mean network is one that tolerates the weight noise: the
noise term penalises large hidden activations. Deterministic: seeded torch on one thread, seeded
states. The script then rolls the closed loop out from the corners of X0 with the mean weights and
prints the largest excursion (a sanity check, not evidence).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import scipy.linalg as sl

from safecert.bnn.networks import ReluNetwork
from safecert.bnn.system import get_benchmark

DATA = Path(__file__).resolve().parents[1] / "src" / "safecert" / "bnn" / "data"
SIGMA = 0.1
HIDDEN = {"lane": 16, "cartpole": 8, "lane4": 16, "reactor": 8}


def lqr(a: np.ndarray, b: np.ndarray, q: np.ndarray, r: float) -> np.ndarray:
    """Discrete LQR gain ``K`` (``u = −K x``)."""
    p = sl.solve_discrete_are(a, b, q, np.array([[r]]))
    return np.linalg.solve(r + b.T @ p @ b, b.T @ p @ a)


def linear_parts() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, float]]:
    """``(A, B, Q, R)`` of each system's unsaturated dynamics (as in its .system.toml)."""
    dt = 0.05
    lane_a = np.array([[1.0, 0.1, 0.0], [0.0, 1.0, 0.1], [0.0, 0.0, 0.8]])
    lane_b = np.array([[0.0], [0.0], [0.2]])
    cp_a = np.array(
        [[1, dt, 0, 0], [0, 1, -0.98 * dt, 0], [0, 0, 1, dt], [0, 0, 21.56 * dt, 1]], dtype=float
    )
    cp_b = np.array([[0.0], [10 * dt], [0.0], [-20 * dt]])
    l4_a = np.array([[1, 0.1, 0, 0], [0, 1, 0.1, 0], [0, 0, 0.8, 0.2], [0, 0, 0, 0.6]], dtype=float)
    l4_b = np.array([[0.0], [0.0], [0.0], [0.4]])
    re_a = np.array(
        [[0.5, -0.2, 0, 0], [0.1, 1.1, 0.2, 0], [0, 0.2, 0.4, -0.4], [0, 0, 0, 0.2]], dtype=float
    )
    re_b = np.array([[0.0], [0.0], [0.0], [0.8]])
    return {
        "lane": (lane_a, lane_b, np.diag([1.0, 1.0, 0.1]), 1.0),
        "cartpole": (cp_a, cp_b, np.diag([1.0, 1.0, 10.0, 1.0]), 1.0),
        "lane4": (l4_a, l4_b, np.diag([1.0, 1.0, 0.1, 0.1]), 1.0),
        "reactor": (re_a, re_b, np.diag([1.0, 10.0, 1.0, 0.1]), 1.0),
    }


def train(name: str, seed: int = 0, steps: int = 4000, hidden: int = 16) -> ReluNetwork:
    import torch
    from torch import nn

    a, b, q, r = linear_parts()[name]
    k = torch.tensor(lqr(a, b, q, r), dtype=torch.float32)  # (1, d)
    bench = get_benchmark(name)
    lo = torch.tensor(bench.box.lo, dtype=torch.float32)
    hi = torch.tensor(bench.box.hi, dtype=torch.float32)
    d = bench.state_dim
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    first, last = nn.Linear(d, hidden), nn.Linear(hidden, 1)
    opt = torch.optim.Adam([*first.parameters(), *last.parameters()], lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = lo + (hi - lo) * torch.rand(512, d, generator=gen)
        target = (-(x @ k.T)).clamp(-1.5, 1.5)  # beyond ±1 the dynamics saturate anyway
        h = torch.relu(first(x))
        noise = SIGMA * torch.randn(512, hidden, 1, generator=gen)  # one weight draw per state
        out = (h.unsqueeze(1) @ (last.weight.T.unsqueeze(0) + noise)).squeeze(-1) + last.bias
        loss = ((out - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    layers = [
        (first.weight.detach().double().numpy().T, first.bias.detach().double().numpy()),
        (last.weight.detach().double().numpy().T, last.bias.detach().double().numpy()),
    ]
    return ReluNetwork(layers, name=name)


def excursion(name: str, net: ReluNetwork, steps: int = 400) -> np.ndarray:
    """Largest |x_i| / half-width reached from X0's corners with the mean weights."""
    bench = get_benchmark(name)
    box = bench.initial.pieces[0].box
    x = np.array(list(itertools.product(*zip(box.lo, box.hi, strict=True))), dtype=float)
    half = (bench.box.hi - bench.box.lo) / 2.0
    worst = np.abs(x) / half
    for _ in range(steps):
        x = bench.step(x, net.forward(x))
        worst = np.maximum(worst, np.abs(x) / half)
    return worst.max(axis=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--systems", default="lane,cartpole,lane4,reactor")
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args()
    for name in args.systems.split(","):
        net = train(name, hidden=HIDDEN[name])
        path = args.out / f"{name}.npz"
        net.save_npz(path)
        print(
            f"{name}: wrote {path}; largest excursion / half-width per state "
            f"{np.round(excursion(name, net), 3).tolist()}"
        )


if __name__ == "__main__":
    main()
