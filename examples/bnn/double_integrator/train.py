"""Train the double integrator's policy and export it to ONNX (what `policy.onnx` here was made with).

    python examples/bnn/double_integrator/train.py          # writes policy.onnx next to this file

A 2→16→1 ReLU network imitates the stabilising feedback u = −(2x + 3v) on [−1, 1]² (closed-loop
eigenvalues 0.9 and 0.8 of x' = x + 0.1·v, v' = v + 0.1·u while |u| ≤ 1). Deterministic: seeded
torch, one thread. The export is torch's own (``torch.onnx.export``: Gemm and Relu nodes).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent


def train(seed: int = 0, steps: int = 3000) -> nn.Sequential:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.rand(512, 2, generator=gen) * 2 - 1
        target = -(2 * x[:, :1] + 3 * x[:, 1:])
        loss = ((net(x) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net


def export(net: nn.Module, path: Path) -> None:
    torch.onnx.export(
        net,
        (torch.zeros(1, 2),),
        str(path),
        input_names=["x"],
        output_names=["u"],
        dynamic_axes={"x": {0: "batch"}, "u": {0: "batch"}},
        dynamo=False,  # the TorchScript exporter: no onnxscript needed
    )


if __name__ == "__main__":
    model = train()
    export(model, HERE / "policy.onnx")
    print(f"wrote {HERE / 'policy.onnx'}")
