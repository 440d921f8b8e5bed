"""``safecert shield serve`` as a production process: signals, client disconnects, the upstream's
process group and parent-death signal, restarts with backoff, ``--upstream-start-timeout`` and
``/healthz``. Everything is real: the gateway and its upstream are processes, the client speaks MCP
(the SDK's ``ClientSession``) over the gateway's own stdin/stdout or over HTTP on 127.0.0.1, and
signals are sent with ``kill``. The upstream writes its pid at start, so every test can check that
no upstream outlives the gateway."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.shield.payments_support import DEADLINE_S, PAYMENTS, SAFECERT, copy_payments

pytest.importorskip("mcp")

import mcp_types as types  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402

# an upstream MCP server whose lookup can sleep, crash, or report its pid
FLAKY = '''
import os, time
from pathlib import Path
# our pid as the test sees it: the upstream may run in a PID namespace of its own (getpid() is
# then 2), while /proc is the test's
PID = int(os.readlink("/proc/self"))
with open(os.environ["FLAKY_PIDS"], "a") as fh:
    fh.write(f"{PID}\\n")
from mcp.server.mcpserver import MCPServer
if Path("slow_start").exists():
    time.sleep(float(Path("slow_start").read_text()))
app = MCPServer("flaky")
def lookup_invoice(invoice: str) -> dict:
    """Look an invoice up (SLEEP:s sleeps first, CRASH kills this server)."""
    if invoice.startswith("SLEEP:"):
        Path("sleeping").write_text(str(PID))
        time.sleep(float(invoice[6:]))
    if invoice == "CRASH":
        os._exit(1)
    return {"invoice": invoice, "found": True, "pid": PID}
app.tool()(lookup_invoice)
app.run()
'''


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The payments certificate synthesized afresh from the example's logs (so the tests follow
    the certificate format of the code under test)."""
    from safecert.cli.main import main

    out = tmp_path_factory.mktemp("cert") / "cert"
    args = ["--model", str(PAYMENTS / "model.toml"), "--logs", str(PAYMENTS / "steps.jsonl")]
    assert main(["shield", "synthesize", *args, "--epsilon", "0.2", "--out", str(out)]) == 0
    return out


@pytest.fixture
def work(tmp_path: Path, certificate: Path) -> Path:
    """The payments example with the flaky upstream and the fresh certificate."""
    work = copy_payments(tmp_path)
    shutil.rmtree(work / "cert")
    shutil.copytree(certificate, work / "cert")
    (work / "flaky.py").write_text(FLAKY)
    shutil.copy(PAYMENTS / "actions.toml", work / "actions.toml")
    return work


def _argv(*extra: str) -> list[str]:
    return [
        *SAFECERT, "shield", "serve", "--certificate", "cert/certificate.json",
        "--upstream", "python flaky.py", "--abstraction", "phi:phi", "--action-map", "phi:action",
        *extra,
    ]  # fmt: skip


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "FLAKY_PIDS": str(work / "pids")}


def _pids(work: Path) -> list[int]:
    path = work / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    """Running (a zombie counts as gone: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _assert_gone(pids: list[int]) -> None:
    assert pids, "no upstream was started"
    deadline = time.monotonic() + DEADLINE_S
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if _alive(p)]}"
        time.sleep(0.05)


def _kill_during_the_call(proc: subprocess.Popen, work: Path) -> None:
    """Once the sleeping call has reached the upstream, SIGKILL the gateway: its upstream must be
    gone at once (the parent-death signal, not the call's end, stops it)."""
    _wait_for((work / "sleeping").exists, "the call to reach the upstream")
    upstream = _pids(work)
    assert upstream and all(_alive(p) for p in upstream)
    proc.kill()
    proc.wait(DEADLINE_S)
    _assert_gone(upstream)


async def _signal_during_a_slow_call(s, proc, sig: int, work: Path, out: dict) -> None:
    """Send ``sig`` once a 1.5 s call has reached the upstream, and wait for the call: its result
    lands in ``out["slow"]`` (an exception that ends it propagates)."""
    async with anyio.create_task_group() as tg:

        async def slow() -> None:
            out["slow"] = await s.call_tool("lookup_invoice", {"invoice": "SLEEP:1.5"})

        tg.start_soon(slow)
        await anyio.to_thread.run_sync(_wait_for, (work / "sleeping").exists, "the call")
        proc.send_signal(sig)


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@contextlib.asynccontextmanager
async def _stdio_gateway(work: Path, *extra: str) -> AsyncIterator[tuple[object, ClientSession]]:
    """The gateway as our child process (so we see its pid and exit code) and an MCP client
    session over its stdin/stdout, framed here independently of the gateway's code."""
    proc = await anyio.open_process(_argv(*extra), cwd=work, env=_env(work), stderr=None)
    in_send, in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_send, out_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        buffer = b""
        async with in_send:
            async for chunk in proc.stdout:
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    await in_send.send(SessionMessage(msg))

    async def write() -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async with out_recv:
                async for m in out_recv:
                    data = m.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await proc.stdin.send(data.encode() + b"\n")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(write)
            async with ClientSession(in_recv, out_send) as session:
                with anyio.fail_after(DEADLINE_S):
                    await session.initialize()
                yield proc, session
            tg.cancel_scope.cancel()
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with anyio.CancelScope(shield=True):
            await proc.wait()


async def _exit_code(proc) -> int:
    with anyio.fail_after(DEADLINE_S):
        return await proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stdio_signal_drains_the_call_in_flight_then_exits_128_plus_signal(work, sig):
    out: dict[str, object] = {}

    async def main() -> None:
        async with _stdio_gateway(work, "--shutdown-grace", "20") as (proc, s):
            await s.list_tools()  # the SDK's client validates results against the listed schema
            await _signal_during_a_slow_call(s, proc, sig, work, out)
            out["code"] = await _exit_code(proc)

    anyio.run(main)
    result = out["slow"]
    assert result.is_error is False and json.loads(_text(result))["found"] is True
    assert out["code"] == 128 + sig
    _assert_gone(_pids(work))


def test_stdio_signal_past_the_grace_period_stops_the_upstream(work):
    out: dict[str, object] = {}

    async def main() -> None:
        async with _stdio_gateway(work, "--shutdown-grace", "0.5") as (proc, s):
            async with anyio.create_task_group() as tg:

                async def slow() -> None:
                    with contextlib.suppress(Exception):
                        out["slow"] = await s.call_tool("lookup_invoice", {"invoice": "SLEEP:600"})

                tg.start_soon(slow)
                await anyio.to_thread.run_sync(_wait_for, (work / "sleeping").exists, "the call")
                proc.terminate()
                out["code"] = await _exit_code(proc)
                tg.cancel_scope.cancel()

    anyio.run(main)
    assert out["code"] == 143 and "slow" not in out
    _assert_gone(_pids(work))


def test_stdio_client_closing_its_connection_exits_0(work):
    out: dict[str, object] = {}

    async def main() -> None:  # the action map from the rules file (lookup_invoice → lookup)
        async with _stdio_gateway(work, "--action-map", "actions.toml") as (proc, s):
            res = await s.call_tool("lookup_invoice", {"invoice": "INV-001"})
            assert res.is_error is False, _text(res)
            await proc.stdin.aclose()
            out["code"] = await _exit_code(proc)

    anyio.run(main)
    assert out["code"] == 0
    _assert_gone(_pids(work))


def _send(proc: subprocess.Popen, *messages: dict) -> None:
    assert proc.stdin is not None
    for message in messages:
        proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def test_sigkill_of_the_gateway_during_a_call_takes_the_upstream_down(work):
    proc = subprocess.Popen(
        _argv(), cwd=work, env=_env(work), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}  # fmt: skip
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "lookup_invoice", "arguments": {"invoice": "SLEEP:600"}}}  # fmt: skip
        _send(proc, init)
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["id"] == 1
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call)
        _kill_during_the_call(proc, work)
    finally:
        proc.kill()
        proc.wait(DEADLINE_S)


def test_upstream_start_timeout_is_separate_from_the_call_timeout(work):
    (work / "slow_start").write_text("2")
    res = subprocess.run(
        _argv("--upstream-start-timeout", "0.5"), cwd=work, env=_env(work),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and "did not start" in lines[-1], res.stderr
    assert "Traceback" not in res.stderr
    _assert_gone(_pids(work))
    out: dict[str, object] = {}

    async def main() -> None:  # a 0.5 s call deadline does not bound the 2 s start
        async with _stdio_gateway(work, "--upstream-timeout", "0.5") as (proc, s):
            out["tools"] = {t.name for t in (await s.list_tools()).tools}
            await proc.stdin.aclose()
            out["code"] = await _exit_code(proc)

    anyio.run(main)
    assert out == {"tools": {"lookup_invoice", "halt"}, "code": 0}
    _assert_gone(_pids(work))


def test_stdio_upstream_death_ends_the_session_and_past_the_limit_exits_3(work):
    out: dict[str, object] = {}

    async def main() -> None:
        async with _stdio_gateway(work, "--upstream-restarts", "0") as (proc, s):
            crash = await s.call_tool("lookup_invoice", {"invoice": "CRASH"})
            out["crash"] = (crash.is_error, _text(crash))
            out["code"] = await _exit_code(proc)

    anyio.run(main)
    is_error, text = out["crash"]
    assert is_error and "upstream call failed" in text and "session ended" in text
    assert "exited during the call" in text
    assert out["code"] == 3
    _assert_gone(_pids(work))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


def test_http_upstream_death_restarts_with_backoff_healthz_follows_and_the_limit_exits_3(work):
    port = _free_port()
    proc = subprocess.Popen(
        _argv("--transport", "http", "--port", str(port), "--upstream-restarts", "1"),
        cwd=work, env=_env(work), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    seen: list[tuple[int, dict]] = []

    async def call(invoice: str) -> tuple[bool, str]:
        async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
            await s.initialize()
            res = await s.call_tool("lookup_invoice", {"invoice": invoice})
            return bool(res.is_error), _text(res)

    try:
        _wait_for(lambda: _health(port)[0] == 200, "the gateway to be healthy")
        first = anyio.run(call, "INV-001")
        (work / "slow_start").write_text("1")  # the restart takes a while: /healthz sees it
        crash = anyio.run(call, "CRASH")
        _wait_for(lambda: seen.append(_health(port)) or seen[-1][0] == 200, "the restart")
        second = anyio.run(call, "INV-002")
        upstreams = _pids(work)
        crash_again = anyio.run(call, "CRASH")
        code = proc.wait(DEADLINE_S)
    finally:
        proc.kill()
        proc.wait(DEADLINE_S)
    assert first[0] is False and second[0] is False
    assert json.loads(first[1])["pid"] != json.loads(second[1])["pid"]  # a new upstream process
    assert len(upstreams) == 2
    for is_error, text in (crash, crash_again):
        assert is_error and "exited during the call" in text and "session ended" in text
    restarting = [body for status, body in seen if status == 503]
    assert restarting and all(b["upstream"] == "restarting" for b in restarting)
    assert seen[-1][1]["upstream"] == "up" and seen[-1][1]["upstream_restarts"] == 1
    assert code == 3
    assert proc.stderr is not None and "--upstream-restarts" in proc.stderr.read()
    _assert_gone(_pids(work))


def test_http_metrics_count_decisions_and_sigterm_exits_143(work):
    port = _free_port()
    proc = subprocess.Popen(
        _argv("--transport", "http", "--port", str(port)), cwd=work, env=_env(work),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def metrics() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()

    def open_sessions() -> int:
        return _health(port)[1]["sessions"]

    async def session() -> tuple[list[bool], int]:
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
            await s.initialize()
            errors = []
            for name in ("lookup_invoice", "no_such_tool", "lookup_invoice", "halt", "halt"):
                res = await s.call_tool(name, {"invoice": "INV-001"} if name != "halt" else {})
                errors.append(bool(res.is_error))
            return errors, await anyio.to_thread.run_sync(open_sessions)

    try:
        _wait_for(lambda: _health(port)[0] == 200, "the gateway to be healthy")
        opened = [anyio.run(session) for _ in range(3)]  # each client DELETEs its session
        _wait_for(lambda: open_sessions() == 0, "the ended sessions to be forgotten")
        text = metrics()
        proc.terminate()
        code = proc.wait(DEADLINE_S)
    finally:
        proc.kill()
        proc.wait(DEADLINE_S)
    # every session decided on its own history, was counted open while it was, and is forgotten
    assert opened == [([False, True, False, False, True], 1)] * 3
    counted = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    calls = "safecert_shield_calls_total"
    assert counted == {
        f'{calls}{{outcome="forwarded",reason=""}}': 6,
        f'{calls}{{outcome="blocked",reason="unknown_tool"}}': 3,
        f'{calls}{{outcome="halt",reason=""}}': 3,
        f'{calls}{{outcome="blocked",reason="session_ended"}}': 3,
        "safecert_shield_upstream_restarts_total": 0,
        "safecert_shield_upstream_up": 1,
        "safecert_shield_sessions": 0,
    }
    assert code == 143
    _assert_gone(_pids(work))


def _http_gateway(work: Path, port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        _argv("--transport", "http", "--port", str(port), *extra), cwd=work, env=_env(work),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _wait_for(lambda: _health(port)[0] == 200, "the gateway to be healthy")
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_http_signal_drains_the_call_in_flight_then_exits_128_plus_signal(work, sig):
    port = _free_port()
    proc = _http_gateway(work, port, "--shutdown-grace", "20")
    out: dict[str, object] = {}

    async def main() -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
            await s.initialize()
            await _signal_during_a_slow_call(s, proc, sig, work, out)

    try:
        try:
            anyio.run(main)
        except BaseExceptionGroup as group:
            # a message the client's SDK posts in the background (its initialized notification,
            # late under load) finds the draining gateway no longer listening, or its connection
            # closed by the drain: not under test
            _, rest = group.split(lambda e: type(e).__name__ in ("ConnectError", "ReadError"))
            if rest is not None or "slow" not in out:
                raise
        code = proc.wait(DEADLINE_S)
    finally:
        proc.kill()
        proc.wait(DEADLINE_S)
    result = out["slow"]
    assert result.is_error is False and json.loads(_text(result))["found"] is True
    assert code == 128 + sig
    _assert_gone(_pids(work))


def test_http_sigkill_of_the_gateway_during_a_call_takes_the_upstream_down(work):
    port = _free_port()
    proc = _http_gateway(work, port)

    async def call() -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
            await s.initialize()
            await s.call_tool("lookup_invoice", {"invoice": "SLEEP:600"})

    def client() -> None:
        with contextlib.suppress(Exception):
            anyio.run(call)

    caller = threading.Thread(target=client, daemon=True)
    try:
        caller.start()
        _kill_during_the_call(proc, work)
    finally:
        proc.kill()
        proc.wait(DEADLINE_S)
    caller.join(DEADLINE_S)
    assert not caller.is_alive()  # the client's call ended with the connection


def _get(port: int, path: str) -> tuple[int, str]:
    """The status and body of ``GET path`` (any status, raw text)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_http_past_the_in_flight_bound_answers_503_and_recovers(work):
    """Over HTTP nothing holds requests back but the bound: with ``HTTP_MAX_IN_FLIGHT`` connections
    open, the next request is answered 503 by the server itself (not our ``/healthz``, which
    answers JSON), and once they close the gateway answers again, its upstream untouched."""
    import resource

    from safecert.shield.serve import HTTP_MAX_IN_FLIGHT

    need = 2 * HTTP_MAX_IN_FLIGHT + 256  # ours and, inherited, the gateway's descriptors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need} descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    port = _free_port()
    try:
        proc = _http_gateway(work, port)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    held: list[socket.socket] = []
    try:
        for _ in range(HTTP_MAX_IN_FLIGHT):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        _wait_for(lambda: _get(port, "/metrics")[0] == 503, "the bound to be reached")
        status, body = _get(port, "/healthz")
        assert (status, body) == (503, "Service Unavailable")
        for s in held:
            s.close()
        held.clear()
        _wait_for(lambda: _health(port)[0] == 200, "the gateway to answer again")
        assert _health(port)[1]["upstream_restarts"] == 0
        proc.terminate()
        code = proc.wait(DEADLINE_S)
    finally:
        for s in held:
            s.close()
        proc.kill()
        proc.wait(DEADLINE_S)
    assert code == 143
    _assert_gone(_pids(work))
