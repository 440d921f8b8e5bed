"""An independent sampled falsifier for SAFE certificates of the 3-D and 4-D systems (issue 25.5).

A SAFE certificate claims that ``Inv = {x ∈ B : g(x) ≥ 0}`` contains X0, avoids X_u and is closed
under every transition ``x' = f(x, π_W(x))`` with ``W`` in the weight box (any ``W`` at every step).
This script tries to break that claim **without the engine's code**: the dynamics are written out
by hand below from the systems' descriptions (``lane``, ``cartpole``, ``lane4``, ``reactor``), the weight box is built by
hand from the certificate's policy copy (mean ± ε·0.1 on the output kernel, biases and the first
layer fixed), and the networks run as plain NumPy matrix products. Only the certificate's JSON and
``policy.npz`` are read (the hand dynamics are compared once with the engine's simulator on random
states, to catch a transcription error here, and must agree to 1e-12).

Checks (every count must be 0 for the certificate to survive):

* **closure** — states of Inv (uniform in B, kept where ``g ≥ 0``, plus states on Inv's boundary
  found by bisection between inside and outside samples, ``0 ≤ g ≤ 1e-3``). The policy's only
  Bayesian layer is the output layer and its inputs are ReLU outputs ``h ≥ 0``, so the actions the
  box allows at ``x`` are exactly the interval ``[h·W_lo + b, h·W_hi + b]``; each state is checked
  at ``--actions`` evenly spaced points of that interval (both ends included) and at random box
  draws (uniform, random vertices). A violation: ``g(x') < 0`` or ``x'`` outside B.
* **initial** — a grid of X0 (``--grid`` points per axis, corners included) and uniform samples:
  ``g ≥ 0``.
* **unsafe** — X_u ∩ B is B's boundary (X_u is the closed outside of B): uniform samples on every
  face, ``g < 0``.
* **rollouts** — closed-loop trajectories from X0 samples with a fresh action from the allowed
  interval at every step (its ends half of the time): never outside B, never ``g < 0``.

    nice -n 5 .venv/bin/python benchmarks/bnn_cert_falsify.py /tmp/lane/certificate.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

SIGMA = 0.1  # the systems' σ (benchmark_config: layer 1, kernels only)

#: hand-written dynamics (see src/safecert/bnn/data/{lane,cartpole,lane4,reactor}.system.toml)


def lane_step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1.0, 1.0)
    e, psi, r = x[:, 0], x[:, 1], x[:, 2]
    return np.stack([e + 0.1 * psi, psi + 0.1 * r, 0.8 * r + 0.2 * uc], axis=1)


def lane4_step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1.0, 1.0)
    e, psi, r, d = x[:, 0], x[:, 1], x[:, 2], x[:, 3]
    return np.stack([e + 0.1 * psi, psi + 0.1 * r, 0.8 * r + 0.2 * d, 0.6 * d + 0.4 * uc], axis=1)


def reactor_step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1.0, 1.0)
    c, temp, jacket, valve = x[:, 0], x[:, 1], x[:, 2], x[:, 3]
    return np.stack(
        [
            0.5 * c - 0.2 * temp,
            1.1 * temp + 0.1 * c + 0.2 * jacket,
            0.4 * jacket + 0.2 * temp - 0.4 * valve,
            0.2 * valve + 0.8 * uc,
        ],
        axis=1,
    )


def cartpole_step(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1.0, 1.0)
    p, v, th, w = x[:, 0], x[:, 1], x[:, 2], x[:, 3]
    return np.stack(
        [
            p + 0.05 * v,
            v + 0.05 * (10.0 * uc - 0.98 * th),
            th + 0.05 * w,
            w + 0.05 * (21.56 * th - 20.0 * uc),
        ],
        axis=1,
    )


SYSTEMS = {
    # name: (step, B's half-widths (B = X_u's complement, centred), X0's half-widths)
    "lane": (lane_step, np.array([1.0, 1.0, 1.0]), np.array([0.3, 0.2, 0.2])),
    "cartpole": (
        cartpole_step,
        np.array([1.5, 2.0, 0.4, 2.0]),
        np.array([0.2, 0.2, 0.05, 0.1]),
    ),
    "lane4": (lane4_step, np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.15, 0.1, 0.1, 0.1])),
    "reactor": (reactor_step, np.ones(4), np.full(4, 0.1)),
}


def relu_net(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    a = x
    for k, (w, b) in enumerate(layers):
        a = a @ w + b
        if k < len(layers) - 1:
            a = np.maximum(a, 0.0)
    return a


def load(cert_path: Path) -> tuple[str, list, list, float]:
    cert = json.loads(cert_path.read_text())
    r = cert["result"]
    if cert["verdict"] != "SAFE":
        raise SystemExit(f"{cert_path}: verdict {cert['verdict']}, nothing to falsify")
    g = [
        (np.array(L["W"], dtype=float), np.array(L["b"], dtype=float))
        for L in r["invariant"]["layers"]
    ]
    npz = np.load(cert_path.parent / "policy.npz")
    pol = [(npz[f"W{k}"], npz[f"b{k}"]) for k in range(len(npz.files) // 2)]
    eps = r["epsilon"]
    assert eps["unit"] == "sigma", eps
    half = eps["value"] * SIGMA
    assert abs(eps["absolute"][1] - half) <= 1e-12 and eps["absolute"][0] == 0.0, eps
    return r["system"], g, pol, half


def action_interval(pol, half: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(h, u_lo, u_hi)``: hidden activations and the exact action interval of the box."""
    (w0, b0), (w1, b1) = pol
    h = np.maximum(x @ w0 + b0, 0.0)
    return h, (h @ (w1 - half) + b1)[:, 0], (h @ (w1 + half) + b1)[:, 0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("certificate", type=Path)
    ap.add_argument("--states", type=int, default=200_000, help="uniform states of B tried")
    ap.add_argument("--boundary", type=int, default=100_000, help="states on Inv's boundary")
    ap.add_argument("--actions", type=int, default=17, help="points of each action interval")
    ap.add_argument("--draws", type=int, default=8, help="box weight draws per state")
    ap.add_argument("--grid", type=int, default=9, help="X0 grid points per axis")
    ap.add_argument("--rollouts", type=int, default=20_000)
    ap.add_argument("--horizon", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    c0 = time.process_time()
    name, g, pol, half = load(args.certificate)
    step, bhalf, x0half = SYSTEMS[name]
    rng = np.random.default_rng(args.seed)
    d = len(bhalf)

    def gval(x: np.ndarray) -> np.ndarray:
        return relu_net(g, x)[:, 0]

    def in_b(x: np.ndarray) -> np.ndarray:
        return np.all(np.abs(x) < bhalf, axis=1)  # X_u is closed: |x_i| = bound is unsafe

    # the hand dynamics against the engine's simulator (a transcription check of this script)
    from safecert.bnn.system import get_benchmark

    bench = get_benchmark(name)
    xs = rng.uniform(-bhalf, bhalf, size=(1000, d))
    us = rng.uniform(-3, 3, size=(1000, 1))
    assert np.allclose(bench.step(xs, us), step(xs, us[:, 0]), atol=1e-12, rtol=0)

    out: dict[str, object] = {"certificate": str(args.certificate), "system": name, "half": half}
    # closure states: uniform in Inv, and Inv's boundary by bisection
    x = rng.uniform(-bhalf, bhalf, size=(args.states, d))
    gx = gval(x)
    inside, outside = x[gx >= 0], x[gx < 0]
    if len(inside) == 0:
        raise SystemExit("no sampled state lies in Inv")
    a = inside[rng.integers(0, len(inside), args.boundary)]
    b = outside[rng.integers(0, len(outside), args.boundary)] if len(outside) else a
    for _ in range(40):  # g(a) ≥ 0 > g(b)
        m = (a + b) / 2.0
        gm = gval(m)
        a = np.where((gm >= 0)[:, None], m, a)
        b = np.where((gm >= 0)[:, None], b, m)
    boundary = a[(gval(a) >= 0) & (gval(a) <= 1e-3)]
    states = np.vstack([inside, boundary])
    h, u_lo, u_hi = action_interval(pol, half, states)
    viol, checked, worst = 0, 0, np.inf
    for lam in np.linspace(0.0, 1.0, args.actions):
        x1 = step(states, u_lo + lam * (u_hi - u_lo))
        g1 = gval(x1)
        bad = (g1 < 0) | ~in_b(x1)
        viol += int(bad.sum())
        checked += len(states)
        worst = min(worst, float(g1.min()))
    (w0, b0), (w1, b1) = pol
    for k in range(args.draws):
        t = rng.uniform(size=(len(states), w1.shape[0]))
        if k % 2:
            t = np.round(t)  # random vertices
        u = np.einsum("ni,ni->n", h, w1[:, 0] - half + 2 * half * t) + b1[0]
        x1 = step(states, u)
        g1 = gval(x1)
        viol += int(((g1 < 0) | ~in_b(x1)).sum())
        checked += len(states)
        worst = min(worst, float(g1.min()))
    out["closure"] = {
        "states_in_inv": len(inside),
        "boundary_states": len(boundary),
        "transitions": checked,
        "violations": viol,
        "min_g_next": worst,
    }
    # X0: grid and samples
    axes = [np.linspace(-s, s, args.grid) for s in x0half]
    grid = np.array(list(itertools.product(*axes)))
    x0 = np.vstack([grid, rng.uniform(-x0half, x0half, size=(100_000, d))])
    g0 = gval(x0)
    out["initial"] = {
        "states": len(x0),
        "violations": int((g0 < 0).sum()),
        "min_g": float(g0.min()),
    }
    # X_u ∩ B: B's faces
    faces = []
    for i in range(d):
        for s in (-1.0, 1.0):
            f = rng.uniform(-bhalf, bhalf, size=(20_000, d))
            f[:, i] = s * bhalf[i]
            faces.append(f)
    fu = np.vstack(faces)
    gu = gval(fu)
    out["unsafe"] = {
        "states": len(fu),
        "violations": int((gu >= 0).sum()),
        "max_g": float(gu.max()),
    }
    # rollouts with a fresh allowed action at every step
    x = rng.uniform(-x0half, x0half, size=(args.rollouts, d))
    bad = np.zeros(len(x), dtype=bool)
    for _ in range(args.horizon):
        _, lo, hi = action_interval(pol, half, x)
        lam = rng.uniform(size=len(x))
        lam = np.where(rng.uniform(size=len(x)) < 0.5, np.round(lam), lam)
        x = step(x, lo + lam * (hi - lo))
        bad |= ~in_b(x) | (gval(x) < 0)
    out["rollouts"] = {
        "trajectories": args.rollouts,
        "steps": args.horizon,
        "violations": int(bad.sum()),
    }
    out["cpu_s"] = time.process_time() - c0
    total = sum(int(out[k]["violations"]) for k in ("closure", "initial", "unsafe", "rollouts"))  # type: ignore[index]
    out["violations"] = total
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
