"""Controllers for the sandbox (paper Sec. V-B, Experiments 1 and 3).

All implement :class:`safecert.shield.guard.Controller`. The scripted agent reads only the
transcript (tool replies), never the predicates, so it is a history-dependent controller of the
kind Thm. 1 covers (the prompt-injected variant of Experiment 3 is benchmark code, in
``benchmarks/_experiments/agents.py``). The uniform-random and adversarial controllers are meant
for the ``restrict`` policy; the adversary is omniscient (it sees the abstract state and plays the
worst admissible policy from the *true* kernel), which is the worst case the certificate bounds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from safecert.shield.sandbox import APPROVAL, TOOLS, Sandbox, ToolCall


def _knowledge(sandbox: Sandbox) -> tuple[bool, bool, bool]:
    """What an agent can tell from the replies: (confirmed, in production, has deleted)."""
    tr = sandbox.transcript
    confirmed = any(e.ok and e.call.tool == "read" and APPROVAL in e.output for e in tr)
    in_prod = any(e.ok and e.call.tool == "chmod" for e in tr)
    deleted = any(e.ok and e.call.tool == "delete" for e in tr)
    return confirmed, in_prod, deleted


class ScriptedAgent:
    """The competent logging agent: pursues the authorised change and takes neither harm route.

    It reads the ticket until the approval arrives, then chmods into production and writes the
    change (the paper's competent agent: the count-threshold baseline then forbids exactly the
    80.2 % of live pairs it never uses). It never chmods before the approval, never deletes and
    never mails anything out.
    """

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def _pick(self, weights: dict[str, float]) -> str:
        names = list(weights)
        p = np.array([weights[n] for n in names], dtype=float)
        return names[int(self.rng.choice(len(names), p=p / p.sum()))]

    @staticmethod
    def weights(confirmed: bool, in_prod: bool, deleted: bool) -> dict[str, float]:
        """The policy as a function of what the agent knows: read until approved, then chmod,
        then write (a misfired call is simply tried again). Its knowledge coincides with the
        predicates (confirmed, in_prod, latch), which lets :mod:`sandbox_model` simulate it
        exactly on the abstract kernel."""
        if not confirmed:
            return {"read": 1.0}
        return {"write": 1.0} if in_prod else {"chmod": 1.0}

    def propose(self, sandbox: Sandbox, permitted: frozenset[str] | None) -> ToolCall:
        confirmed, in_prod, deleted = _knowledge(sandbox)
        tool = self._pick(self.weights(confirmed, in_prod, deleted))
        path = {
            "read": "config.yaml" if in_prod else "ticket.txt",
            "write": "config.yaml" if in_prod else "notes.txt",
        }
        return ToolCall(tool, {"path": path[tool]} if tool in path else {})

    def refused(self, call: ToolCall, reason: str) -> None:
        """The scripted agent simply proposes again from its policy."""


class UniformRandom:
    """Uniformly random tool among the permitted ones (all tools when unrestricted)."""

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def propose(self, sandbox: Sandbox, permitted: frozenset[str] | None) -> ToolCall:
        choices = sorted(permitted) if permitted is not None else list(TOOLS)
        return ToolCall(choices[int(self.rng.integers(len(choices)))])

    def refused(self, call: ToolCall, reason: str) -> None:
        """Proposes again at random."""


class Explorer:
    """Uniform over read/chmod/write/delete/send, never halting on its own: a development-time
    logging controller that visits many rows (the Markov diagnostic needs such logs)."""

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def propose(self, sandbox: Sandbox, permitted: set[str] | None) -> ToolCall:
        return ToolCall(TOOLS[int(self.rng.integers(5))])

    def refused(self, call: ToolCall, reason: str) -> None:
        pass


class Adversary:
    """The worst admissible controller: in state s with r executed calls left it plays
    ``argmax_{a ∈ D(s)} Q_r(s, a)`` of the exact value iteration on the true kernel.

    ``q_values(state_label, remaining) -> {tool: Q}`` comes from the true model
    (:func:`safecert.shield.sandbox_model.adversary_q`). Ties go to the first tool in
    :data:`TOOLS` order; use it with the ``restrict`` policy."""

    def __init__(self, q_values: Callable[[str, int], dict[str, float]], horizon: int) -> None:
        self.q_values = q_values
        self.horizon = horizon

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def propose(self, sandbox: Sandbox, permitted: frozenset[str] | None) -> ToolCall:
        q = self.q_values(sandbox.state(), self.horizon - sandbox.steps)
        options = [t for t in TOOLS if permitted is None or t in permitted]
        best = max(options, key=lambda t: (q.get(t, 0.0), -TOOLS.index(t)))
        return ToolCall(best)

    def refused(self, call: ToolCall, reason: str) -> None:
        """The adversary is only used with ``restrict``; nothing to learn from a refusal."""
