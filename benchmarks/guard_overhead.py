"""Overhead of the certified guard per tool call: through ``safecert shield serve`` (stdio) against a
direct call of the same upstream MCP server, and in process (``guarded``) against a bare call
(targets: stdio p50 ≤ +1 ms and p99 ≤ +2 ms over the direct call).

Everything runs in this process on the payments example (``examples/payments``): the upstream is
its tools server, the shield its certificate's, re-certified here for a horizon of
``--per-session`` calls so that no measured call is blocked (every one is forwarded and executed).
One **repeat** opens one session to each arm — the direct upstream, a bare relay, the gateway (one
per ``--build``) — from the same client, and then makes ``--per-session`` rounds of calls: in each
round one call to every arm, in an order that rotates from round to round, and one bare and one
``guarded`` Python call. The arms' calls are **interleaved**, so whatever the shared machine does
falls on all of them alike, and every gateway call has a direct call made just before or after it:
``paired`` is the median over all calls of (arm − direct) of the same round. Per repeat, each
arm's p50 and p99 and their difference from the direct call's; ``pooled`` gives each arm's p50
and p99 over all its timed calls (a p99 of ``repeats × per-session`` calls). The ``relay`` arm puts a bare line
relay (:data:`RELAY`: a Python asyncio process that starts the upstream and copies lines both
ways, nothing else) where the gateway sits: what any process in the path costs on this machine,
so the gateway's own share is its overhead beyond the relay's. Each MCP timing is one
``call_tool("lookup_invoice")`` round trip from a real ``mcp.ClientSession``; φ and the
action map run under their deadline as in production (φ reads the whole history, so its cost grows
with the session: 100 calls is far above the example's T = 6). Session start-up (processes,
handshake) is not timed. ``--action-map rules`` serves the example's rules file (``actions.toml``,
the same answers as ``phi:action``, evaluated without a deadline hand-off); ``python`` (the
default) its Python action map; ``both`` runs a gateway with each (arms ``gateway[NAME:rules]``
and ``gateway[NAME:python]``). ``--build NAME=SRC`` adds a gateway run from another source tree
beside this one (``new``): a directory (e.g. ``old=/tmp/old/src``) or a git revision of this
repository (e.g. ``old=9fb03c3``, its ``src`` put in a temporary directory).

    .venv/bin/python benchmarks/guard_overhead.py [--repeats 10] [--per-session 100]
        [--action-map python|rules|both] [--build old=/tmp/old/src] [--json]

Writes ``benchmarks/out/guard_overhead.json``; figures go to ``benchmarks/RESULTS_guard.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def build_tree(src: str, keep: contextlib.ExitStack) -> Path:
    """The ``src`` directory of a ``--build``: ``src`` itself when it is a directory, else a git
    revision of this repository, put in a temporary directory (``git archive REV src``) that
    lives as long as ``keep``."""
    if Path(src).is_dir():
        return Path(src).resolve()
    tmp = Path(keep.enter_context(tempfile.TemporaryDirectory()))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", src, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp / "src"


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


async def _interleaved(
    arms: dict[str, tuple[list[str], Path | None]],
    cwd: Path,
    calls: int,
    inprocess: Any,
) -> tuple[dict[str, list[int]], dict[str, float]]:
    """One session to every arm (``name -> (command, src tree or None)``), then ``calls``
    rounds: one timed call to every arm in an order rotating from round to round, and one call of
    ``inprocess()`` (which times the Python arms itself). The round trips per arm (ns), and the
    CPU time per call of each server process the client started (ns; not its upstream's)."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    names = list(arms)
    out: dict[str, list[int]] = {name: [] for name in names}
    async with contextlib.AsyncExitStack() as stack:
        sessions, servers = {}, {}
        for name, (command, src) in arms.items():
            env = dict(os.environ)
            if src is not None:
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
            before = set(_children(os.getpid()))
            params = StdioServerParameters(
                command=command[0], args=command[1:], cwd=str(cwd), env=env
            )
            r, w = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(r, w))
            await session.initialize()
            for _ in range(WARMUP):
                await session.call_tool("lookup_invoice", {"invoice": "INV-001"})
            (servers[name],) = set(_children(os.getpid())) - before  # the process started
            sessions[name] = session
        cpu0 = {name: _cpu_ns(pid) for name, pid in servers.items()}
        for k in range(calls):
            for name in names[k % len(names) :] + names[: k % len(names)]:
                t0 = time.perf_counter_ns()
                res = await sessions[name].call_tool("lookup_invoice", {"invoice": "INV-001"})
                out[name].append(time.perf_counter_ns() - t0)
                assert not res.is_error, (name, res)
            inprocess()
        cpu = {name: (_cpu_ns(pid) - cpu0[name]) / calls for name, pid in servers.items()}
    return out, cpu


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


def _inprocess(work: Path, rules: bool) -> tuple[Any, list[int], list[int]]:
    """A function that times one bare and one ``guarded`` call of the tool (appending to the two
    lists returned with it); the guarded tool is warmed up."""
    if str(work) not in sys.path:
        sys.path.insert(0, str(work))
    import phi
    import tools_server

    from safecert.shield.action_rules import load_action_rules
    from safecert.shield.adapters import guarded

    bare: list[int] = []
    guard: list[int] = []
    action = load_action_rules(work / "actions.toml") if rules else phi.action
    g = guarded([tools_server.lookup_invoice], work / "cert" / "certificate.json", phi.phi,
                action_map=action)  # fmt: skip
    for _ in range(WARMUP):
        g.lookup_invoice(invoice="INV-001")

    def once() -> None:
        t0 = time.perf_counter_ns()
        tools_server.lookup_invoice(invoice="INV-001")
        bare.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        g.lookup_invoice(invoice="INV-001")
        guard.append(time.perf_counter_ns() - t0)

    return once, bare, guard


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": min(values), "max": max(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--per-session", type=int, default=100)
    ap.add_argument("--action-map", choices=["python", "rules", "both"], default="python")
    ap.add_argument("--build", action="append", default=[], metavar="NAME=SRC")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with contextlib.ExitStack() as keep:  # the trees of git revisions
        builds: dict[str, Path | None] = {"new": None}
        for spec in args.build:
            name, _, src = spec.partition("=")
            builds[name] = build_tree(src, keep)
        _run(args, builds)


def _run(args: argparse.Namespace, builds: dict[str, Path | None]) -> None:
    maps = ["rules", "python"] if args.action_map == "both" else [args.action_map]

    def serve(mapping: str) -> list[str]:
        return [
            sys.executable, "-c", "import sys; from safecert.cli.main import main; sys.exit(main())",
            "shield", "serve", "--certificate", "cert/certificate.json",
            "--upstream", "python tools_server.py", "--abstraction", "phi:phi",
            "--action-map", "actions.toml" if mapping == "rules" else "phi:action",
        ]  # fmt: skip

    arms: dict[str, tuple[list[str], Path | None]] = {
        "direct": ([sys.executable, "tools_server.py"], None),
        "relay": ([sys.executable, "-c", RELAY], None),
    }
    for b, src in builds.items():
        for m in maps:
            arms[f"gateway[{b}:{m}]" if len(maps) > 1 else f"gateway[{b}]"] = (serve(m), src)
    per = args.per_session
    rounds: list[dict[str, dict[str, float]]] = []
    pooled: dict[str, list[int]] = {}  # every timed call of an arm, all repeats together
    paired: dict[str, list[int]] = {}  # arm − direct, call by call (same round)
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _prepare(work, per)
        for r in range(args.repeats):
            loads.append(os.getloadavg()[0])
            print(f"repeat {r + 1}/{args.repeats} …", file=sys.stderr, flush=True)
            once, bare, guard = _inprocess(work, maps[-1] == "rules")
            ns, cpu = anyio.run(_interleaved, arms, work, per, once)
            got: dict[str, dict[str, float]] = {}
            for arm, times in ns.items():
                got[arm] = {**_stats(times), "cpu_per_call_us": cpu[arm] / 1000.0}
                pooled.setdefault(arm, []).extend(times)
                paired.setdefault(arm, []).extend(
                    t - d for t, d in zip(times, ns["direct"], strict=True)
                )
            got["python_bare"], got["python_guarded"] = _stats(bare), _stats(guard)
            pooled.setdefault("python_bare", []).extend(bare)
            pooled.setdefault("python_guarded", []).extend(guard)
            paired.setdefault("python_guarded", []).extend(
                g - b for g, b in zip(guard, bare, strict=True)
            )
            d = got["direct"]
            for arm in ns:
                if arm != "direct":
                    got[f"overhead:{arm}"] = {q: got[arm][q] - d[q] for q in ("p50_us", "p99_us")}
            g, d = got["python_guarded"], got["python_bare"]
            got["overhead:python"] = {q: g[q] - d[q] for q in ("p50_us", "p99_us")}
            rounds.append(got)
    res = {
        "repeats": args.repeats,
        "per_session": per,
        "action_map": args.action_map,
        "method": "interleaved: every round one call to each arm, rotating order",
        "builds": {k: str(v) if v else "this tree" for k, v in builds.items()},
        "load_average_1min": _summary(loads),
        "figures_us": {
            key: {q: _summary([r[key][q] for r in rounds]) for q in QUANTITIES if q in value}
            for key, value in rounds[0].items()
        },
        "pooled_us": {arm: _stats(ns) for arm, ns in pooled.items()},
        "paired_median_us": {
            arm: float(np.median(np.asarray(v) / 1000.0))
            for arm, v in paired.items()
            if arm != "direct"
        },
        "rounds": rounds,
    }
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "guard_overhead.json").write_text(json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"µs, median [min–max] over {args.repeats} repeats of {per} interleaved rounds "
          f"({args.action_map} action map)")  # fmt: skip
    for key, v in res["figures_us"].items():
        cells = "  ".join(
            f"{q.removesuffix('_us')} {v[q]['median']:9.1f} [{v[q]['min']:.1f}–{v[q]['max']:.1f}]"
            for q in v
        )
        print(f"{key:26s} {cells}")
    pool = res["pooled_us"]
    for arm in pool:
        base = pool["python_bare" if arm.startswith("python") else "direct"]
        print(f"pooled {arm:24s} p50 {pool[arm]['p50_us']:9.1f} ({pool[arm]['p50_us'] - base['p50_us']:+.1f})  "
              f"p99 {pool[arm]['p99_us']:9.1f} ({pool[arm]['p99_us'] - base['p99_us']:+.1f})  "
              f"n {pool[arm]['n']}")  # fmt: skip
    for arm, v in res["paired_median_us"].items():
        print(f"paired median {arm:24s} {v:+9.1f}")
    load = res["load_average_1min"]
    print(f"load average {load['min']:.1f}–{load['max']:.1f} (median {load['median']:.1f}) "
          f"on {os.cpu_count()} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
