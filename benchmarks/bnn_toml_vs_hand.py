"""The paper's systems as TOML against the former hand-written encoders: same verdicts, speed ratio.

For each system: one CEGIS run (TOML system, CPU clock) finds an invariant g at ε; then the
verifier checks g — and a few perturbed candidates that fail — once with the TOML system's
encoding and once with the hand encoder (``tests/bnn/_oracles.py``, the engine's encoders before
dynamics became data), alternating, in this process. Reported: whether every verdict agrees,
MILP sizes, and the median time ratio TOML / hand (a ratio in one process, so machine load
cancels to first order).

    .venv/bin/python benchmarks/bnn_toml_vs_hand.py --json runs/toml_vs_hand.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from safecert.bnn.config import bayesian_spec, load_policy_network  # noqa: E402
from safecert.bnn.dynamics import Dynamics, System  # noqa: E402
from safecert.bnn.search import BnnProblem  # noqa: E402
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import parse_epsilon  # noqa: E402
from safecert.bnn.system import build_system  # noqa: E402
from safecert.bnn.verifier import Counterexample, Proof, Verifier  # noqa: E402
from tests.bnn._oracles import ENCODERS  # noqa: E402

EPS = {"lds_x04": "0.5sigma", "pend": "0.5sigma", "car": "0.5sigma"}


@dataclasses.dataclass(frozen=True)
class HandDynamics(Dynamics):
    """The same simulator, the former hand-written MILP encoder."""

    hand: str = ""

    def encode(self, milp, x, u, tie_gap: float = 0.0):  # type: ignore[no-untyped-def]
        return ENCODERS[self.hand](milp, x, u, tie_gap)


def kind(v: object) -> str:
    if isinstance(v, Proof):
        return "proof"
    if isinstance(v, Counterexample):
        return f"counterexample ({v.condition})"
    return "unknown"


def run(name: str, repeats: int, limit: float) -> dict:
    cfg = benchmark_config(
        name, epsilon=EPS[name], limits={"clock": "cpu", "per_epsilon_s": limit}, seed=0
    )
    system = build_system(cfg.system, cfg.dynamics, cfg.sets)
    hand_sys: System = dataclasses.replace(
        system,
        dynamics=HandDynamics(
            **{f.name: getattr(system.dynamics, f.name) for f in dataclasses.fields(Dynamics)},
            hand=name.removesuffix("_x04"),
        ),
    )
    mean, _ = load_policy_network(cfg, None)
    problem = BnnProblem(system, mean, bayesian_spec(cfg, mean), cfg)
    eps = parse_epsilon(EPS[name])
    c0 = time.process_time()
    res = problem.run(eps, None, limit)
    cegis_cpu = time.process_time() - c0
    g = res.network
    rng = np.random.default_rng(0)
    candidates = [g] + [
        g.with_layers([(w + 0.3 * rng.standard_normal(w.shape), b) for w, b in g.layers])
        for _ in range(3)
    ]
    box = problem.box(eps)
    rows = []
    for ci, cand in enumerate(candidates):
        times: dict[str, list[float]] = {"toml": [], "hand": []}
        verdicts: dict[str, str] = {}
        for _ in range(repeats):
            for label, s in (("toml", system), ("hand", hand_sys)):
                t0 = time.process_time()
                v = Verifier(s, box, time_limit_s=120, first_feasible=False).check(cand)
                times[label].append(time.process_time() - t0)
                verdicts.setdefault(label, kind(v))
                assert verdicts[label] == kind(v), "verdict changed between repeats"
        rows.append(
            {
                "candidate": "certified" if ci == 0 else f"perturbed {ci}",
                "verdict_toml": verdicts["toml"],
                "verdict_hand": verdicts["hand"],
                "cpu_s_toml": statistics.median(times["toml"]),
                "cpu_s_hand": statistics.median(times["hand"]),
            }
        )
    return {
        "system": name,
        "epsilon": EPS[name],
        "cegis_verdict": res.verdict,
        "cegis_cpu_s": cegis_cpu,
        "rows": rows,
    }


def markdown(results: list[dict]) -> str:
    lines = [
        "| system | ε | candidate | verdict (TOML) | verdict (hand) | CPU-s TOML | CPU-s hand | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for row in r["rows"]:
            ratio = row["cpu_s_toml"] / row["cpu_s_hand"] if row["cpu_s_hand"] > 0 else float("nan")
            lines.append(
                f"| {r['system']} | {r['epsilon']} | {row['candidate']} | {row['verdict_toml']} | "
                f"{row['verdict_hand']} | {row['cpu_s_toml']:.3f} | {row['cpu_s_hand']:.3f} | "
                f"{ratio:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--systems", default=",".join(EPS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cegis-limit", type=float, default=120.0, help="CPU seconds per CEGIS run")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    results = []
    for name in args.systems.split(","):
        results.append(run(name, args.repeats, args.cegis_limit))
        print(json.dumps(results[-1]), flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    print(markdown(results))
    agree = all(row["verdict_toml"] == row["verdict_hand"] for r in results for row in r["rows"])
    print(f"\nall verdicts agree: {agree}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
