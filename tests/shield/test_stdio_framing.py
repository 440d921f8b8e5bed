"""The gateway's line reader (:class:`safecert.shield.stdio_framing.LineReader`): however the pipe
cuts the bytes, every line reaches ``take`` or ``readline`` whole and in order, and a line over
the limit is not offered but reported by ``readline`` as a plain reader would."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.shield import stdio_framing
from safecert.shield.stdio_framing import LineReader

LINES = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\n"), max_size=12)


def _feed(reader: LineReader, data: bytes, cuts: list[int]) -> None:
    last = 0
    for cut in sorted({min(c, len(data)) for c in cuts}) + [len(data)]:
        if cut > last:
            reader.feed_data(data[last:cut])
            last = cut


async def _readlines(reader: LineReader) -> list[bytes]:
    out = []
    while line := await reader.readline():
        out.append(line)
    return out


@settings(max_examples=200, deadline=None)
@given(
    before=LINES,
    after=LINES,
    tail=st.binary(max_size=10).map(lambda b: b.replace(b"\n", b"")),
    cuts=st.lists(st.integers(0, 800), max_size=20),
    takes=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_every_line_arrives_whole_and_in_order_however_the_pipe_cuts_it(
    before, after, tail, cuts, takes
):
    async def run() -> tuple[list[bytes], list[bytes]]:
        reader = LineReader(limit=1 << 20)
        reader.feed_data(b"".join(before))  # read before the intercept is installed
        taken: list[bytes] = []
        answers = iter(takes)

        def take(line: bytes) -> bool:
            if next(answers):
                taken.append(line)
                return True
            return False

        reader.offer(take)
        _feed(reader, b"".join(after) + tail, cuts)
        reader.feed_eof()
        return taken, await _readlines(reader)

    taken, declined = asyncio.run(run())
    lines = before + after + ([tail] if tail else [])
    assert sorted(taken + declined) == sorted(lines)
    decisions = takes[: len(lines)]
    assert taken == [x for x, t in zip(lines, decisions, strict=True) if t]
    assert declined == [x for x, t in zip(lines, decisions, strict=True) if not t]


def test_a_line_over_the_limit_is_not_offered_and_readline_reports_it(monkeypatch):
    monkeypatch.setattr(stdio_framing, "LINE_LIMIT", 100)

    async def run() -> None:
        reader = LineReader(limit=100)
        taken: list[bytes] = []
        reader.offer(lambda line: taken.append(line) or True)
        reader.feed_data(b'{"a": 1}\n' + b"x" * 60)
        for _ in range(3):
            reader.feed_data(b"y" * 30)  # one line, 150 bytes and growing, in pieces
        reader.feed_data(b"\n")
        reader.feed_eof()
        assert taken == [b'{"a": 1}\n']
        with pytest.raises(ValueError, match="limit"):
            await reader.readline()

    asyncio.run(run())


class _Pipe:
    """The reader's transport as far as back-pressure goes: whether it is read."""

    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(
        st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"") + b"\n"), max_size=30
    ),
    cuts=st.lists(st.integers(0, 400), max_size=30),
    limit=st.integers(1, 4),
    steps=st.lists(st.booleans(), max_size=80),
)
def test_at_the_limit_no_line_is_offered_until_one_finishes_and_none_is_lost(
    lines, cuts, limit, steps
):
    """Lines taken and not finished never exceed the limit, however the pipe cuts the bytes and
    whenever calls finish; the pipe is not read while held; every line is offered once, in order,
    and the end of input comes after the last."""

    async def run() -> tuple[list[bytes], int]:
        reader = LineReader(limit=1 << 20)
        pipe = _Pipe()
        reader.set_transport(pipe)  # type: ignore[arg-type]
        taken: list[bytes] = []
        running: list[bytes] = []
        most = 0

        def take(line: bytes) -> bool:
            nonlocal most
            taken.append(line)
            running.append(line)
            most = max(most, len(running))
            return True

        reader.offer(take, lambda: len(running) >= limit)
        data = b"".join(lines)
        bounds = sorted({min(c, len(data)) for c in cuts} | {len(data)})
        chunks = [data[a:b] for a, b in zip([0, *bounds], bounds, strict=False) if b > a]
        todo = iter(steps)
        while chunks or running:
            feed = next(todo, not running)
            if feed and chunks and not pipe.paused:  # the pipe delivers only while read
                reader.feed_data(chunks.pop(0))
            elif running:
                running.pop(0)
                reader.release()
        reader.feed_eof()
        assert not pipe.paused
        assert await reader.readline() == b""  # the end of input, after every line
        return taken, most

    taken, most = asyncio.run(run())
    assert taken == lines
    assert most <= limit


def test_requests_the_client_cancelled_do_not_count_against_the_in_flight_bound():
    """mcp never answers a request its client cancelled (``notifications/cancelled``): such a
    request is settled by the SDK's ``on_request_unanswered`` hook, so cancelled requests do not
    stay in flight and a connection at its bound is read again (without the hook, the ping after
    two cancelled requests at a bound of 2 is never read)."""
    import os

    import anyio
    from mcp.server import Server

    from safecert.shield.stdio_framing import jsonrpc_lines, pipes

    async def hangs(ctx, params):
        await anyio.sleep(60)

    def line(message: dict) -> bytes:
        return json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n"

    async def run() -> list[dict]:
        to_server, from_client = os.pipe()
        to_client, from_server = os.pipe()
        rf = os.fdopen(to_server, "rb", buffering=0)
        wf = os.fdopen(from_server, "wb", buffering=0)
        reader, writer = await pipes(rf, wf)
        loop = asyncio.get_running_loop()
        answers = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(answers), os.fdopen(to_client, "rb", buffering=0)
        )
        server = Server("t", on_list_tools=hangs)
        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"},
        }
        got: list[dict] = []
        async with jsonrpc_lines(reader, writer, None, 2) as (rs, ws, closed, wire):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.run, rs, ws, server.create_initialization_options())
                os.write(from_client, line({"id": 0, "method": "initialize", "params": init}))
                got.append(json.loads(await asyncio.wait_for(answers.readline(), 10)))
                os.write(from_client, line({"method": "notifications/initialized"}))
                for rid in (1, 2):
                    os.write(from_client, line({"id": rid, "method": "tools/list"}))
                    await anyio.sleep(0.2)  # the handler has started
                    cancel = {"requestId": rid, "reason": "client gave up"}
                    os.write(
                        from_client, line({"method": "notifications/cancelled", "params": cancel})
                    )
                os.write(from_client, line({"id": 3, "method": "ping"}))
                got.append(json.loads(await asyncio.wait_for(answers.readline(), 10)))
                assert wire.in_flight == 0
                tg.cancel_scope.cancel()
        os.close(from_client)
        return got

    init_answer, ping_answer = asyncio.run(run())
    assert init_answer["id"] == 0 and "result" in init_answer
    assert ping_answer == {"jsonrpc": "2.0", "id": 3, "result": {}}
