"""Overhead of the certified guard per tool call: through ``safecert shield serve`` (stdio) against a
direct call of the same upstream MCP server, and in process (``guarded``) against a bare call
(targets: stdio p50 ≤ +1 ms and p99 ≤ +2 ms over the direct call).

Everything runs in this process on the payments example (``examples/payments``): the upstream is
its tools server, the shield its certificate's, re-certified here for a horizon of
``--per-session`` calls so that no measured call is blocked (every one is forwarded and executed).
One **repeat** is one session of ``--per-session`` timed calls to each arm — the direct upstream,
the gateway (one per ``--build``), the bare and the ``guarded`` Python call — in an order that
rotates from repeat to repeat, so a change of the shared machine's load falls on every arm; the
figures are the median [min–max] over repeats of each arm's per-session p50 and p99, and of the
gateway's overhead over the direct call of the same repeat; ``pooled`` lines give each arm's p50
and p99 over all its timed calls together (a p99 of ``repeats × per-session`` calls, steadier than
one session's second-largest value) and their difference from the baseline's. The ``relay`` arm puts a bare line
relay (:data:`RELAY`: a Python asyncio process that starts the upstream and copies lines both
ways, nothing else) where the gateway sits: what any process in the path costs on this machine,
so the gateway's own share is its overhead beyond the relay's. Each MCP timing is one
``call_tool("lookup_invoice")`` round trip from the same real ``mcp.ClientSession``; φ and the
action map run under their deadline as in production (φ reads the whole history, so its cost grows
with the session: 100 calls is far above the example's T = 6). Session start-up (processes,
handshake) is not timed. ``--action-map rules`` serves the example's rules file (``actions.toml``,
the same answers as ``phi:action``, evaluated without a deadline hand-off); ``python`` (the
default) its Python action map. ``--build NAME=SRC`` adds a gateway run from another source tree
(e.g. ``old=/tmp/old/src``, a ``git archive`` of an earlier commit) beside this one (``new``).

    .venv/bin/python benchmarks/guard_overhead.py [--repeats 10] [--per-session 100]
        [--action-map python|rules] [--build old=/tmp/old/src] [--json]

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
QUANTITIES = ("p50_us", "p99_us", "cpu_per_call_us")
RELAY = """
import asyncio, os, sys
async def main():
    loop = asyncio.get_running_loop()
    up = await asyncio.create_subprocess_exec(
        sys.executable, "tools_server.py", stdin=-1, stdout=-1, limit=1 << 26
    )
    r = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(r), os.fdopen(0, "rb", 0))
    t, p = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(1, "wb", 0))
    w = asyncio.StreamWriter(t, p, None, loop)
    async def to_upstream():
        while line := await r.readline():
            up.stdin.write(line)
            await up.stdin.drain()
        up.stdin.close()
    async def from_upstream():
        while line := await up.stdout.readline():
            w.write(line)
            await w.drain()
    await asyncio.gather(to_upstream(), from_upstream())
asyncio.run(main())
"""


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


async def _mcp_timings(
    command: list[str], cwd: Path, calls: int, src: Path | None = None
) -> tuple[list[int], float]:
    """Round trips of ``calls`` timed calls (ns), and the CPU time per call of the server
    process the client started (ns; the gateway's own, not its upstream's)."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=str(cwd), env=env)
    out: list[int] = []
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        for _ in range(WARMUP):
            await s.call_tool("lookup_invoice", {"invoice": "INV-001"})
        (server,) = _children(os.getpid())  # the process the client started
        cpu0 = _cpu_ns(server)
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            res = await s.call_tool("lookup_invoice", {"invoice": "INV-001"})
            out.append(time.perf_counter_ns() - t0)
            assert not res.is_error, res
        cpu = _cpu_ns(server) - cpu0
    return out, cpu / calls


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _cpu_ns(pid: int) -> int:
    """CPU time of all threads of ``pid`` so far (ns; the scheduler's own count)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue  # a thread that just ended
    return total


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


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": min(values), "max": max(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--per-session", type=int, default=100)
    ap.add_argument("--action-map", choices=["python", "rules"], default="python")
    ap.add_argument("--build", action="append", default=[], metavar="NAME=SRC")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rules = args.action_map == "rules"
    builds: dict[str, Path | None] = {"new": None}
    for spec in args.build:
        name, _, src = spec.partition("=")
        builds[name] = Path(src).resolve()
    serve = [
        sys.executable, "-c", "import sys; from safecert.cli.main import main; sys.exit(main())",
        "shield", "serve", "--certificate", "cert/certificate.json",
        "--upstream", "python tools_server.py", "--abstraction", "phi:phi",
        "--action-map", "actions.toml" if rules else "phi:action",
    ]  # fmt: skip
    per = args.per_session
    arms = ["direct", "relay", *(f"gateway[{b}]" for b in builds), "python"]
    rounds: list[dict[str, dict[str, float]]] = []
    pooled: dict[str, list[int]] = {}  # every timed call of an arm, all repeats together
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _prepare(work, per)
        for r in range(args.repeats):
            loads.append(os.getloadavg()[0])
            order = arms[r % len(arms) :] + arms[: r % len(arms)]
            got: dict[str, dict[str, float]] = {}
            for arm in order:
                print(f"repeat {r + 1}/{args.repeats}: {arm} …", file=sys.stderr, flush=True)
                if arm == "python":
                    bare, guard = _inprocess_timings(work, per, rules)
                    got["python_bare"], got["python_guarded"] = _stats(bare), _stats(guard)
                    pooled.setdefault("python_bare", []).extend(bare)
                    pooled.setdefault("python_guarded", []).extend(guard)
                    continue
                if arm == "direct":
                    ns, cpu = anyio.run(
                        _mcp_timings, [sys.executable, "tools_server.py"], work, per
                    )
                elif arm == "relay":
                    ns, cpu = anyio.run(_mcp_timings, [sys.executable, "-c", RELAY], work, per)
                else:
                    src = builds[arm[len("gateway[") : -1]]
                    ns, cpu = anyio.run(_mcp_timings, serve, work, per, src)
                got[arm] = {**_stats(ns), "cpu_per_call_us": cpu / 1000.0}
                pooled.setdefault(arm, []).extend(ns)
            d = got["direct"]
            got["overhead[relay]"] = {q: got["relay"][q] - d[q] for q in ("p50_us", "p99_us")}
            for b in builds:
                g = got[f"gateway[{b}]"]
                got[f"overhead[{b}]"] = {q: g[q] - d[q] for q in ("p50_us", "p99_us")}
            g, d = got["python_guarded"], got["python_bare"]
            got["overhead[python]"] = {q: g[q] - d[q] for q in ("p50_us", "p99_us")}
            rounds.append(got)
    res = {
        "repeats": args.repeats,
        "per_session": per,
        "action_map": args.action_map,
        "builds": {k: str(v) if v else "this tree" for k, v in builds.items()},
        "load_average_1min": _summary(loads),
        "figures_us": {
            key: {q: _summary([r[key][q] for r in rounds]) for q in QUANTITIES if q in value}
            for key, value in rounds[0].items()
        },
        "pooled_us": {arm: _stats(ns) for arm, ns in pooled.items()},
        "rounds": rounds,
    }
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "guard_overhead.json").write_text(json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"µs, median [min–max] over {args.repeats} repeats of {per} calls "
          f"({args.action_map} action map)")  # fmt: skip
    for key, v in res["figures_us"].items():
        cells = "  ".join(
            f"{q.removesuffix('_us')} {v[q]['median']:9.1f} [{v[q]['min']:.1f}–{v[q]['max']:.1f}]"
            for q in v
        )
        print(f"{key:18s} {cells}")
    pool = res["pooled_us"]
    for arm in pool:
        base = pool["python_bare" if arm.startswith("python") else "direct"]
        print(f"pooled {arm:18s} p50 {pool[arm]['p50_us']:9.1f} (+{pool[arm]['p50_us'] - base['p50_us']:.1f})  "
              f"p99 {pool[arm]['p99_us']:9.1f} (+{pool[arm]['p99_us'] - base['p99_us']:.1f})  "
              f"n {pool[arm]['n']}")  # fmt: skip
    load = res["load_average_1min"]
    print(f"load average {load['min']:.1f}–{load['max']:.1f} (median {load['median']:.1f}) "
          f"on {os.cpu_count()} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
