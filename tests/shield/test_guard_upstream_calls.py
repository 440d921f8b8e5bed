"""``Upstream.call_tool`` against a real upstream MCP server process: the reply handed to
``early`` in the upstream pipe's data callback before the await resumes, an ``early`` that raises
failing its call (and only its call), and the call's deadline (one timer on the loop) when the
upstream does not answer in time."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import anyio
import pytest

from safecert.shield.upstream import ToolReply, Upstream

SERVER = '''
import time
from mcp.server.mcpserver import MCPServer
app = MCPServer("echo")
def echo(text: str) -> dict:
    """Echo the text (SLEEP:s sleeps s seconds first)."""
    if text.startswith("SLEEP:"):
        time.sleep(float(text[6:]))
    return {"text": text}
app.tool()(echo)
app.run()
'''


def _echoed(reply: ToolReply) -> str:
    return json.loads(reply.json["content"][0]["text"])["text"]


def test_early_sees_the_reply_in_the_pipe_callback_and_the_deadline_holds(tmp_path: Path):
    (tmp_path / "server.py").write_text(SERVER)

    async def main() -> None:
        up = Upstream([sys.executable, "server.py"], str(tmp_path), start_timeout_s=120.0)
        async with anyio.create_task_group() as tg:
            await tg.start(up.run)
            seen: list[tuple[ToolReply, object]] = []

            def early(reply: ToolReply) -> None:
                seen.append((reply, asyncio.current_task()))

            reply = await up.call_tool("echo", {"text": "a"}, 60.0, early)
            assert _echoed(reply) == "a" and not reply.result.is_error
            # handed over once, the same reply, in a callback (no task) before the await resumed
            assert seen == [(reply, None)]

            def broken(reply: ToolReply) -> None:
                raise RuntimeError("the client is gone")

            with pytest.raises(RuntimeError, match="the client is gone"):
                await up.call_tool("echo", {"text": "b"}, 60.0, broken)
            with pytest.raises(TimeoutError):  # the upstream sleeps 30 s: the deadline ends it
                await up.call_tool("echo", {"text": "SLEEP:30"}, 0.3, early)
            assert len(seen) == 1  # the late call never reached early
            after = await up.call_tool("echo", {"text": "c"}, 60.0)
            assert _echoed(after) == "c"
            tg.cancel_scope.cancel()

    anyio.run(main)
