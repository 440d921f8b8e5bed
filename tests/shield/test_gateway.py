"""``safecert shield serve`` end to end: a real upstream MCP server process (the payments example,
which records what it executed), the real gateway process, real MCP client sessions over stdio and
over HTTP on 127.0.0.1. What was executed is read from the upstream's own record."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from safecert.shield.certify import certify_shield
from tests.shield.payments_support import HORIZON, SAFECERT, copy_payments, replay_violations

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402


def _serve_args(*extra: str) -> list[str]:
    return [
        "shield", "serve", "--certificate", "cert/certificate.json",
        "--upstream", "python tools_server.py", "--abstraction", "phi:phi",
        "--action-map", "phi:action", *extra,
    ]  # fmt: skip


def _record(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def test_stdio_gateway_blocks_forwards_counts_and_recertifies(tmp_path):
    work = copy_payments(tmp_path)
    record = tmp_path / "record.jsonl"
    params = StdioServerParameters(
        command=SAFECERT[0],
        args=[*SAFECERT[1:], *_serve_args("--steps-log", "steps.jsonl", "--audit-log", "a.jsonl")],
        cwd=str(work),
        env={**os.environ, "PAYMENTS_RECORD": str(record)},
    )
    seen: list[tuple[str, bool, str]] = []

    async def session() -> None:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == {"lookup_invoice", "request_approval", "pay", "halt"}
            calls = [
                ("pay", {"invoice": "INV-005", "amount": 5000}),  # pay_large unapproved: blocked
                ("lookup_invoice", {"invoice": "INV-005"}),
                ("pay", {"invoice": "INV-005", "amount": 50}),
                ("pay", {"invoice": "INV-005", "amount": 50}),  # duplicate: blocked
                *[("lookup_invoice", {"invoice": "INV-005"})] * 4,  # executed calls 3..6 = T
                ("lookup_invoice", {"invoice": "INV-005"}),  # the T+1-th: blocked
                ("halt", {}),
                ("lookup_invoice", {"invoice": "INV-005"}),  # after halt: blocked
            ]
            for name, args in calls:
                res = await s.call_tool(name, args)
                seen.append((name, bool(res.is_error), _text(res)))

    anyio.run(session)
    errors = [e for _, e, _ in seen]
    assert errors == [True, False, False, True, False, False, False, False, True, False, True]
    assert seen[0][2].startswith("blocked by shield")
    assert "permitted actions: halt, lookup, pay_small, request_approval" in seen[0][2]
    assert json.loads(seen[1][2])["found"] is True  # the upstream's result, returned
    assert f"horizon T = {HORIZON}" in seen[8][2]
    assert "session ended" in seen[10][2]
    executed = _record(record)
    assert len(executed) == HORIZON  # blocked calls never reached the upstream
    assert [c["tool"] for c in executed].count("pay") == 1
    assert replay_violations(executed) == []
    audit = _record(tmp_path / "a.jsonl")
    assert len(audit) == len(seen) and sum(a["allowed"] for a in audit) == HORIZON + 1
    # the deployment's steps log re-certifies the shield it ran under
    run = certify_shield(
        work / "cert/model.toml", work / "steps.jsonl", work / "recert",
        shield_path=work / "cert/shield.json",
    )  # fmt: skip
    assert run.certificate.result.steps == HORIZON + 1  # six calls and the halt


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended and been reaped, waiting for it (the gateway reaps its upstream
    before it exits; its exit has just been observed, so this is a wait for /proc, not a race)."""
    for _ in range(200):
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _http_gateway(work: Path, record: Path, hooks: str, *extra: str) -> Iterator[str]:
    """``safecert shield serve --transport http`` in ``work`` with φ and the action map of module
    ``hooks`` (its tools record to ``record``), yielding the MCP URL once it accepts connections;
    stopped on exit, and its upstream with it."""
    port = _free_port()
    args = _serve_args("--transport", "http", "--port", str(port), *extra)
    args[args.index("phi:phi")] = f"{hooks}:phi"
    args[args.index("phi:action")] = f"{hooks}:action"
    proc = subprocess.Popen(
        [*SAFECERT, *args], cwd=work, env={**os.environ, "PAYMENTS_RECORD": str(record)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    upstream: list[int] = []
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        else:
            raise AssertionError("the gateway did not start")
        upstream = _children(proc.pid)
        assert len(upstream) == 1
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(20)
    assert all(_gone(pid) for pid in upstream)  # stopped and reaped


async def _pays(url: str, n: int) -> list[bool]:
    """``n`` concurrent ``pay`` calls in one MCP session; whether each was an error."""
    async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
        await s.initialize()
        results: list[bool] = []

        async def pay() -> None:
            res = await s.call_tool("pay", {"invoice": "INV-002", "amount": 50})
            results.append(bool(res.is_error))

        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(pay)
        return results


def test_http_gateway_fails_closed_on_a_hung_raising_or_slow_abstraction(tmp_path):
    work = copy_payments(tmp_path)
    record = tmp_path / "record.jsonl"
    done: dict[str, object] = {}
    with _http_gateway(work, record, "hooks", "--abstraction-timeout", "3") as url:

        async def hung() -> None:  # the action map hangs on this call
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                done["hung"] = _text(await s.call_tool("lookup_invoice", {"invoice": "HANG"}))

        async def fragile() -> None:  # φ raises on the history after an executed call
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                first = await s.call_tool("lookup_invoice", {"invoice": "RAISE"})
                second = await s.call_tool("lookup_invoice", {"invoice": "INV-003"})
                done["fragile"] = (first.is_error, _text(second))

        async def slow_phi() -> None:  # φ hangs on the history after an executed call
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                first = await s.call_tool("lookup_invoice", {"invoice": "SLOW"})
                second = await s.call_tool("lookup_invoice", {"invoice": "INV-004"})
                done["slow"] = (first.is_error, _text(second))

        async def racer() -> None:
            done["racer"] = await _pays(url, 8)  # eight concurrent payments in one session

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                for job in (hung, slow_phi, racer, fragile):
                    tg.start_soon(job)

        anyio.run(main)
    text = done["hung"]
    assert text.startswith("blocked by shield")  # the hung action map's own 3 s deadline fired:
    assert "DeadlineExceeded: no answer within 3 s" in text  # not another error, and not never
    assert sorted(done["racer"]) == [False] + [True] * 7  # exactly one payment went through
    first_error, second = done["fragile"]
    assert first_error is False and "session ended" in second  # φ raised after the call
    slow_first_error, slow_second = done["slow"]  # executed; φ of its history timed out
    assert slow_first_error is False and "session ended" in slow_second
    assert "DeadlineExceeded" in slow_second
    executed = _record(record)
    by_invoice: dict[str, list[dict]] = {}
    for call in executed:
        by_invoice.setdefault(call["arguments"]["invoice"], []).append(call)
    # HANG and the calls after RAISE and SLOW never ran
    assert set(by_invoice) == {"INV-002", "RAISE", "SLOW"}
    assert [c["tool"] for c in by_invoice["INV-002"]] == ["pay"]
    assert replay_violations(by_invoice["INV-002"]) == []


GATE = """
import pathlib, time
from phi import action as _action, phi

def action(tool, arguments):
    if arguments.get("invoice") == "GATE":  # stuck until the test has seen the others finish
        pathlib.Path("entered").touch()
        while not pathlib.Path("released").exists():
            time.sleep(0.01)
    return _action(tool, arguments)
"""


def test_http_sessions_go_on_while_another_sessions_abstraction_is_stuck(tmp_path):
    """Causal, not timed: one session's action map cannot return before the other sessions have
    finished (the test releases it only then). Were sessions serialised behind it, the others could
    finish only after its 120 s deadline fired, and the gated call would come back blocked."""
    work = copy_payments(tmp_path)
    (work / "gate.py").write_text(GATE, encoding="utf-8")
    record = tmp_path / "record.jsonl"
    done: dict[str, object] = {}
    with _http_gateway(work, record, "gate", "--abstraction-timeout", "120") as url:

        async def gated() -> None:
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                res = await s.call_tool("lookup_invoice", {"invoice": "GATE"})
                done["gated"] = (res.is_error, _text(res), (work / "released").exists())

        async def others() -> None:
            while not (work / "entered").exists():  # the gated call is inside its action map
                await anyio.sleep(0.01)
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                res = await s.call_tool("lookup_invoice", {"invoice": "INV-003"})
                done["lookup"] = (res.is_error, _text(res))
            done["racer"] = await _pays(url, 8)
            (work / "released").touch()

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(gated)
                tg.start_soon(others)

        anyio.run(main)
    assert done["lookup"][0] is False and json.loads(done["lookup"][1])["found"] is True
    assert sorted(done["racer"]) == [False] + [True] * 7
    gated_error, gated_text, released_first = done["gated"]
    assert gated_error is False and json.loads(gated_text)["invoice"] == "GATE", gated_text
    assert released_first  # it could only go on once the others had finished
    tools = [(c["tool"], c["arguments"]["invoice"]) for c in _record(record)]
    assert sorted(tools) == [("lookup_invoice", "GATE"), ("lookup_invoice", "INV-003"),
                             ("pay", "INV-002")]  # fmt: skip


@pytest.mark.parametrize(
    "change, needle",
    [
        (("--upstream", "nosuchprogram --flag"), "did not start"),
        (("--upstream", "python -c 'import sys; sys.exit(3)'"), "did not start"),
        (("--abstraction", "nomodule:phi"), "--abstraction"),
        (("--on-block", "maybe"), "--on-block"),
        (("--certificate", "cert/shield.json"), "certificate"),
    ],
)
def test_serve_bad_input_is_one_line_exit_2(tmp_path, change, needle):
    work = copy_payments(tmp_path)
    args = _serve_args()
    option, value = change
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    res = subprocess.run(
        [*SAFECERT, *args], cwd=work, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], res.stderr
    assert "Traceback" not in res.stderr
