"""Hostile vendor replies through the black-box door (issue 27); writes RESULTS_door_replies.md.

A structure-aware generator draws replies of nine classes — ``deep`` (lists or objects nested
1,025 to 10^6 levels, under ``actions`` or at the top), ``null`` (the reply, ``actions``, or one
value), ``text`` (strings where numbers belong), ``nonfinite`` (``NaN``, ``Infinity``, ``1e400``),
``bigint`` (400-digit and 2^64 integers), ``ragged`` (rows of different lengths), ``shape`` (wrong
row count, a scalar), ``garbage`` (random bytes, invalid UTF-8, a valid reply cut short) and
``valid`` (the control: well-formed replies, which must be accepted) — and sends each through
three routes:

- ``decode`` — :func:`safecert.blackbox.oracles.base.decode_reply` in this process;
- ``exec`` — a real ``exec:`` vendor process that answers the i-th request with the i-th reply
  (:class:`~safecert.blackbox.oracles.exec_oracle.ExecOracle`: the supervised channel);
- ``http`` — a real HTTP server on 127.0.0.1 doing the same
  (:class:`~safecert.blackbox.oracles.http_oracle.HttpOracle`).

Contract per reply: the call returns a finite numeric array with one row per observation, or
raises ``OracleFailure`` with a one-line reason (the episode's failure reason). Anything else —
``RecursionError``, any other exception, a warning (turned into an error here), a reason over
one line — is a violation. Peak RSS of this process is reported (the 4 GB budget of issue 27).

    .venv/bin/python benchmarks/door_vendor_replies.py --cases 1000 [--routes decode,exec,http]
"""

from __future__ import annotations

import argparse
import collections
import http.server
import json
import resource
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CLASSES = ("deep", "null", "text", "nonfinite", "bigint", "ragged", "shape", "garbage", "valid")
ROWS = 2  # observations per call


def _rows(rng: np.random.Generator) -> list[list[float]]:
    return rng.uniform(-1, 1, size=(ROWS, 3)).round(6).tolist()


def draw(kind: str, rng: np.random.Generator) -> bytes:
    """One hostile reply of class ``kind`` (never holding a newline: the exec protocol is lines)."""
    rows = _rows(rng)
    if kind == "deep":
        depth = int(rng.choice([1025, 1100, 5_000, 50_000, 200_000, 1_000_000]))
        if rng.random() < 0.7:
            inner = b"[" * depth + b"]" * depth
        else:
            inner = b'{"a":' * depth + b"0" + b"}" * depth
        return inner if rng.random() < 0.2 else b'{"actions":' + inner + b"}"
    if kind == "null":
        choice = rng.integers(4)
        if choice == 0:
            return b"null"
        if choice == 1:
            return b'{"actions": null}'
        rows[int(rng.integers(ROWS))][int(rng.integers(3))] = None  # type: ignore[call-overload]
        return json.dumps({"actions": rows if choice == 2 else [None] * ROWS}).encode()
    if kind == "text":
        if rng.random() < 0.3:
            return json.dumps({"actions": "left"}).encode()
        rows[int(rng.integers(ROWS))][int(rng.integers(3))] = "x" * int(rng.integers(1, 200))  # type: ignore[call-overload]
        return json.dumps({"actions": rows}).encode()
    if kind == "nonfinite":
        token = str(rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]))
        text = json.dumps({"actions": rows})
        first = text.index("[[") + 2
        return (text[:first] + token + text[text.index(",", first) :]).encode()
    if kind == "bigint":
        big = str(rng.choice(["1" + "0" * 400, str(2**64), str(-(2**63) - 1), "9" * 5000]))
        text = json.dumps({"actions": [[0.0, 0.0, 0.0]] * ROWS})
        return text.replace("0.0", big, 1).encode()
    if kind == "ragged":
        rows[int(rng.integers(ROWS))] = rows[0][: int(rng.integers(0, 3))]
        return json.dumps({"actions": rows}).encode()
    if kind == "shape":
        choice = rng.integers(3)
        value = 1.0 if choice == 0 else rows[:1] if choice == 1 else rows * 3
        return json.dumps({"actions": value}).encode()
    if kind == "garbage":
        choice = rng.integers(3)
        if choice == 0:
            data = rng.integers(0, 256, size=int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
            return data.replace(b"\n", b" ")
        if choice == 1:
            return b'{"actions": [[\xff\xfe, 1]]}'
        full = json.dumps({"actions": rows}).encode()
        return full[: int(rng.integers(1, len(full)))]
    return json.dumps({"actions": rows}).encode()


def check(call: Callable[[], np.ndarray]) -> str:
    """Run one call under the contract; returns ``accepted``, ``failure`` or ``violation: …``."""
    from safecert.blackbox.oracles.base import OracleFailure

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            arr = call()
    except OracleFailure as exc:
        if not exc.reason or "\n" in exc.reason:
            return f"violation: reason of {exc.reason.count(chr(10)) + 1} lines"
        return "failure"
    except BaseException as exc:  # noqa: BLE001 - counting exactly what must not happen
        return f"violation: {type(exc).__name__}: {str(exc)[:80]}"
    if not (isinstance(arr, np.ndarray) and len(arr) == ROWS and np.isfinite(arr).all()):
        return "violation: accepted an invalid reply"
    return "accepted"


VENDOR = """
import sys
replies = open(sys.argv[1], "rb").read().split(b"\\n")
for i, line in enumerate(sys.stdin.buffer):
    sys.stdout.buffer.write(replies[i % len(replies)] + b"\\n")
    sys.stdout.buffer.flush()
"""


def serve(replies: list[bytes]) -> tuple[http.server.ThreadingHTTPServer, str]:
    """An HTTP vendor on 127.0.0.1 answering POST number i with ``replies[i]``."""
    count = iter(range(10**9))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server hook
            self.rfile.read(int(self.headers["Content-Length"]))
            body = replies[next(count) % len(replies)]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/act"


def run(cases: int, routes: list[str], seed: int) -> dict:
    from safecert.blackbox.oracles import make_oracle, parse_oracle_spec
    from safecert.blackbox.oracles.base import decode_reply

    rng = np.random.default_rng(seed)
    replies = [
        (kind, draw(kind, rng)) for kind in (CLASSES[i % len(CLASSES)] for i in range(cases))
    ]
    obs = np.zeros((ROWS, 4))
    table: dict[str, dict[str, collections.Counter]] = {}
    examples: list[str] = []
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for route in routes:
            counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
            start = time.perf_counter()
            server = None
            if route == "decode":
                calls = [lambda body=body: decode_reply(body, ROWS) for _, body in replies]
                oracle = None
            else:
                if route == "exec":
                    (folder / "vendor.py").write_text(VENDOR)
                    (folder / "replies.bin").write_bytes(b"\n".join(b for _, b in replies))
                    policy = "exec:python3 vendor.py replies.bin"
                else:
                    server, policy = serve([b for _, b in replies])
                spec = parse_oracle_spec(policy, base_dir=folder, timeout_s=30.0, retries=0)
                oracle = make_oracle(spec)
                calls = [lambda oracle=oracle: oracle.act(obs) for _ in replies]
            try:
                for (kind, _), call in zip(replies, calls, strict=True):
                    outcome = check(call)
                    counts[kind][outcome.partition(":")[0]] += 1
                    if outcome.startswith("violation") and len(examples) < 20:
                        examples.append(f"{route}/{kind}: {outcome}")
            finally:
                if oracle is not None:
                    oracle.close()
                if server is not None:
                    server.shutdown()
            seconds[route] = time.perf_counter() - start
            table[route] = counts
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"table": table, "examples": examples, "seconds": seconds, "peak_rss_mib": peak_mib}


def write_results(result: dict, cases: int, path: Path) -> None:
    lines = [
        "# Hostile vendor replies through the black-box door (issue 27)",
        "",
        f"`.venv/bin/python benchmarks/door_vendor_replies.py --cases {cases}` — {cases} replies "
        f"per route, {len(CLASSES)} classes in turn (module docstring). Contract: a finite array "
        "of one row per observation, or OracleFailure with a one-line reason; any other "
        "exception, a warning or a multi-line reason is a violation.",
        "",
        "| route | class | replies | accepted | failure reason | violations |",
        "|---|---|---|---|---|---|",
    ]
    for route, counts in result["table"].items():
        for kind in CLASSES:
            c = counts.get(kind, collections.Counter())
            total = sum(c.values())
            lines.append(
                f"| {route} | {kind} | {total} | {c['accepted']} | {c['failure']} | "
                f"{c['violation']} |"
            )
    lines += [
        "",
        "Seconds per route: "
        + ", ".join(f"{route} {s:.1f}" for route, s in result["seconds"].items())
        + f"; peak RSS {result['peak_rss_mib']:.0f} MiB (limit of issue 27: 4096 MiB).",
    ]
    lines += ["", "## Violations", ""]
    lines += [f"- {e}" for e in result["examples"]] or ["None."]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--routes", default="decode,exec,http")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/RESULTS_door_replies.md")
    args = parser.parse_args()
    sys.setrecursionlimit(1000)  # the interpreter's default: no headroom given to the decoder
    result = run(args.cases, args.routes.split(","), args.seed)
    write_results(result, args.cases, args.out)
    print(args.out.read_text())
    return 1 if result["examples"] else 0


if __name__ == "__main__":
    sys.exit(main())
