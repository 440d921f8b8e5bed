"""Train the small bundled Stable-Baselines3 vendor and export its greedy network to TorchScript.

    python examples/vendors/train_sb3.py          # writes ppo_cartpole.zip and ppo_cartpole.pt here

PPO on CartPole-v1, seeded, CPU, 20k steps (about a minute on one core). The zip is what
``policy = "sb3:vendors/ppo_cartpole.zip"`` loads; ``ppo_cartpole.pt`` is the same network's
deterministic action (argmax of the logits) as a TorchScript module, for
``policy = "torchscript:vendors/ppo_cartpole.pt"``. Both certify identically.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    import torch
    from stable_baselines3 import PPO

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=512,
        batch_size=128,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [32, 32]},
    )
    model.learn(args.steps)
    model.save(args.out / "ppo_cartpole.zip")

    class Greedy(torch.nn.Module):
        def __init__(self, policy: torch.nn.Module) -> None:
            super().__init__()
            self.body, self.head = policy.mlp_extractor.policy_net, policy.action_net

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.argmax(self.head(self.body(obs)), dim=1)

    with warnings.catch_warnings():  # TorchScript is deprecated in torch >= 2.10 but still loads
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(Greedy(model.policy).eval(), torch.zeros(2, 4))
        torch.jit.save(traced, str(args.out / "ppo_cartpole.pt"))
    print(f"wrote {args.out / 'ppo_cartpole.zip'} and {args.out / 'ppo_cartpole.pt'}")


if __name__ == "__main__":
    main()
