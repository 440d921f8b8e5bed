"""Train the bundled HalfCheetah vendor policies and export them to ONNX (reproducible, CPU).

Method: Augmented Random Search (ARS V2-t, Mania, Guy & Recht 2018, "Simple random search provides a
competitive approach to reinforcement learning") on a small tanh MLP (17 -> 16 -> 6) with running
observation normalisation, on Gymnasium's ``HalfCheetah-v5`` with episodes of ``--horizon`` steps.

- ``cheetah_fast.onnx`` maximises Gymnasium's reward (forward velocity minus control cost) and
  ignores the velocity constraint.
- ``cheetah_safe.onnx`` starts from the fast policy and is fine-tuned on the penalised reward
  ``r_t - penalty * c_t`` with ``c_t = 1[x_velocity > 3.2096]`` (Safety-Gymnasium's threshold),
  a fixed-multiplier Lagrangian relaxation of the constrained problem.

The normalisation is folded into the first layer, so each ONNX file is a plain MLP on raw
observations: ``(B, 17) float32 -> (B, 6) float32`` in [-1, 1]. Everything is seeded; running the
script again with the same arguments reproduces the same files (same platform and library
versions)::

    .venv/bin/python scripts/train_vendors.py --out examples/vendors
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

THRESHOLD = 3.2096  # Safety-Gymnasium SafetyHalfCheetahVelocity-v1
OBS_DIM, HIDDEN, ACT_DIM = 17, 16, 6


@dataclass
class RunningStat:
    """Welford running mean/variance of observations (ARS V2 state normalisation)."""

    n: int = 0
    mean: np.ndarray = field(default_factory=lambda: np.zeros(OBS_DIM))
    m2: np.ndarray = field(default_factory=lambda: np.zeros(OBS_DIM))

    def push_many(self, xs: np.ndarray) -> None:
        for x in xs:
            self.n += 1
            delta = x - self.mean
            self.mean = self.mean + delta / self.n
            self.m2 = self.m2 + delta * (x - self.mean)

    @property
    def std(self) -> np.ndarray:
        var = self.m2 / max(self.n - 1, 1) if self.n > 1 else np.ones(OBS_DIM)
        return np.sqrt(np.maximum(var, 1e-4))


def unpack(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    i = 0
    w1 = theta[i : i + HIDDEN * OBS_DIM].reshape(HIDDEN, OBS_DIM)
    i += HIDDEN * OBS_DIM
    b1 = theta[i : i + HIDDEN]
    i += HIDDEN
    w2 = theta[i : i + ACT_DIM * HIDDEN].reshape(ACT_DIM, HIDDEN)
    i += ACT_DIM * HIDDEN
    return w1, b1, w2, theta[i : i + ACT_DIM]


N_PARAMS = HIDDEN * OBS_DIM + HIDDEN + ACT_DIM * HIDDEN + ACT_DIM


def act(theta: np.ndarray, mean: np.ndarray, std: np.ndarray, obs: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2 = unpack(theta)
    h = np.tanh(w1 @ ((obs - mean) / std) + b1)
    return np.tanh(w2 @ h + b2)


def episode(
    env, theta, mean, std, seed, horizon, penalty
) -> tuple[float, float, float, np.ndarray]:
    """One rollout: (shaped return, Gymnasium return, cost count, visited observations)."""
    obs, _ = env.reset(seed=int(seed))
    shaped = ret = cost = 0.0
    seen = [obs]
    for _ in range(horizon):
        obs, reward, terminated, truncated, info = env.step(act(theta, mean, std, obs))
        c = float(info["x_velocity"] > THRESHOLD)
        ret += reward
        cost += c
        shaped += reward - penalty * c
        seen.append(obs)
        if terminated or truncated:
            break
    return shaped, ret, cost, np.array(seen)


def ars(env, theta, stat, rng, *, iters, directions, top, step, noise, horizon, penalty, label):
    """ARS V2-t: antithetic perturbations, the ``top`` best directions, reward-std step size.

    Every 10 iterations the current policy is scored on 3 fixed evaluation seeds (penalised return);
    the best scoring parameters and a copy of the normalisation are returned (ARS is not
    monotone).
    """
    best_score, best = -np.inf, (theta.copy(), copy.deepcopy(stat))
    for it in range(iters):
        deltas = rng.standard_normal((directions, N_PARAMS))
        seeds = rng.integers(0, 2**31 - 1, size=directions)
        mean, std = stat.mean.copy(), stat.std
        plus, minus = np.empty(directions), np.empty(directions)
        for k in range(directions):
            plus[k], _, _, s1 = episode(
                env, theta + noise * deltas[k], mean, std, seeds[k], horizon, penalty
            )
            minus[k], _, _, s2 = episode(
                env, theta - noise * deltas[k], mean, std, seeds[k], horizon, penalty
            )
            stat.push_many(s1[::5])
            stat.push_many(s2[::5])
        order = np.argsort(-np.maximum(plus, minus))[:top]
        sigma = np.concatenate([plus[order], minus[order]]).std() + 1e-8
        theta = theta + step / (top * sigma) * ((plus[order] - minus[order]) @ deltas[order])
        if it % 10 == 9 or it == iters - 1:
            runs = [
                episode(env, theta, stat.mean, stat.std, s, horizon, penalty) for s in (1, 2, 3)
            ]
            score = float(np.mean([r[0] for r in runs]))
            ret, cost = np.mean([r[1] for r in runs]), np.mean([r[2] for r in runs])
            print(
                f"[{label}] iter {it + 1:4d} return {ret:7.1f} cost {cost:5.1f}/{horizon} score {score:7.1f}",
                flush=True,
            )
            if score > best_score:
                best_score, best = score, (theta.copy(), copy.deepcopy(stat))
    return best


def export_onnx(theta: np.ndarray, mean: np.ndarray, std: np.ndarray, path: Path) -> None:
    """Fold the normalisation into layer 1 and export a (B, 17) -> (B, 6) MLP with torch."""
    import torch

    w1, b1, w2, b2 = unpack(theta)
    net = torch.nn.Sequential(
        torch.nn.Linear(OBS_DIM, HIDDEN),
        torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, ACT_DIM),
        torch.nn.Tanh(),
    )
    with torch.no_grad():
        net[0].weight.copy_(torch.as_tensor(w1 / std, dtype=torch.float32))
        net[0].bias.copy_(torch.as_tensor(b1 - (w1 / std) @ mean, dtype=torch.float32))
        net[2].weight.copy_(torch.as_tensor(w2, dtype=torch.float32))
        net[2].bias.copy_(torch.as_tensor(b2, dtype=torch.float32))
    torch.onnx.export(
        net,
        (torch.zeros(1, OBS_DIM),),
        str(path),
        input_names=["observations"],
        output_names=["actions"],
        dynamic_axes={"observations": {0: "batch"}, "actions": {0: "batch"}},
        dynamo=False,
    )
    torch.save(net.state_dict(), path.with_suffix(".pt"))


def evaluate(path: Path, episodes: int, horizon: int) -> dict[str, float]:
    """Mean return and cost of an exported ONNX policy on fresh seeds (independent of training)."""
    import gymnasium as gym
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    env = gym.make("HalfCheetah-v5")
    rets, costs, vels = [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=10_000 + ep)
        ret = cost = 0.0
        for _ in range(horizon):
            a = session.run(None, {"observations": obs[None].astype(np.float32)})[0][0]
            obs, r, *_, info = env.step(a)
            ret += r
            cost += info["x_velocity"] > THRESHOLD
            vels.append(info["x_velocity"])
        rets.append(ret)
        costs.append(cost)
    return {
        "return": float(np.mean(rets)),
        "cost": float(np.mean(costs)),
        "velocity": float(np.mean(vels)),
    }


def main() -> None:
    import gymnasium as gym
    import torch

    torch.set_num_threads(1)
    p = argparse.ArgumentParser(description="Train and export the HalfCheetah vendor policies.")
    p.add_argument("--out", type=Path, default=Path("examples/vendors"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--horizon", type=int, default=250)
    p.add_argument("--fast-iters", type=int, default=150)
    p.add_argument("--safe-iters", type=int, default=100)
    p.add_argument("--directions", type=int, default=8)
    p.add_argument("--top", type=int, default=4)
    p.add_argument("--step", type=float, default=0.02)
    p.add_argument("--noise", type=float, default=0.03)
    p.add_argument("--penalty", type=float, default=10.0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    env = gym.make("HalfCheetah-v5")
    hyper = dict(
        directions=args.directions,
        top=args.top,
        step=args.step,
        noise=args.noise,
        horizon=args.horizon,
    )
    start = time.perf_counter()
    fast, fast_stat = ars(
        env,
        np.zeros(N_PARAMS),
        RunningStat(),
        rng,
        iters=args.fast_iters,
        penalty=0.0,
        label="fast",
        **hyper,
    )
    export_onnx(fast, fast_stat.mean, fast_stat.std, args.out / "cheetah_fast.onnx")
    safe, safe_stat = ars(
        env,
        fast.copy(),
        copy.deepcopy(fast_stat),
        rng,
        iters=args.safe_iters,
        penalty=args.penalty,
        label="safe",
        **hyper,
    )
    export_onnx(safe, safe_stat.mean, safe_stat.std, args.out / "cheetah_safe.onnx")
    report = {
        "method": "ARS V2-t on a 17-16-6 tanh MLP",
        "args": {k: str(v) for k, v in vars(args).items() if k != "out"},
        "train_seconds": round(time.perf_counter() - start, 1),
        "fast": evaluate(args.out / "cheetah_fast.onnx", 5, args.horizon),
        "safe": evaluate(args.out / "cheetah_safe.onnx", 5, args.horizon),
    }
    (args.out / "cheetah_training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
