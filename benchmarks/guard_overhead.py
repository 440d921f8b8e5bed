"""Overhead of the certified guard per tool call: through ``safecert shield serve`` (stdio) against a
direct call of the same upstream MCP server, and in process (``guarded``) against a bare call.

Everything runs in this process, one after the other, on the payments example
(``examples/payments``): the upstream is its tools server, the shield its certificate's, re-certified
here for a horizon of ``--per-session`` calls so that no measured call is blocked (every one is
forwarded and executed); sessions of that length are repeated until ``--calls`` calls are timed
(φ reads the whole history, so its cost grows with the session: 100 calls is far above the
example's T = 6). Each MCP timing is one ``call_tool("lookup_invoice")`` round trip from a real
``mcp.ClientSession``; φ and the action map run under their deadline as in production. Session
start-up (processes, handshake) is not timed. ``--action-map rules`` serves the example's rules file
(``actions.toml``, the same answers as ``phi:action``), which is evaluated without a deadline
hand-off; ``python`` (the default) its Python action map.

    .venv/bin/python benchmarks/guard_overhead.py [--calls 2000] [--per-session 100]
        [--action-map python|rules] [--json]

Writes ``benchmarks/out/guard_overhead.json``; figures go to ``benchmarks/RESULTS_guard.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PAYMENTS = ROOT / "examples" / "payments"
WARMUP = 5


def _stats(ns: list[int]) -> dict[str, float]:
    us = np.asarray(ns, dtype=float) / 1000.0
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
        "n": int(us.size),
    }


def _prepare(work: Path, calls: int) -> None:
    """The example in ``work`` with a certificate for horizon ``calls`` + warm-up (BOUND)."""
    from safecert.shield.certify import certify_shield

    for name in ("tools_server.py", "phi.py", "actions.toml"):
        shutil.copy(PAYMENTS / name, work / name)
    text = (
        (PAYMENTS / "model.toml").read_text().replace("horizon = 6", f"horizon = {calls + WARMUP}")
    )
    (work / "model.toml").write_text(text)
    certify_shield(work / "model.toml", PAYMENTS / "steps.jsonl", work / "cert")


async def _mcp_timings(command: list[str], cwd: Path, calls: int) -> list[int]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=command[0], args=command[1:], cwd=str(cwd), env=dict(os.environ)
    )
    out: list[int] = []
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        for _ in range(WARMUP):
            await s.call_tool("lookup_invoice", {"invoice": "INV-001"})
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            res = await s.call_tool("lookup_invoice", {"invoice": "INV-001"})
            out.append(time.perf_counter_ns() - t0)
            assert not res.is_error, res
    return out


def _inprocess_timings(work: Path, calls: int, rules: bool) -> tuple[list[int], list[int]]:
    if str(work) not in sys.path:
        sys.path.insert(0, str(work))
    import phi
    import tools_server

    from safecert.shield.action_rules import load_action_rules
    from safecert.shield.adapters import guarded

    bare, guard = [], []
    action = load_action_rules(work / "actions.toml") if rules else phi.action
    g = guarded([tools_server.lookup_invoice], work / "cert" / "certificate.json", phi.phi,
                action_map=action)  # fmt: skip
    for _ in range(WARMUP):
        g.lookup_invoice(invoice="INV-001")
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        tools_server.lookup_invoice(invoice="INV-001")
        bare.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        g.lookup_invoice(invoice="INV-001")
        guard.append(time.perf_counter_ns() - t0)
    return bare, guard


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--per-session", type=int, default=100)
    ap.add_argument("--action-map", choices=["python", "rules"], default="python")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rules = args.action_map == "rules"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        per = args.per_session
        sessions = max(1, args.calls // per)
        _prepare(work, per)
        print("direct upstream (stdio) …", file=sys.stderr, flush=True)
        direct = anyio.run(_mcp_timings, [sys.executable, "tools_server.py"], work, per * sessions)
        serve = [
            sys.executable, "-c", "import sys; from safecert.cli.main import main; sys.exit(main())",
            "shield", "serve", "--certificate", "cert/certificate.json",
            "--upstream", "python tools_server.py", "--abstraction", "phi:phi",
            "--action-map", "actions.toml" if rules else "phi:action",
        ]  # fmt: skip
        gateway: list[int] = []
        for k in range(sessions):
            print(f"through safecert shield serve (stdio), session {k + 1}/{sessions} …",
                  file=sys.stderr, flush=True)  # fmt: skip
            gateway += anyio.run(_mcp_timings, serve, work, per)
        print("in process (guarded) …", file=sys.stderr, flush=True)
        bare, guard = [], []
        for _ in range(sessions):
            b, g = _inprocess_timings(work, per, rules)
            bare, guard = bare + b, guard + g
    res = {
        "calls": per * sessions,
        "per_session": per,
        "action_map": args.action_map,
        "load_average": os.getloadavg(),
        "direct_upstream_stdio": _stats(direct),
        "gateway_stdio": _stats(gateway),
        "python_bare": _stats(bare),
        "python_guarded": _stats(guard),
    }
    for base, with_guard in (("direct_upstream_stdio", "gateway_stdio"),
                             ("python_bare", "python_guarded")):  # fmt: skip
        b, g = res[base], res[with_guard]
        res[f"{with_guard}_overhead"] = {
            "p50_us": g["p50_us"] - b["p50_us"],
            "p99_us": g["p99_us"] - b["p99_us"],
            "p50_ratio": g["p50_us"] / b["p50_us"],
        }
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "guard_overhead.json").write_text(json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    for key in ("direct_upstream_stdio", "gateway_stdio", "python_bare", "python_guarded"):
        s = res[key]
        print(f"{key:24s} p50 {s['p50_us']:9.1f} µs  p99 {s['p99_us']:9.1f} µs  (n = {s['n']})")
    for key in ("gateway_stdio_overhead", "python_guarded_overhead"):
        o = res[key]
        print(
            f"{key:24s} +{o['p50_us']:.1f} µs p50, +{o['p99_us']:.1f} µs p99, ×{o['p50_ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
