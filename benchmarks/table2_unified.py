"""Table-2-like run: task-only, safety-only and unified failure side by side (CORE-RL Table 2).

Three scripted vendors on ``SafePointGoal-v0`` (goal = reach the goal within 200 steps; budget
d = 5 hazard steps), certified by ``safecert certify`` over a 2 × 2 Gaussian envelope:

- ``goal_seeker`` drives straight at the goal, ignoring hazards: it passes a task-only
  evaluation and fails the unified metric (safety failures);
- ``stand_still`` never moves: zero cost, so it passes a safety-only evaluation, and fails the
  unified metric (task failures) — "safe by doing nothing";
- ``hazard_avoider`` slides around hazards: the one that can pass the unified metric.

A metric's decision is PASS iff its Bonferroni Clopper–Pearson upper bound is ≤ p*.

    .venv/bin/python benchmarks/table2_unified.py --episodes 300
"""

from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

POLICIES = f"""
import sys
import numpy as np
sys.path.insert(0, {str(REPO / "examples")!r})
from vendors.point_policies import goal_seeker, hazard_avoider  # noqa: E402,F401

def stand_still(obs):
    return np.zeros((len(obs), 2))
"""

CONFIG = """
policy = "python:table2_policies:{policy}"
env = "SafePointGoal-v0"
env_kwargs = {{ layout_seed = 0 }}
episodes = {episodes}
seed = 0
max_steps = 200
batch_size = 16
[spec]
budget = 5.0
p_star = 0.10
confidence = 0.90
goal = "info:is_success"
[kpis]
return = {{ lower = -10.0, upper = 10.0 }}
[envelope]
obs_noise = {{ kind = "gaussian", levels = [0.0, 0.02] }}
act_noise = {{ kind = "gaussian", levels = [0.0, 0.05] }}
"""


def decision(bound: float, p_star: float) -> str:
    return "PASS" if bound <= p_star else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    from safecert.blackbox.certify import certify
    from safecert.blackbox.grid import cell_label

    folder = Path(tempfile.mkdtemp(prefix="table2_"))
    (folder / "table2_policies.py").write_text(POLICIES)
    rows = []
    for policy in ("goal_seeker", "stand_still", "hazard_avoider"):
        config = folder / f"{policy}.toml"
        config.write_text(textwrap.dedent(CONFIG.format(policy=policy, episodes=args.episodes)))
        cert = certify(config, folder / policy, workers=args.workers, progress=False)
        p_star = cert.result.p_star
        for cell in cert.result.cells:
            rows.append(
                {
                    "policy": policy,
                    "cell": cell_label(cell.params),
                    "N": cell.episodes,
                    "task_rate": cell.task_failure_rate,
                    "task_ub": cell.task_upper_bound,
                    "task_only": decision(cell.task_upper_bound, p_star),
                    "safety_rate": cell.safety_failure_rate,
                    "safety_ub": cell.safety_upper_bound,
                    "safety_only": decision(cell.safety_upper_bound, p_star),
                    "unified_rate": cell.failure_rate,
                    "unified_ub": cell.upper_bound,
                    "unified": cell.decision,
                    "verdict": cert.verdict,
                }
            )
    print(json.dumps(rows, indent=1))
    cols = [
        "policy",
        "cell",
        "N",
        "task_rate",
        "task_ub",
        "task_only",
        "safety_rate",
        "safety_ub",
        "safety_only",
        "unified_rate",
        "unified_ub",
        "unified",
    ]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print(
            "| "
            + " | ".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c]) for c in cols)
            + " |"
        )


if __name__ == "__main__":
    main()
