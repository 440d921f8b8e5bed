"""Regenerate the sandbox example: the model TOML and two small logs from the *real* sandbox.

    .venv/bin/python examples/sandbox/generate.py

* ``model.toml``    — the sandbox abstraction (16 working states + harm + done, K from the tools);
* ``logs.jsonl``    — 300 episodes of the scripted competent agent (certification-style logs);
* ``explore.jsonl`` — 1,500 episodes of a uniform explorer over the five non-halt tools
  (development logs for ``safecert shield diagnose``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from safecert.shield import sandbox_model as sm
from safecert.shield.controllers import Explorer, ScriptedAgent

HERE = Path(__file__).resolve().parent


def main() -> None:
    (HERE / "model.toml").write_text(sm.to_toml(sm.model_dict()))
    sm.record_real_logs(ScriptedAgent(), 300, HERE / "logs.jsonl", np.random.default_rng(2026))
    sm.record_real_logs(Explorer(), 1500, HERE / "explore.jsonl", np.random.default_rng(2027))


if __name__ == "__main__":
    main()
