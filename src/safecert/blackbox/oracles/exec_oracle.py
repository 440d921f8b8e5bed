"""``exec:program arg ...`` — a vendor program speaking newline-delimited JSON on stdin/stdout.

Protocol (docs/architecture.md, "Policy oracles"): each request is one line
``{"observations": [[...], ...]}``; the program answers each with one line
``{"actions": [[...], ...]}``, in order, or ``{"error": "why"}`` to fail that call with its reason.
Its stdout carries replies only (diagnostics go to stderr, which safecert keeps the tail of for
error messages). safecert's own policy workers (``python:``, ``onnx:``, ``sb3:``,
``torchscript:``; see :mod:`safecert.blackbox.oracles.worker`) speak the same protocol, plus one
request of their own:
``{"observations": [[...], ...], "calls": [n1, n2, ...]}`` asks for one policy call per
consecutive group of n1, n2, … rows and is answered by ``{"calls": [reply1, reply2, ...]}``, each
reply what that call alone would have been answered (``{"actions": ...}`` or ``{"error": ...}``):
the calls of a lockstep step in one round trip (:meth:`ExecOracle.act_calls`).
"""

from __future__ import annotations

import numpy as np
import orjson

from safecert.blackbox.oracles import OracleSpec
from safecert.blackbox.oracles.base import (
    CallResult,
    OracleFailure,
    Reply,
    all_finite,
    call_groups,
    decode_reply,
    each_call,
    encode_request,
    health_check,
    json_call,
    parse_reply,
    reply_actions,
    stacked,
)
from safecert.isolation import Channel, ChannelFailure


class ExecOracle:
    """A long-running vendor process (:class:`safecert.isolation.Channel`: a deadline per call,
    a start-up grace, a supervised subtree killed on a timeout, a crash or ``close``, and a fresh
    process on the next call; ``restarts`` counts them). One request is one batch: ``B``
    observations cost one round trip."""

    def __init__(self, spec: OracleSpec, *, what: str = "vendor", label: str | None = None) -> None:
        self.spec = spec
        self.channel = Channel(
            spec.argv,
            cwd=spec.base_dir,
            timeout_s=spec.timeout_s,
            what=what,
            handshake=spec.in_worker,
        )
        self.label = label or f"vendor program {' '.join(spec.argv)!r}"

    @property
    def restarts(self) -> int:
        return self.channel.restarts

    def _round_trip(self, payload: bytes, timeout_s: float | None = None) -> bytes:
        try:
            return self.channel.round_trip(payload, timeout_s)
        except ChannelFailure as exc:
            raise OracleFailure(exc.reason) from None

    # -- the Oracle protocol ------------------------------------------------------------------
    def act(self, observations: np.ndarray) -> np.ndarray:
        return json_call(self._round_trip, observations)

    def act_calls(self, observations: np.ndarray, size: int) -> np.ndarray | list[CallResult]:
        """The :data:`~safecert.blackbox.oracles.base.Calls` of a lockstep step: one policy call
        per group of ``size`` rows, each answered as if alone (:meth:`post_calls`, waited for;
        one call is one :meth:`act`)."""
        if len(call_groups(len(observations), size)) <= 1:
            return each_call(self.act, observations, size)
        return self.post_calls(observations, size)()

    def post_calls(self, observations: np.ndarray, size: int) -> Reply:
        """:meth:`act_calls` in two halves: the step's request is sent now and the returned
        function reads and checks its reply, so the rollout can step other episodes while the
        policy worker answers (:data:`~safecert.blackbox.oracles.base.PostCalls`).

        A policy worker receives every call of the step in ONE round trip (a ``"calls"`` request)
        and calls the policy on each group in turn; the round trip's deadline is the sum of its
        calls' (``timeout_s`` each, from when the worker can have started on it:
        :meth:`safecert.isolation.Channel.post`), and the worker fails any one call that took
        longer than ``timeout_s``, so each call keeps a lone call's deadline. Each call's reply
        is checked as a lone call's would be
        (:func:`~safecert.blackbox.oracles.base.reply_actions`; when every reply holds numbers of
        one type, all at once: :func:`_same_rows`). A group holding a non-finite observation
        fails up front, as a lone call would; a worker that dies, hangs or answers out of
        protocol fails every call of the round trip, with the reason and how many calls it held
        (a request posted behind it goes to a fresh worker, as it would have had it waited). A vendor's own ``exec:`` program answers whole
        requests, so its calls go one round trip each, made now."""
        groups = call_groups(len(observations), size)
        if not self.spec.in_worker:
            done = each_call(self.act, observations, size)
            return lambda: done
        if len(groups) == 1:  # one call: a plain request, answered as each_call answers it
            return self._post_one(observations)
        obs = np.ascontiguousarray(observations, dtype=np.float64)
        out: dict[int, CallResult] = {}
        sent = list(range(len(groups)))
        if not all_finite(obs):
            sent = [k for k, rows in enumerate(groups) if all_finite(obs[rows.start : rows.stop])]
            for k in set(range(len(groups))) - set(sent):
                out[k] = OracleFailure("observations contain non-finite values")
            if not sent:
                failed = [out[k] for k in range(len(groups))]
                return lambda: failed
            obs = np.concatenate([obs[groups[k].start : groups[k].stop] for k in sent])
        sizes = [len(groups[k]) for k in sent]
        request = orjson.dumps(
            {"observations": obs, "calls": sizes, "timeout_s": self.spec.timeout_s},
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
        ticket = self.channel.post(request, self.spec.timeout_s * len(sent))

        def reply() -> np.ndarray | list[CallResult]:
            try:
                replies = _call_replies(parse_reply(self._collect(ticket)), len(sent))
            except OracleFailure as exc:
                whole = OracleFailure(
                    f"{exc.reason} (one round trip held {len(sent)} policy calls: each fails "
                    "with it)"
                )
                out.update(dict.fromkeys(sent, whole))
                return [out[k] for k in range(len(groups))]
            if len(sent) == len(groups):
                rows = _same_rows(replies, sizes)
                if rows is not None:
                    return rows
            for k, doc, n in zip(sent, replies, sizes, strict=True):
                try:
                    if isinstance(doc, dict) and "late" in doc:
                        raise OracleFailure(
                            f"no complete reply within {self.spec.timeout_s:g}s (this call of a "
                            "lockstep round trip overran its own deadline; the worker timed it)"
                        )
                    out[k] = reply_actions(doc, n)
                except OracleFailure as exc:
                    out[k] = exc
            return stacked([out[k] for k in range(len(groups))], groups)

        return reply

    def _post_one(self, observations: np.ndarray) -> Reply:
        """One call posted as :meth:`act` sends it; its reply as :func:`each_call` gives a lone
        call's (the actions, or ``[failure]``)."""
        obs = np.asarray(observations, dtype=np.float64)
        try:
            ticket = self.channel.post(encode_request(obs))
        except ValueError:  # JSON has no NaN: the call fails up front, as json_call fails it
            failed: list[CallResult] = [OracleFailure("observations contain non-finite values")]
            return lambda: failed

        def reply() -> np.ndarray | list[CallResult]:
            try:
                return np.asarray(decode_reply(self._collect(ticket), len(obs)))
            except OracleFailure as exc:
                return [exc]

        return reply

    def _collect(self, ticket: int) -> bytes:
        try:
            return self.channel.collect(ticket)
        except ChannelFailure as exc:
            raise OracleFailure(exc.reason) from None

    def start(self) -> None:
        """Start a policy worker now; its first call waits for it (:meth:`Channel.start`). A
        vendor's ``exec:`` program starts at its first call, which gives it the start-up grace."""
        if self.spec.in_worker:
            self.channel.start()

    def probe(self, observations: np.ndarray | None = None) -> None:
        """Start the program and make one real call (``observations``, or a zero-row batch)."""
        obs = np.zeros((0, 0)) if observations is None else observations
        health_check(self, obs, self.label)

    def close(self) -> None:
        """Close the vendor's stdin, give it 1 s to exit, then kill and reap it and everything it
        started (safe to call twice)."""
        self.channel.close()

    def __enter__(self) -> ExecOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_replies(doc: object, n_calls: int) -> list:
    """The per-call replies of a ``"calls"`` reply; :class:`OracleFailure` when it has none."""
    calls = doc.get("calls") if isinstance(doc, dict) else None
    if isinstance(calls, list) and len(calls) == n_calls:
        return calls
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        raise OracleFailure(f"the policy worker failed the request: {doc['error'][:300]}")
    raise OracleFailure(f'reply has no "calls" list of {n_calls} replies')


def _same_rows(replies: list, sizes: list[int]) -> np.ndarray | None:
    """The replies' rows stacked, when each reply is ``{"actions": rows}`` with its call's number
    of rows, every row a number or a flat list of numbers, the numbers all ints and bools or all
    finite floats, in rows of one shape: then these are exactly the rows
    :func:`~safecert.blackbox.oracles.base.check_actions` gives each call alone (int64 or
    float64), stacked as :func:`~safecert.blackbox.oracles.base.stacked` would. None otherwise:
    each reply is then checked alone."""
    rows: list = []
    for doc, n in zip(replies, sizes, strict=True):
        if type(doc) is not dict or "actions" not in doc:
            return None
        raw = doc["actions"]
        if type(raw) is not list or len(raw) != n:
            return None
        rows += raw
    kinds: set[type] = set()
    for row in rows:
        if type(row) is list:
            kinds.update(map(type, row))
        else:
            kinds.add(type(row))
    if not kinds:  # rows without numbers: check_actions's own dtype rules apply
        return None
    dtype: type[np.generic]
    if kinds <= {int, bool}:
        dtype = np.int64
    elif kinds == {float}:
        dtype = np.float64
    else:
        return None
    try:
        arr = np.array(rows, dtype=dtype)
    except (ValueError, OverflowError):  # ragged rows, an integer beyond 64 bits
        return None
    if dtype is np.float64 and not all_finite(arr):
        return None
    return arr
