"""Latency of one guard check (target: p99 ≤ 50 µs with the predicate deadline kept), measured with
``time.perf_counter_ns``.

Timings in one process, each over ``--checks`` calls, tools cycling through the catalogue (half of
them forbidden in the measured state), all of them once per repeat and the repeats one after the
other (``--repeats``), so every timing has its baseline from the same window:

* ``baseline`` — a bare ``tool in table[state]`` lookup (what any gate costs, plus timer overhead);
* ``guard check, observed (constant / real sandbox abstraction)`` — :meth:`Guard.check` after
  :meth:`Guard.observe`, as in :func:`run_episode`: φ was evaluated once for the step, under its
  deadline, and the check decides on that state (lock, fail-closed checks, counters);
* ``guard observe (real sandbox abstraction)`` — what each executed step pays for that: the
  sandbox's predicates (transcript facts and an ``lstat`` of ``production/``) on a deadline
  worker, one thread hand-off;
* ``guard check, not observed (real sandbox abstraction)`` — a guard never told of a change
  evaluates φ in every check (one hand-off each): the former design.

The executing guard of real deployments (:class:`GuardSession`: the gateway, ``guarded``, the
adapters) works the same way — φ once per executed call, right after it — so its check is a table
look-up plus the action map. On the payments example (``examples/payments``, its certificate and φ):

* ``session check (rules action map)`` — :meth:`GuardSession.decide` for a permitted
  ``lookup_invoice`` with the example's rules file (our own code: no hand-off);
* ``session check (python action map)`` — the same with its Python action map (one hand-off);
* ``session call (rules action map)`` — a whole guarded call: check, the tool, and φ of the new
  history on its deadline worker (one hand-off), in sessions of ``T`` calls.

    .venv/bin/python benchmarks/guard_latency.py [--checks 20000] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from safecert.shield.guard import Guard
from safecert.shield.sandbox import TOOLS, Sandbox, all_live_labels


def _percentiles(ns: np.ndarray) -> dict:
    us = ns / 1000.0
    return {"p50_us": float(np.percentile(us, 50)), "p99_us": float(np.percentile(us, 99))}


def _timed(fn, args_list: list, ns: np.ndarray) -> dict:
    clock = time.perf_counter_ns
    for i, arg in enumerate(args_list):
        t0 = clock()
        fn(arg)
        ns[i] = clock() - t0
    return _percentiles(ns[: len(args_list)])


def measure_once(checks: int) -> dict:
    """Every timing once, one after the other (µs percentiles)."""
    table = {lab: {"read", "write", "halt"} for lab in all_live_labels()}
    tools = [TOOLS[i % len(TOOLS)] for i in range(checks)]
    ns = np.empty(checks, dtype=np.int64)
    frozen = {k: frozenset(v) for k, v in table.items()}
    out = {"baseline (dict lookup)": _timed(lambda t: t in frozen["{}"], tools, ns)}
    guard = Guard(table, lambda: "{}", actions=TOOLS)
    guard.observe()
    out["guard check, observed (constant abstraction)"] = _timed(guard.check, tools, ns)
    with Sandbox(np.random.default_rng(0)) as sb:
        guard = Guard(table, sb.state, actions=TOOLS)
        guard.observe()
        out["guard check, observed (real sandbox abstraction)"] = _timed(guard.check, tools, ns)
        steps = max(1, checks // 10)
        out["guard observe (real sandbox abstraction)"] = _timed(
            lambda _: guard.observe(), tools[:steps], ns
        )
        blind = Guard(table, sb.state, actions=TOOLS)  # never observed: φ in every check
        out["guard check, not observed (real sandbox abstraction)"] = _timed(
            blind.check, tools[:steps], ns
        )
    out.update(_session_timings(checks, ns))
    return out


def measure(checks: int, repeats: int) -> dict:
    """``repeats`` rounds of :func:`measure_once`; per timing the median [min–max] over rounds."""
    loads, rounds = [], []
    for _ in range(repeats):
        loads.append(os.getloadavg()[0])
        rounds.append(measure_once(checks))
    timings = {}
    for name in rounds[0]:
        row = {}
        for q in ("p50_us", "p99_us"):
            values = [r[name][q] for r in rounds]
            row[q] = {"median": float(np.median(values)), "min": min(values), "max": max(values)}
        timings[name] = row
    return {
        "checks": checks,
        "repeats": repeats,
        "target_p99_us": 50.0,
        "load_average_1min": {"min": min(loads), "max": max(loads)},
        "timings": timings,
    }


def _session_timings(checks: int, ns: np.ndarray) -> dict:
    import importlib.util

    from safecert.shield.abstraction import Abstraction
    from safecert.shield.action_rules import load_action_rules
    from safecert.shield.certified import load_certified_shield
    from safecert.shield.session import GuardSession

    payments = Path(__file__).resolve().parents[1] / "examples" / "payments"
    spec = importlib.util.spec_from_file_location("payments_phi", payments / "phi.py")
    assert spec is not None and spec.loader is not None
    phi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(phi)
    shield = load_certified_shield(payments / "cert" / "certificate.json")
    rules = load_action_rules(payments / "actions.toml")
    clock = time.perf_counter_ns
    args = {"invoice": "INV-001"}
    out = {}
    for name, action_map in (("rules", rules), ("python", phi.action)):
        session = GuardSession(shield, Abstraction(shield.model, phi.phi, action_map))
        assert session.decide("lookup_invoice", args).allowed  # φ([]) evaluated once here
        for i in range(checks):
            t0 = clock()
            session.decide("lookup_invoice", args)
            ns[i] = clock() - t0
        out[f"session check ({name} action map)"] = _percentiles(ns)

    def lookup_invoice(invoice: str) -> dict:
        return {"invoice": invoice, "found": True}

    session = GuardSession(shield, Abstraction(shield.model, phi.phi, rules))
    for i in range(checks):
        if session.steps >= shield.horizon:
            session = GuardSession(shield, Abstraction(shield.model, phi.phi, rules))
        t0 = clock()
        session.call("lookup_invoice", args, lambda: lookup_invoice(**args))
        ns[i] = clock() - t0
    out["session call (rules action map)"] = _percentiles(ns)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--checks", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.checks, args.repeats)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2) + "\n")
        return 0

    def cell(v: dict) -> str:
        return f"{v['median']:8.1f} [{v['min']:.1f}–{v['max']:.1f}]"

    print(f"µs, median [min–max] over {args.repeats} rounds of {args.checks} checks")
    for name, v in res["timings"].items():
        print(f"{name:55s} p50 {cell(v['p50_us'])}  p99 {cell(v['p99_us'])}")
    for row in ("guard check, observed (real sandbox abstraction)",
                "session check (rules action map)"):  # fmt: skip
        ok = res["timings"][row]["p99_us"]["median"] <= 50.0
        print(f"target p99 ≤ 50 µs, {row}: {'met' if ok else 'NOT met'} (median of rounds)")
    load = res["load_average_1min"]
    print(f"load average {load['min']:.1f}–{load['max']:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
