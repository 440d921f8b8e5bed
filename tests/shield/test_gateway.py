"""``safecert shield serve`` end to end: a real upstream MCP server process (the payments example,
which records what it executed), the real gateway process, real MCP client sessions over stdio and
over HTTP on 127.0.0.1. What was executed is read from the upstream's own record."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from safecert.shield.certify import certify_shield
from tests.shield.payments_support import HORIZON, copy_payments, replay_violations

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

SAFECERT = [
    sys.executable,
    "-c",
    "import sys; from safecert.cli.main import main; sys.exit(main())",
]


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_gateway_sessions_are_independent_and_a_hung_phi_blocks_only_its_call(tmp_path):
    work = copy_payments(tmp_path)
    record = tmp_path / "record.jsonl"
    port = _free_port()
    args = _serve_args("--transport", "http", "--port", str(port), "--abstraction-timeout", "3")
    args[args.index("phi:phi")] = "hooks:phi"
    args[args.index("phi:action")] = "hooks:action"
    proc = subprocess.Popen(
        [*SAFECERT, *args], cwd=work, env={**os.environ, "PAYMENTS_RECORD": str(record)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "gateway did not start"
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        done: dict[str, object] = {}

        async def hung() -> None:
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                start = time.monotonic()
                res = await s.call_tool("lookup_invoice", {"invoice": "HANG"})
                done["hung"] = (_text(res), time.monotonic() - start)

        async def racer() -> None:
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                results = []

                async def pay() -> None:
                    res = await s.call_tool("pay", {"invoice": "INV-002", "amount": 50})
                    results.append(res.is_error)

                async with anyio.create_task_group() as tg:
                    for _ in range(8):  # eight concurrent payments in one session
                        tg.start_soon(pay)
                # the hung session's call is still waiting for its abstraction's deadline
                done["racer"] = (results, "hung" not in done)

        async def fragile() -> None:
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                first = await s.call_tool("lookup_invoice", {"invoice": "RAISE"})
                second = await s.call_tool("lookup_invoice", {"invoice": "INV-003"})
                done["fragile"] = (first.is_error, _text(second), "hung" not in done)

        async def slow_phi() -> None:  # φ hangs on the history after an executed call
            async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
                await s.initialize()
                first = await s.call_tool("lookup_invoice", {"invoice": "SLOW"})
                second = await s.call_tool("lookup_invoice", {"invoice": "INV-004"})
                done["slow"] = (first.is_error, _text(second))

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(hung)
                tg.start_soon(slow_phi)
                await anyio.sleep(0.05)
                tg.start_soon(racer)
                tg.start_soon(fragile)

        anyio.run(main)
        upstream = _children(proc.pid)
        assert len(upstream) == 1
    finally:
        proc.terminate()
        proc.wait(20)
    time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in upstream)  # stopped and reaped
    text, waited = done["hung"]
    assert text.startswith("blocked by shield") and "DeadlineExceeded" in text
    assert 2.5 < waited < 60  # blocked by its 3 s deadline, not before (and not never)
    results, hung_pending = done["racer"]
    assert sorted(results) == [False] + [True] * 7  # exactly one payment went through
    first_error, second, hung_pending_too = done["fragile"]
    assert first_error is False and "session ended" in second  # φ raised after the call
    assert hung_pending and hung_pending_too  # other sessions went on meanwhile
    slow_first_error, slow_second = done["slow"]  # executed; φ of its history timed out
    assert slow_first_error is False and "session ended" in slow_second
    executed = _record(record)
    by_invoice: dict[str, list[dict]] = {}
    for call in executed:
        by_invoice.setdefault(call["arguments"]["invoice"], []).append(call)
    # HANG and the calls after RAISE and SLOW never ran
    assert set(by_invoice) == {"INV-002", "RAISE", "SLOW"}
    assert [c["tool"] for c in by_invoice["INV-002"]] == ["pay"]
    assert replay_violations(by_invoice["INV-002"]) == []


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
