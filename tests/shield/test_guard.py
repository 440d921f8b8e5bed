"""The runtime guard: admissibility, fail-closed behaviour, the three policies, thread safety."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safecert.errors import ConfigError
from safecert.shield.guard import MAX_REFUSALS, POLICIES, Guard, permitted_actions, run_episode
from safecert.shield.sandbox import TOOLS, Sandbox, SandboxConfig, ToolCall, all_live_labels

LIVE = all_live_labels()


class Scripted:
    """Proposes a fixed sequence of calls (cycled), recording refusals."""

    def __init__(self, tools):
        self.tools = list(tools)
        self.refusals: list[str] = []

    def reset(self, rng):
        self.i = 0

    def propose(self, sandbox, permitted):
        tool = self.tools[self.i % len(self.tools)]
        self.i += 1
        return tool if not isinstance(tool, str) else ToolCall(tool)

    def refused(self, call, reason):
        self.refusals.append(reason)


class RandomProposer:
    """Random proposals over the tools plus junk (unknown tools, non-calls)."""

    JUNK = ["rm", "", "HALT", None]

    def __init__(self, seed):
        self.seed = seed

    def reset(self, rng):
        self.rng = np.random.default_rng(self.seed)

    def propose(self, sandbox, permitted):
        pool = list(permitted) if permitted is not None and self.rng.random() < 0.5 else list(TOOLS)
        if self.rng.random() < 0.1:
            junk = self.JUNK[int(self.rng.integers(len(self.JUNK)))]
            return ToolCall(junk) if junk is not None else "not a call"
        return ToolCall(pool[int(self.rng.integers(len(pool)))])

    def refused(self, call, reason):
        pass


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(np.random.default_rng(0))
    yield sb
    sb.close()


shields = st.fixed_dictionaries({lab: st.sets(st.sampled_from(TOOLS[:-1])) for lab in LIVE})


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(shields, st.sampled_from(POLICIES), st.integers(0, 2**32 - 1))
def test_guard_never_lets_a_forbidden_call_execute(sandbox, shield, policy, seed):
    guard = Guard(shield, sandbox.state, actions=TOOLS)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        res = run_episode(RandomProposer(seed), sandbox, guard, policy=policy, rng=rng)
        for e in res.transcript:
            assert e.call.tool == "halt" or e.call.tool in shield[e.state], (e.state, e.call)
        # blocked proposals do not advance the step count
        assert res.steps == len(res.transcript) <= sandbox.config.horizon
        assert res.interventions == len(res.blocked_tools)


def test_blocked_proposals_do_not_advance_steps_and_ask_again_halts_on_fourth_refusal(sandbox):
    shield = {lab: {"read"} for lab in LIVE}
    guard = Guard(shield, sandbox.state, actions=TOOLS)
    ctrl = Scripted(["delete", "delete", "delete", "read"])
    res = run_episode(ctrl, sandbox, guard, policy="ask_again", rng=np.random.default_rng(1))
    # three refusals, then read executes and resets the refusal count
    assert res.transcript[0].call.tool == "read" and res.transcript[0].step == 0
    assert len(ctrl.refusals) >= 3
    always_bad = Scripted(["chmod"])
    res = run_episode(always_bad, sandbox, guard, policy="ask_again", rng=np.random.default_rng(2))
    assert res.interventions == MAX_REFUSALS
    assert len(always_bad.refusals) == MAX_REFUSALS - 1
    assert [e.call.tool for e in res.transcript] == ["halt"] and res.steps == 1


def test_halt_policy_replaces_the_blocked_call_and_restrict_passes_the_permitted_set(sandbox):
    shield = {lab: {"read"} for lab in LIVE}
    guard = Guard(shield, sandbox.state, actions=TOOLS)
    res = run_episode(
        Scripted(["chmod"]), sandbox, guard, policy="halt", rng=np.random.default_rng(3)
    )
    assert [e.call.tool for e in res.transcript] == ["halt"] and res.interventions == 1

    seen = []

    class Peek(Scripted):
        def propose(self, sb, permitted):
            seen.append(permitted)
            return ToolCall("read")

    run_episode(Peek(["read"]), sandbox, guard, policy="restrict", rng=np.random.default_rng(4))
    assert seen and all(p == frozenset({"read", "halt"}) for p in seen)


def test_fails_closed():
    table = {"{}": {"read", "write"}}
    boom = Guard(table, lambda: 1 / 0, actions=TOOLS)
    d = boom.check("read")
    assert not d.allowed and "abstraction failed" in d.reason
    assert boom.check("halt").allowed  # halting is always safe (A3)
    assert boom.permitted() == frozenset({"halt"})
    unknown_state = Guard(table, lambda: "{mystery}", actions=TOOLS)
    assert not unknown_state.check("read").allowed
    not_a_label = Guard(table, lambda: None, actions=TOOLS)
    assert not not_a_label.check("read").allowed
    ok = Guard(table, lambda: "{}", actions=TOOLS)
    assert ok.check("read").allowed and not ok.check("delete").allowed
    for junk in ("rm -rf", "", None, 3, ["read"]):
        assert not ok.check(junk).allowed
    assert ok.checks == 2 + 5 and ok.blocked == 1 + 5
    with pytest.raises(ConfigError, match="unknown tools"):
        Guard({"{}": {"format_disk"}}, lambda: "{}", actions=TOOLS)
    with pytest.raises(ConfigError, match="policy"):
        run_episode(Scripted(["read"]), None, ok, policy="yolo", rng=np.random.default_rng())  # type: ignore[arg-type]


def test_unlisted_state_is_halt_only_everywhere():
    """One meaning of a state a shield does not list — halt-only — in the guard and in the shield
    reader behind `shield certify --shield` and `safecert verify`."""
    from pathlib import Path

    from safecert.shield.model import load_model
    from safecert.shield.report import allowed_from_json

    model = load_model(Path(__file__).resolve().parents[2] / "examples/shield/grid.toml")
    table = {"r0c0": ["up"], "r0c1": [], "r0c2": ["left", "halt"]}
    allowed = allowed_from_json(model, table)
    for s, label in enumerate(model.labels):
        guard = Guard(table, lambda label=label: label, actions=model.actions)
        row = {model.actions[a] for a in np.flatnonzero(allowed[s])}
        assert guard.permitted() == row == permitted_actions(table, label, "halt")
    assert permitted_actions(table, "r0c0", "halt") == {"up", "halt"}
    assert permitted_actions(table, "r6c6", "halt") == {"halt"}
    assert permitted_actions(table, None, "halt") == {"halt"}


def test_guard_is_thread_safe():
    table = {"{}": {"read"}}
    guard = Guard(table, lambda: "{}", actions=TOOLS)
    n_threads, per = 8, 5000
    tools = ["read", "delete", "halt", "send"]  # 2 of 4 blocked
    start = threading.Barrier(n_threads)
    wrong = []

    def work(offset):
        start.wait()
        for i in range(per):
            tool = tools[(i + offset) % 4]
            if guard.check(tool).allowed != (tool in ("read", "halt")):
                wrong.append(tool)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    assert guard.checks == n_threads * per
    assert guard.blocked == n_threads * per // 2


def test_the_sandbox_state_under_a_shield_is_unchanged_by_blocked_calls():
    cfg = SandboxConfig(confirm_prob=0.0, misfire_prob=0.0)
    with Sandbox(np.random.default_rng(5), config=cfg) as sb:
        shield = {lab: {"read"} for lab in LIVE}
        guard = Guard(shield, sb.state, actions=TOOLS)
        res = run_episode(
            Scripted(["chmod", "delete", "send", "read"]),
            sb,
            guard,
            policy="ask_again",
            rng=np.random.default_rng(6),
        )
        assert all(e.state == "{}" for e in res.transcript)
        assert sb.production.stat().st_mode & 0o222 == 0
        assert not any(sb.outbox.iterdir())


def test_observe_keeps_the_state_for_the_checks_and_never_a_stale_one():
    """φ once per step: after ``observe`` checks are look-ups (the abstraction is not called);
    while an ``observe`` is under way, or after it failed, each check evaluates for itself, so no
    check decides on the state from before the change it was told of."""
    table = {"{}": {"read"}, "{in_prod}": {"write"}}
    world = {"state": "{}", "calls": 0, "fail": False}
    entered, release = threading.Event(), threading.Event()

    def abstraction() -> str:
        world["calls"] += 1
        if world.get("hang_once"):
            world["hang_once"] = False
            entered.set()
            release.wait(30)
        if world["fail"]:
            raise RuntimeError("cannot read the world")
        return world["state"]

    guard = Guard(table, abstraction, actions=TOOLS, timeout_s=5.0)
    assert guard.check("read").allowed and world["calls"] == 1  # not observed: evaluated
    guard.observe()
    calls = world["calls"]
    assert [guard.check(t).allowed for t in ("read", "write", "read")] == [True, False, True]
    assert guard.permitted() == {"read", "halt"} and world["calls"] == calls  # look-ups only
    world["state"], world["hang_once"] = "{in_prod}", True  # the world changes; observe hangs
    t = threading.Thread(target=guard.observe)
    t.start()
    try:
        assert entered.wait(30)
        d = guard.check("read")  # evaluated for itself: the new state, not the kept one
        assert not d.allowed and d.state == "{in_prod}"
    finally:
        release.set()
        t.join(30)
    assert guard.check("write").allowed
    world["fail"] = True
    guard.observe()  # fails: nothing kept, every check evaluates (and fails closed)
    d = guard.check("write")
    assert not d.allowed and "RuntimeError" in d.reason
    world["fail"] = False
    assert guard.check("write").allowed  # the abstraction recovered: so does the check


def test_run_episode_evaluates_the_abstraction_once_per_reset_and_executed_call():
    cfg = SandboxConfig(confirm_prob=0.0, misfire_prob=0.0)
    with Sandbox(np.random.default_rng(7), config=cfg) as sb:
        calls = [0]

        def counted() -> str:
            calls[0] += 1
            return sb.state()

        guard = Guard({lab: {"read"} for lab in LIVE}, counted, actions=TOOLS)
        res = run_episode(
            Scripted(["chmod", "read", "read", "delete", "read"]), sb, guard,
            policy="ask_again", rng=np.random.default_rng(8),
        )  # fmt: skip
        assert res.interventions >= 2  # chmod and delete were checked and blocked
        assert calls[0] == 1 + res.steps  # the reset, then each executed call (halt included)
