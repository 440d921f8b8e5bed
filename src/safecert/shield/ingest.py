"""Ordinary tool-calling transcripts → shield step logs (``safecert shield ingest``).

Input: OpenAI chat-completions transcripts, one conversation per line:
``{"id": "...", "messages": [...]}`` where assistant messages carry ``tool_calls``
(``{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}``) and each call's
result is a later ``{"role": "tool", "tool_call_id": ..., "content": ...}`` message. Output: the
step log ``safecert shield certify/synthesize --logs`` reads, one line per executed call, episode =
conversation (its ``id``, else ``c<line>``).

States and actions come from :class:`safecert.shield.session.Abstraction` — the same code, the
same deadlines, the same result decoding (:func:`decode_result`) as ``safecert shield serve`` — so a
shield certified from ingested transcripts is enforced on exactly the states it was certified on.
A call whose result begins ``blocked by shield`` (a guard refused it: it never executed) is not a
step. A call without a result, unparsable arguments or an abstraction failure is a one-line
DataError naming ``file:line``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safecert.errors import DataError
from safecert.shield.session import (
    BLOCKED_PREFIX,
    Abstraction,
    AbstractionFailed,
    JsonlSink,
    decode_result,
)


@dataclass(frozen=True)
class IngestSummary:
    """What an ingest wrote: conversations, executed calls (steps) and the output file."""

    conversations: int
    steps: int
    out: str


def _calls(messages: Any, where: str) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(tool, arguments, result) of each executed call of one conversation, in order."""
    if not isinstance(messages, list):
        raise DataError("messages must be a list", field=f"{where}.messages")
    results: dict[str, Any] = {}
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "tool" and "tool_call_id" in m:
            results[str(m["tool_call_id"])] = m.get("content")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or []:
            field = f"{where}.messages[{i}].tool_calls"
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise DataError("a tool call needs function.name", field=field)
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (json.JSONDecodeError, TypeError):
                raise DataError(f"arguments of {fn['name']!r} are not JSON", field=field) from None
            if not isinstance(args, dict):
                raise DataError(f"arguments of {fn['name']!r} must be an object", field=field)
            call_id = str(call.get("id"))
            if call_id not in results:
                raise DataError(
                    f"tool call {call_id!r} ({fn['name']}) has no tool result message",
                    field=field,
                    fix="keep the tool messages in the transcript, or drop the unanswered call",
                )
            content = results[call_id]
            if isinstance(content, str) and content.startswith(BLOCKED_PREFIX):
                continue  # refused by a guard: never executed, not a step
            yield fn["name"], args, decode_result(content)


def ingest(transcripts: Path, out: Path, abstraction: Abstraction) -> IngestSummary:
    """Convert ``transcripts`` into a step log at ``out`` (overwritten) through ``abstraction``."""
    transcripts = Path(transcripts)
    if not transcripts.is_file():
        raise DataError(f"{transcripts} does not exist", field="transcripts")
    model = abstraction.model
    conversations = steps = 0
    tmp = Path(out).with_name(Path(out).name + ".part")
    tmp.unlink(missing_ok=True)
    sink = JsonlSink(tmp)
    try:
        with transcripts.open("r", encoding="utf-8", errors="strict") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                where = f"{transcripts.name}:{lineno}"
                try:
                    rec = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise DataError(f"not valid JSON ({exc.msg})", field=where) from None
                if not isinstance(rec, dict) or "messages" not in rec:
                    raise DataError("a line must be an object with messages", field=where)
                episode = str(rec.get("id", f"c{lineno}"))
                history: list[dict[str, Any]] = []
                try:
                    state = abstraction.state(history)
                    for t, (tool, args, result) in enumerate(_calls(rec["messages"], where)):
                        action = abstraction.action(tool, args)
                        if action == model.actions[model.halt]:
                            sink.write(
                                {"episode": episode, "t": t, "state": model.state_repr(state),
                                 "action": action}
                            )  # fmt: skip
                            break
                        history.append(
                            {"tool": tool, "arguments": args, "result": result, "action": action}
                        )
                        after = abstraction.state(history)
                        sink.write(
                            {"episode": episode, "t": t, "state": model.state_repr(state),
                             "action": action, "next_state": model.state_repr(after)}
                        )  # fmt: skip
                        state, steps = after, steps + 1
                        if model.unsafe[state]:
                            break  # unsafe is absorbing: nothing after it is a step of the model
                except AbstractionFailed as exc:
                    raise DataError(str(exc), field=where) from None
                conversations += 1
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 ({exc.reason})", field="transcripts") from None
    finally:
        sink.close()
    tmp.replace(out)
    return IngestSummary(conversations, steps, str(out))
