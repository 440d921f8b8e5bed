"""The oracle protocol and the checks every oracle applies to a reply.

An *oracle* answers a batch of observations with a batch of actions. Whatever transport carries the
answer (an in-process call, a pipe, HTTP, an ONNX session), a reply is accepted only if it is a
numeric array with one row per observation and only finite values; anything else raises
:class:`OracleFailure` with the reason, which the rollout records as the episode's failure reason
(conservative: an unanswered step is a failed episode).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import orjson

from safecert.errors import OracleError


class OracleFailure(Exception):
    """One oracle call failed (after its retries); ``reason`` is a one-line explanation.

    This is a run-time outcome, not bad input: the episode that made the call ends as a failure and
    the run continues. Set-up problems found before a run raise :class:`safecert.errors.OracleError`.
    """

    def __init__(self, reason: str) -> None:
        self.reason = " ".join(str(reason).split())
        super().__init__(self.reason)


@runtime_checkable
class Oracle(Protocol):
    """A black-box policy: ``act`` maps observations ``(B, *obs_shape)`` to actions ``(B, ...)``."""

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Health check before a run; raises ``OracleError`` with one clear line.

        With ``observations`` (e.g. one nominal reset observation) the check is a real call whose
        reply must pass :func:`check_actions`; without, each oracle makes the most real check it
        can (a zero-row request for exec/HTTP, one zero row for ONNX models with static shapes).
        """

    def act(self, observations: np.ndarray) -> np.ndarray:
        """Actions for a batch; raises :class:`OracleFailure` for a failed call."""

    def close(self) -> None:
        """Release processes, sessions and connections; safe to call twice."""


#: one policy call of a lockstep step: its actions, or the failure that ended it
CallResult = np.ndarray | OracleFailure
#: a lockstep step's calls: ``(observations, size)`` → one call per consecutive group of ``size``
#: rows (the last may be shorter, :func:`call_groups`); the replies' rows stacked in one array
#: when every call succeeded with a reply of one dtype and row shape (:func:`stacked`), else one
#: :data:`CallResult` per call, in order
Calls = Callable[[np.ndarray, int], "np.ndarray | list[CallResult]"]
#: a step's calls sent, their replies not yet read: called once, it waits for them (as
#: :data:`Calls` returns them)
Reply = Callable[[], "np.ndarray | list[CallResult]"]
#: :data:`Calls` in two halves: send the step's calls now, read their replies later (an oracle
#: whose calls run in another process, which can answer while the rollout steps other episodes)
PostCalls = Callable[[np.ndarray, int], Reply]


@lru_cache(maxsize=1024)
def call_groups(n_rows: int, size: int) -> tuple[range, ...]:
    """The rows of each call when ``n_rows`` observations are answered ``size`` rows a call."""
    return tuple(range(i, min(i + size, n_rows)) for i in range(0, n_rows, size))


def stacked(results: list[CallResult], groups: tuple[range, ...]) -> np.ndarray | list[CallResult]:
    """``results`` as one array of rows when every one is an array with its call's rows, all of
    one dtype and row shape (then checking the rows at once is checking each call's alone), else
    ``results`` as they are."""
    first = results[0]
    if not isinstance(first, np.ndarray) or not first.ndim:
        return results
    if len(results) == 1:  # one call (batch_size rows, or an in-process policy's whole step)
        return first if first.shape[0] == len(groups[0]) else results
    dtype, row = first.dtype, first.shape[1:]
    full = (len(groups[0]), *row)  # the shape of every call's reply but the last's
    last = len(results) - 1
    for k, result in enumerate(results):
        if not (
            type(result) is np.ndarray
            and result.dtype == dtype
            and (result.shape == full if k < last else result.shape == (len(groups[k]), *row))
        ):
            return results
    return np.concatenate(cast(list[np.ndarray], results))


def each_call(
    act: Callable[[np.ndarray], np.ndarray], observations: np.ndarray, size: int
) -> np.ndarray | list[CallResult]:
    """:data:`Calls` for an oracle whose calls cost the same one by one: ``act`` once per group of
    ``size`` rows, in order; a call's :class:`OracleFailure` is its result, not the step's."""
    groups = call_groups(len(observations), size)
    if len(groups) == 1:  # one call (an in-process policy at lockstep 1): its reply as it is
        try:
            return _array(act(observations))
        except OracleFailure as exc:
            return [exc]
    out: list[CallResult] = []
    for rows in groups:
        try:
            out.append(_array(act(observations[rows.start : rows.stop])))
        except OracleFailure as exc:
            out.append(exc)
    return stacked(out, groups)


def _array(reply: Any) -> np.ndarray:
    """``np.asarray(reply)``, without its call for a reply that is an ndarray already."""
    return reply if type(reply) is np.ndarray else np.asarray(reply)


def check_actions(raw: Any, n_rows: int) -> np.ndarray:
    """Validate a reply: numeric, ``n_rows`` rows, all finite.

    Integer (and boolean) replies keep an integer dtype (discrete action spaces); everything else is
    returned as float64. Raises :class:`OracleFailure` naming what is wrong.
    """
    if type(raw) is np.ndarray:  # an in-process policy's reply, usually
        arr = raw
    elif raw is None:
        raise OracleFailure(f"the vendor replied null; expected {_rows(n_rows)}")
    else:
        try:
            arr = np.asarray(raw)
        except (ValueError, TypeError) as exc:  # ragged nested lists
            raise OracleFailure(f"actions are not a rectangular array ({exc})") from None
    kind = arr.dtype.kind
    if kind not in "biuf":  # object arrays (kind "O") included
        raise OracleFailure(
            f"actions are not numbers ({_not_numbers(raw)}); expected {_rows(n_rows)}"
        )
    if arr.ndim == 0:
        raise OracleFailure("actions are a scalar, expected one row per observation")
    if arr.shape[0] != n_rows:
        raise OracleFailure(f"expected {n_rows} action rows, got {arr.shape[0]}")
    if kind != "f":
        return arr.astype(np.int64)
    arr = arr.astype(np.float64)  # our own copy: a vendor may reuse its reply buffer
    if not all_finite(arr):
        raise OracleFailure("actions contain non-finite values (NaN or inf)")
    return arr


#: the most values :func:`all_finite` checks as Python floats
_PYTHON_FINITE = 64


def all_finite(arr: np.ndarray) -> bool:
    """Whether every value of the float array ``arr`` is finite. Small arrays are checked as
    Python floats (a few numpy calls cost more than the values): their sum is finite only when
    every value is (a NaN or an infinity makes it NaN or infinite), and a sum that is not —
    a non-finite value, or finite values whose sum overflows — is decided value by value.
    Beyond :data:`_PYTHON_FINITE` values ``np.isfinite`` is cheaper (callgrind: it costs
    12.7–13.1k instructions at 6–136 values, the Python route 4.3k at 6, 10.0k at 48, 24.6k at
    136 — a lone run's half of 8 HalfCheetah observations)."""
    if arr.size > _PYTHON_FINITE:
        return bool(np.isfinite(arr).all())
    values = arr.ravel().tolist()
    return math.isfinite(sum(values)) or all(map(math.isfinite, values))


def _rows(n_rows: int) -> str:
    """What a reply should be, in words (built only for a reply that is not)."""
    return f"a list of {n_rows} action{'s' * (n_rows != 1)}, one per observation"


def _not_numbers(raw: Any) -> str:
    """What a non-numeric reply holds, in words: its first null or non-number and where
    (walked iteratively, so no nesting depth can exhaust the stack)."""
    stack: list[tuple[str, Any]] = [("actions", raw)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, list | tuple):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
        elif value is None:
            return f"null at {where}"
        elif isinstance(value, int) and not -(2**63) <= value < 2**64:
            return f"an integer of {value.bit_length()} bits at {where}, beyond 64 bits"
        elif not isinstance(value, int | float | np.number | np.bool_):
            return f"a {type(value).__name__} at {where}: {str(value)[:40]!r}"
    return f"dtype {np.asarray(raw, dtype=object).dtype}"


def encode_request(observations: np.ndarray) -> bytes:
    """The JSON body ``{"observations": [[...], ...]}`` (no trailing newline); every float is
    written in its shortest exact form, so the vendor reads back the same float64 values.
    ``ValueError`` for non-finite values (JSON has no NaN)."""
    obs = np.ascontiguousarray(observations, dtype=np.float64)
    if not all_finite(obs):
        raise ValueError("observations contain non-finite values")
    return orjson.dumps({"observations": obs}, option=orjson.OPT_SERIALIZE_NUMPY)


def decode_reply(payload: bytes | str, n_rows: int) -> np.ndarray:
    """Parse ``{"actions": [[...], ...]}`` and validate it with :func:`check_actions`;
    ``{"error": "why"}`` is the vendor's own failed call (its reason, cut to one line)."""
    return reply_actions(parse_reply(payload), n_rows)


def parse_reply(payload: bytes | str) -> Any:
    """A reply line parsed as JSON (:func:`_loads`); :class:`OracleFailure` naming what is wrong
    when it is not JSON or nests too deep."""
    try:
        return _loads(payload)
    except _TooDeep:
        raise OracleFailure(
            f'reply nests deeper than {MAX_JSON_DEPTH} levels; expected {{"actions": [[...], ...]}}'
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        preview = (
            payload[:60] if isinstance(payload, str) else payload[:60].decode(errors="replace")
        )
        why = " ".join(str(exc).split())[:120]
        if "integer string conversion" in why:  # the interpreter's limit on digits, not JSON's
            why = f"it holds an integer of more than {sys.get_int_max_str_digits()} digits"
        raise OracleFailure(
            f"reply is not valid JSON ({exc.__class__.__name__}: {why}; it starts {preview!r})"
        ) from None


def reply_actions(doc: Any, n_rows: int) -> np.ndarray:
    """The actions of one parsed reply document ``{"actions": [[...], ...]}`` checked by
    :func:`check_actions`; ``{"error": "why"}`` is the vendor's own failed call (its reason, cut
    to one line)."""
    if isinstance(doc, dict) and "actions" not in doc and isinstance(doc.get("error"), str):
        raise OracleFailure(f"the policy failed the call: {doc['error'][:300]}")
    if doc is None:
        raise OracleFailure('the vendor replied null; expected {"actions": [[...], ...]}')
    if not isinstance(doc, dict) or "actions" not in doc:
        raise OracleFailure('reply has no "actions" field')
    return check_actions(doc["actions"], n_rows)


#: the deepest nesting a vendor's reply may have (orjson's own limit; a reply is two levels deep)
MAX_JSON_DEPTH = 1024


class _TooDeep(Exception):
    """A reply nested deeper than :data:`MAX_JSON_DEPTH` levels."""


def _loads(payload: bytes | str) -> Any:
    """orjson (fast; nesting limited to :data:`MAX_JSON_DEPTH` levels, :class:`_TooDeep` beyond);
    JSON with ``NaN``/``Infinity``, which only the standard library reads, is read there so it
    fails as non-finite, not as invalid JSON — its recursion limit ends as :class:`_TooDeep` too,
    so no nesting, however deep, reaches the caller as a ``RecursionError``."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise _TooDeep from None
    try:
        return json.loads(payload)
    except RecursionError:
        raise _TooDeep from None


def json_call(send: Callable[[bytes], bytes], observations: np.ndarray) -> np.ndarray:
    """One JSON round trip: encode ``observations``, ``send`` the body, validate the reply.

    Non-finite observations cannot be sent (JSON has no NaN) and fail the call up front."""
    obs = np.asarray(observations, dtype=np.float64)
    try:
        body = encode_request(obs)
    except ValueError:
        raise OracleFailure("observations contain non-finite values") from None
    return decode_reply(send(body), len(obs))


def timed_call(call: Callable[..., Any], timeout_s: float, what: str, *args: Any) -> Any:
    """Run an in-process ``call(*args)`` (an ONNX session, a torch module, an SB3 model); its
    exception or a run longer than ``timeout_s`` is an :class:`OracleFailure`. In-process code
    cannot be interrupted, so the timeout is checked after it returns."""
    start = time.perf_counter()
    try:
        out = call(*args)
    except OracleFailure:
        raise
    except Exception as exc:  # the model's own errors (shape or type mismatch inside it)
        text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise OracleFailure(f"{what}: {text}") from None
    elapsed = time.perf_counter() - start
    if elapsed > timeout_s:
        raise OracleFailure(f"call took {elapsed:.3g}s > timeout {timeout_s}s")
    return out


def health_check(
    oracle: Oracle, observations: np.ndarray, what: str, fix: str | None = None
) -> None:
    """One real call that must succeed; its :class:`OracleFailure` becomes one set-up error
    (:class:`safecert.errors.OracleError` on ``policy``) naming ``what`` and the reason."""
    try:
        oracle.act(observations)
    except OracleFailure as exc:
        raise OracleError(
            f"{what} failed its health check: {exc.reason}", field="policy", fix=fix
        ) from None
