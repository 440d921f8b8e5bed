"""Deadline HTTP transport (issue 14): its per-call cost and its bound on a trickling vendor.

Two figures, both against a baseline run in the same process:

1. **overhead** — median wall time of ``HttpOracle.act`` (httpcore pool over the deadline backend)
   against a bare ``httpx.Client.post`` of the same body to the same server (the transport the
   oracle used before), batch 1, on examples/vendors/http_vendor.py;
2. **bound** — time until a call to a vendor that trickles its reply one byte every ``--drip`` s
   returns (or fails) with ``timeout_s = --timeout``: the bare ``httpx`` client (per-read timeouts)
   against the oracle (a deadline). Uses tests/blackbox/hostile_vendor.py.

    .venv/bin/python benchmarks/http_deadline.py [--calls 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from safecert.blackbox.oracles import OracleFailure, make_oracle, parse_oracle_spec  # noqa: E402


def serve(argv: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, line.split()[-1]


def median_us(fn, calls: int) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--drip", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=0.5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import httpx

    obs = np.random.default_rng(0).normal(size=(1, 14))
    body = json.dumps({"observations": obs.tolist()}).encode()
    proc, url = serve(
        [sys.executable, str(REPO / "examples/vendors/http_vendor.py"), "--port", "0"]
    )
    try:
        import socket

        # the oracle's previous transport: a pooled httpx.Client with TCP_NODELAY
        transport = httpx.HTTPTransport(
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        )
        client = httpx.Client(
            timeout=10.0, headers={"Content-Type": "application/json"}, transport=transport
        )
        base = median_us(
            lambda: json.loads(client.post(f"{url}/act", content=body).content), args.calls
        )
        oracle = make_oracle(parse_oracle_spec(f"{url}/act", base_dir=REPO))
        ours = median_us(lambda: oracle.act(obs), args.calls)
        oracle.close()
        client.close()
    finally:
        proc.kill()
        proc.wait()

    hostile = REPO / "tests" / "blackbox" / "hostile_vendor.py"
    obs4 = np.zeros((1, 4))
    body4 = json.dumps({"observations": obs4.tolist()}).encode()
    proc, url = serve([sys.executable, str(hostile), "--http", "--drip", str(args.drip)])
    try:
        client = httpx.Client(timeout=args.timeout)
        t = time.monotonic()
        try:
            client.post(f"{url}/act", content=body4)
            bare = "reply"
        except httpx.TimeoutException:
            bare = "timeout"
        bare_s = time.monotonic() - t
        client.close()
        oracle = make_oracle(
            parse_oracle_spec(f"{url}/act", base_dir=REPO, timeout_s=args.timeout, retries=3)
        )
        t = time.monotonic()
        try:
            oracle.act(obs4)
            ours_outcome = "reply"
        except OracleFailure:
            ours_outcome = "failed"
        ours_s = time.monotonic() - t
        oracle.close()
    finally:
        proc.kill()
        proc.wait()
    out = {
        "overhead": {"httpx_client_us": base, "http_oracle_us": ours, "ratio": ours / base},
        "bound": {
            "drip_s_per_byte": args.drip,
            "timeout_s": args.timeout,
            "httpx_per_read": {"seconds": bare_s, "outcome": bare},
            "http_oracle_deadline": {"seconds": ours_s, "outcome": ours_outcome},
        },
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        o = out["overhead"]
        print(
            f"per call, batch 1: httpx {o['httpx_client_us']:.0f} us, oracle "
            f"{o['http_oracle_us']:.0f} us (ratio {o['ratio']:.2f})"
        )
        print(
            f"trickle {args.drip}s/byte, timeout {args.timeout}s: httpx {bare_s:.2f}s ({bare}), "
            f"oracle {ours_s:.2f}s ({ours_outcome})"
        )


if __name__ == "__main__":
    main()
