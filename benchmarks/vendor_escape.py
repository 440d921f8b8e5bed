"""Vendors that attack their supervisor: how many of their processes outlive the close (issue 27).

Every repetition starts ``tests/blackbox/hostile_vendor.py --attack SIG --fork --scrub --chain 3``
(a fresh tag on its argv): at start it SIGKILLs or SIGSTOPs every safecert supervisor above it (by
pid and by ``/proc`` descriptor), then leaves a ``setsid`` child, a double-forked daemon, a
double-forked daemon re-executed with an empty environment and the end of a 3-link double-fork
chain. The bench asks it for one reply, waits until all four escapees exist, closes it the way
``certify`` does, and counts (``/proc`` census by tag, bounded wait of ``--settle`` s) the vendor's
processes still alive: *orphans*. Survivors are then SIGKILLed by the bench so runs stay independent.

Modes, all in this one process:

* ``contained`` — :class:`safecert.procs.VendorProcess` as ``certify`` starts it (a PID namespace
  where the kernel allows one), inside :func:`safecert.procs.reaping`;
* ``uncontained`` — the same with ``contain=False`` (the fallback when the kernel refuses
  namespaces): the attack reaches the supervisor; the run's subreaper sweep must clean up;
* ``before`` — the baseline: ``procs.py`` and ``supervisor.py`` as they were before this change
  (``git show BASE:...``, loaded from a temporary folder), no subreaper, no sweep.

``--kill9`` repeats the ``kill -9`` case: a holder process starts the attacking vendor, the bench
SIGKILLs the holder and counts what is left after ``--settle`` s. ``--cli`` runs ``safecert certify``
(the real command, ``workers = 1``) with the attacking vendor and counts what is left after it exits.

    .venv/bin/python benchmarks/vendor_escape.py --reps 100 --kill9 100 --cli 5 --json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "src")]

from tests.blackbox.hostile import VENDOR, tagged, wait_until  # noqa: E402

ESCAPEES = ("--fork", "--scrub", "--chain", "3")
BASE = "af98fa9^"  # the commit before vendors were contained
REQUEST = b'{"observations": [[0.0, 0.0, 0.1, 0.2]]}\n'


def session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rpartition(b")")[2].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def escapees(tag: str, vendor_pid: int) -> int:
    """The vendor's escapees alive now: its processes outside the vendor's session (all four
    escapees call ``setsid``; the supervisor, its pid 1 and the vendor share one session)."""
    own = session(vendor_pid)
    return sum(1 for pid in tagged(tag) if session(pid) not in (own, None))


def settle(tag: str, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not tagged(tag):
            return []
        time.sleep(0.02)
    return tagged(tag)


def clean(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def load_before(folder: Path) -> ModuleType:
    """``procs`` as it was at :data:`BASE` (with its supervisor beside it), as a separate module."""
    for name in ("procs", "supervisor"):
        text = subprocess.run(
            ["git", "show", f"{BASE}:src/safecert/{name}.py"],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (folder / f"{name}.py").write_text(text)
    spec = importlib.util.spec_from_file_location("procs_before", folder / "procs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_rep(start: Callable[[list[str]], Any], sig: str, settle_s: float) -> dict[str, Any]:
    tag = f"escape-{uuid.uuid4().hex[:12]}"
    vendor = start([sys.executable, str(VENDOR), "--attack", sig, *ESCAPEES, "--tag", tag])
    try:
        vendor.stdin.write(REQUEST)
        ok = bool(select.select([vendor.stdout], [], [], 20)[0]) and vendor.stdout.readline()
        # the attack came first; the escapees follow at once: wait until all four exist
        spawned = wait_until(lambda: escapees(tag, vendor.vendor_pid) >= 4, 10.0)
        t0 = time.perf_counter()
        vendor.kill()
        kill_s = time.perf_counter() - t0
    finally:
        for pipe in (vendor.stdin, vendor.stdout, vendor.stderr):
            with contextlib.suppress(OSError):
                pipe.close()
    left = settle(tag, settle_s)
    clean(left)
    return {"replied": bool(ok), "spawned": spawned, "orphans": len(left), "kill_s": kill_s}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    kills = sorted(r["kill_s"] for r in rows)
    return {
        "reps": len(rows),
        "replied": sum(r["replied"] for r in rows),
        "escapees_seen": sum(r["spawned"] for r in rows),
        "reps_with_orphans": sum(r["orphans"] > 0 for r in rows),
        "orphans": sum(r["orphans"] for r in rows),
        "kill_median_ms": round(1000 * kills[len(kills) // 2], 1),
        "kill_max_ms": round(1000 * kills[-1], 1),
    }


@contextlib.contextmanager
def scope(reaping: bool) -> Iterator[None]:
    from safecert import procs

    if reaping:
        with procs.reaping():
            yield
    else:
        yield


HOLDER = """
import sys, time
sys.path.insert(0, {src!r})
from safecert import procs
vendor = procs.VendorProcess([sys.executable, {vendor!r}, "--attack", {sig!r}, *{escapees!r},
                              "--tag", {tag!r}], contain={contain!r})
with procs.reaping():
    vendor.stdin.write({request!r})
    vendor.stdout.readline()
    print("ready", flush=True)
    time.sleep(600)
"""


def kill9_rep(sig: str, contain: bool, settle_s: float) -> dict[str, Any]:
    tag = f"escape-{uuid.uuid4().hex[:12]}"
    code = HOLDER.format(
        src=str(REPO / "src"),
        vendor=str(VENDOR),
        sig=sig,
        escapees=ESCAPEES,
        tag=tag,
        contain=contain,
        request=REQUEST,
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        ready = bool(select.select([holder.stdout], [], [], 30)[0]) and holder.stdout.readline()
        # the holder's own session is the test's; the vendor's session is the supervisor's
        spawned = wait_until(
            lambda: len(set(tagged(tag)) - {holder.pid}) >= 7 - 2 * (not contain), 10.0
        )
        t0 = time.perf_counter()
        holder.kill()
        holder.wait()
        left = settle(tag, settle_s)
        took = time.perf_counter() - t0
    finally:
        holder.kill()
        holder.wait()
    clean(left)
    return {"replied": bool(ready), "spawned": spawned, "orphans": len(left), "kill_s": took}


CONFIG = """
policy = "exec:{python} {vendor} --attack {sig} {escapees} --tag {tag}"
env = "CartPole-v1"
episodes = 3
seed = 0
max_steps = 4
timeout_s = 5.0
retries = 0
workers = 1
[spec]
budget = 0.0
cost = "0"
p_star = 0.5
confidence = 0.9
[kpis]
return = {{ lower = 0.0, upper = 20.0 }}
"""


def cli_rep(sig: str, contain: bool, folder: Path, settle_s: float) -> dict[str, Any]:
    tag = f"escape-{uuid.uuid4().hex[:12]}"
    run = folder / tag
    run.mkdir()
    config = run / "run.toml"
    config.write_text(
        CONFIG.format(
            python=sys.executable, vendor=VENDOR, sig=sig, escapees=" ".join(ESCAPEES), tag=tag
        )
    )
    env = {**os.environ, "SAFECERT_PID_NAMESPACE": str(int(contain))}
    cmd = [
        sys.executable,
        "-m",
        "safecert.cli.main",
        "certify",
        str(config),
        "--out",
        str(run / "out"),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    took = time.perf_counter() - t0
    left = settle(tag, settle_s)
    clean(left)
    ok = proc.returncode in (0, 1) and "Traceback" not in proc.stderr
    return {"replied": ok, "spawned": True, "orphans": len(left), "kill_s": took}


def startup_ms(start: Callable[[list[str]], Any], n: int) -> float:
    """Median wall time of start, first line read and kill of a vendor that echoes one line
    (the best of 5 interleaved rounds per mode is reported)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        vendor = start(["sh", "-c", "echo ready; exec cat"])
        vendor.stdout.readline()
        vendor.kill()
        times.append(time.perf_counter() - t0)
        for pipe in (vendor.stdin, vendor.stdout, vendor.stderr):
            pipe.close()
    return round(1000 * sorted(times)[n // 2], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100, help="repetitions per attack and mode")
    ap.add_argument("--before-reps", type=int, default=10, help="repetitions of the baseline")
    ap.add_argument("--kill9", type=int, default=100, help="kill -9 repetitions per attack")
    ap.add_argument("--cli", type=int, default=5, help="certify runs per attack and mode")
    ap.add_argument("--startup", type=int, default=0, help="start-up cost: starts per mode")
    ap.add_argument("--settle", type=float, default=2.0, help="bounded wait before counting, s")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from safecert import procs

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        before = load_before(Path(tmp))
        starts: dict[str, tuple[Callable[[list[str]], Any], bool, int]] = {
            "contained": (lambda argv: procs.VendorProcess(argv), True, args.reps),
            "uncontained": (lambda argv: procs.VendorProcess(argv, contain=False), True, args.reps),
            "before": (lambda argv: before.VendorProcess(argv), False, args.before_reps),
        }
        if args.startup:  # interleaved rounds, so load changes hit every mode
            costs: dict[str, list[float]] = {mode: [] for mode in starts}
            for _ in range(5):
                for mode, (start, _, _) in starts.items():
                    costs[mode].append(startup_ms(start, max(1, args.startup // 5)))
            base = min(costs["before"])
            results["startup"] = {
                mode: {"best_round_median_ms": min(c), "ratio": round(min(c) / base, 2)}
                for mode, c in costs.items()
            }
            print(f"startup: {results['startup']}", file=sys.stderr)
        for sig in ("KILL", "STOP") if args.reps else ():
            for mode, (start, reaping, reps) in starts.items():
                with scope(reaping):
                    rows = [one_rep(start, sig, args.settle) for _ in range(reps)]
                results[f"{mode} {sig}"] = summary(rows)
                print(f"{mode} {sig}: {results[f'{mode} {sig}']}", file=sys.stderr)
        for sig in ("KILL", "STOP") if args.kill9 else ():
            for contain, reps in ((True, args.kill9), (False, min(args.kill9, args.before_reps))):
                rows = [kill9_rep(sig, contain, args.settle) for _ in range(reps)]
                key = f"kill -9 {'contained' if contain else 'uncontained'} {sig}"
                results[key] = summary(rows)
                print(f"{key}: {results[key]}", file=sys.stderr)
        if args.cli:
            for sig in ("KILL", "STOP"):
                for contain in (True, False):
                    rows = [cli_rep(sig, contain, Path(tmp), args.settle) for _ in range(args.cli)]
                    key = f"certify {'contained' if contain else 'uncontained'} {sig}"
                    results[key] = summary(rows)
                    print(f"{key}: {results[key]}", file=sys.stderr)
    probe = procs.VendorProcess(["true"])
    probe.wait()
    probe.kill()
    out = {"namespace_available": probe.contained, "results": results}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for key, row in results.items():
            print(f"{key:32s} {row}")


if __name__ == "__main__":
    main()
