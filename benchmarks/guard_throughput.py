"""HTTP throughput of ``safecert shield serve`` with concurrent MCP sessions, against the upstream
MCP server's own HTTP endpoint (target: ≥ 0.8× the upstream's own).

Both servers run here, one after the other, ``--repeats`` times alternately (so a change in the
shared machine's load falls on both): the payments tools server (``examples/payments``) served
over streamable HTTP by itself (uvicorn, the same settings as the gateway's), and the gateway over
streamable HTTP in front of the same server over stdio, with the example's φ and its action map
(``--action-map`` ``phi:action`` or the equivalent rules file ``actions.toml``). The client is the
same for both: ``--sessions`` concurrent ``mcp.ClientSession`` s, each making ``--calls`` sequential
``lookup_invoice`` calls once all are initialized; every call must succeed (the certificate is
re-made for a horizon of ``--calls`` so none is blocked). Throughput = calls / wall time.

    .venv/bin/python benchmarks/guard_throughput.py [--sessions 8] [--calls 100] [--repeats 3]
        [--action-map rules|python] [--build old=/tmp/old/src] [--json]

``--build NAME=SRC`` adds a gateway run from another source tree beside this one; the arms rotate
from repeat to repeat. Also reported: the CPU time per call of the serving processes (the
gateway's with its upstream's), the scheduler's own count, which a loaded machine inflates far
less than wall time.

Writes ``benchmarks/out/guard_throughput.json``; figures go to ``benchmarks/RESULTS_guard.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from guard_overhead import PAYMENTS, ROOT, WARMUP, _children, _cpu_ns, _prepare  # noqa: E402

UPSTREAM_HTTP = """
import sys, uvicorn, tools_server
app = tools_server.app.streamable_http_app(host="127.0.0.1")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], cwd: Path, port: int, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"{argv} exited with {proc.returncode}") from None
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{argv} did not listen on {port}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _throughput(url: str, sessions: int, calls: int, pid: int) -> tuple[float, float]:
    """Calls per second of ``sessions`` concurrent sessions making ``calls`` calls each, and the
    CPU time per call (µs) of process ``pid`` and its descendants meanwhile."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    ready, go = [0], anyio.Event()
    elapsed: list[float] = []
    cpu: list[int] = []

    async def one() -> None:
        async with streamable_http_client(url) as st, ClientSession(st[0], st[1]) as s:
            await s.initialize()
            for _ in range(WARMUP):
                await s.call_tool("lookup_invoice", {"invoice": "INV-001"})
            ready[0] += 1
            if ready[0] == sessions:
                elapsed.append(time.perf_counter())
                cpu.append(_tree_cpu_ns(pid))
                go.set()
            await go.wait()
            for _ in range(calls):
                res = await s.call_tool("lookup_invoice", {"invoice": "INV-001"})
                assert not res.is_error, res
            elapsed.append(time.perf_counter())

    async with anyio.create_task_group() as tg:
        for _ in range(sessions):
            tg.start_soon(one)
    used = _tree_cpu_ns(pid) - cpu[0]
    return sessions * calls / (max(elapsed) - elapsed[0]), used / 1000 / (sessions * calls)


def _tree_cpu_ns(pid: int) -> int:
    """CPU time so far of ``pid`` and its descendants (the gateway's upstream), all threads."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _cpu_ns(p)
        todo += _children(p)
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--action-map", choices=["rules", "python"], default="rules")
    ap.add_argument("--build", action="append", default=[], metavar="NAME=SRC")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    builds: dict[str, str | None] = {"new": None}
    for spec in args.build:
        name, _, src = spec.partition("=")
        builds[name] = str(Path(src).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _prepare(work, args.calls)
        shutil.copy(PAYMENTS / "actions.toml", work / "actions.toml")
        (work / "upstream_http.py").write_text(UPSTREAM_HTTP)
        action_map = "actions.toml" if args.action_map == "rules" else "phi:action"
        runs: dict[str, list[float]] = {"upstream_http": []}
        runs.update({f"gateway_http[{b}]": [] for b in builds})
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        loads: list[float] = []
        for r in range(args.repeats):
            names = list(runs)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                port = _free_port()
                env = dict(os.environ)
                src = builds.get(name[len("gateway_http[") : -1])
                if src is not None:
                    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
                if name == "upstream_http":
                    argv = [sys.executable, "upstream_http.py", str(port)]
                else:
                    argv = [
                        sys.executable, "-c",
                        "import sys; from safecert.cli.main import main; sys.exit(main())",
                        "shield", "serve", "--certificate", "cert/certificate.json",
                        "--upstream", "python tools_server.py", "--abstraction", "phi:phi",
                        "--action-map", action_map, "--transport", "http", "--port", str(port),
                    ]  # fmt: skip
                print(f"repeat {r + 1}/{args.repeats}: {name} …", file=sys.stderr, flush=True)
                proc = _start(argv, work, port, env)
                try:
                    loads.append(os.getloadavg()[0])
                    url = f"http://127.0.0.1:{port}/mcp"
                    rate, per_call = anyio.run(
                        _throughput, url, args.sessions, args.calls, proc.pid
                    )
                    runs[name].append(rate)
                    cpu[name].append(per_call)
                finally:
                    _stop(proc)
    ratios = {
        b: [g / u for g, u in zip(runs[f"gateway_http[{b}]"], runs["upstream_http"], strict=True)]
        for b in builds
    }
    res = {
        "sessions": args.sessions,
        "calls_per_session": args.calls,
        "action_map": args.action_map,
        "builds": {k: v or "this tree" for k, v in builds.items()},
        "calls_per_s": runs,
        "median_calls_per_s": {k: statistics.median(v) for k, v in runs.items()},
        "server_cpu_per_call_us": cpu,
        "ratio_per_repeat": ratios,
        "ratio_median": {b: statistics.median(v) for b, v in ratios.items()},
        "load_average_1min": loads,
        "cpus": os.cpu_count(),
    }
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    (out / "guard_throughput.json").write_text(json.dumps(res, indent=2))
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    for name, values in runs.items():
        print(f"{name:20s} median {statistics.median(values):7.1f} calls/s "
              f"(runs: {', '.join(f'{v:.1f}' for v in values)}); server CPU per call median "
              f"{statistics.median(cpu[name]):.0f} µs (gateway: with its upstream)")  # fmt: skip
    for b, values in ratios.items():
        print(f"gateway[{b}] / upstream: median ×{res['ratio_median'][b]:.2f} "
              f"(runs: {', '.join(f'{x:.2f}' for x in values)}); target ≥ 0.8")  # fmt: skip
    print(f"load average {min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
