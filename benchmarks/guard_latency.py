"""Latency of one guard check (target: p99 ≤ 50 µs), measured with ``time.perf_counter_ns``.

Three timings in one process, each over ``--checks`` calls, tools cycling through the catalogue
(half of them forbidden in the measured state):

* ``baseline`` — a bare ``tool in table[state]`` lookup (what any gate costs, plus timer overhead);
* ``guard (constant abstraction)`` — :meth:`Guard.check` with a precomputed state label: lock,
  fail-closed checks, counters;
* ``guard (real sandbox abstraction)`` — :meth:`Guard.check` with ``Sandbox.state``: the
  predicates recomputed from the transcript facts and an ``lstat`` of ``production/`` each time.

Each ``Guard.check`` runs the abstraction on a deadline worker (one thread hand-off per check). The
executing guard of real deployments (:class:`GuardSession`: the gateway, ``guarded``, the adapters)
evaluates φ incrementally — once per executed call, under its deadline, right after the call — so
its check is a table look-up on the state it already knows, plus the action map. Two more timings,
on the payments example (``examples/payments``, its certificate and φ):

* ``session check (rules action map)`` — :meth:`GuardSession.decide` for a permitted
  ``lookup_invoice`` with the example's rules file (our own code: no hand-off);
* ``session check (python action map)`` — the same with its Python action map (one hand-off);
* ``session call (rules action map)`` — a whole guarded call: check, the tool, and φ of the new
  history on its deadline worker (one hand-off), in sessions of ``T`` calls.

    .venv/bin/python benchmarks/guard_latency.py [--checks 200000] [--json]
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
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "p999_us": float(np.percentile(us, 99.9)),
        "mean_us": float(us.mean()),
    }


def measure(checks: int) -> dict:
    table = {lab: {"read", "write", "halt"} for lab in all_live_labels()}
    clock = time.perf_counter_ns
    tools = [TOOLS[i % len(TOOLS)] for i in range(checks)]
    out = {}
    ns = np.empty(checks, dtype=np.int64)
    frozen = {k: frozenset(v) for k, v in table.items()}
    for i, tool in enumerate(tools):
        t0 = clock()
        _ = tool in frozen["{}"]
        ns[i] = clock() - t0
    out["baseline (dict lookup)"] = _percentiles(ns)
    guard = Guard(table, lambda: "{}", actions=TOOLS)
    for i, tool in enumerate(tools):
        t0 = clock()
        guard.check(tool)
        ns[i] = clock() - t0
    out["guard (constant abstraction)"] = _percentiles(ns)
    with Sandbox(np.random.default_rng(0)) as sb:
        guard = Guard(table, sb.state, actions=TOOLS)
        for i, tool in enumerate(tools):
            t0 = clock()
            guard.check(tool)
            ns[i] = clock() - t0
        out["guard (real sandbox abstraction)"] = _percentiles(ns)
    out.update(_session_timings(checks, ns))
    base = out["baseline (dict lookup)"]["p50_us"]
    for v in out.values():
        v["p50_ratio_to_baseline"] = v["p50_us"] / base if base > 0 else None
    return {
        "checks": checks,
        "target_p99_us": 50.0,
        "load_average": os.getloadavg(),
        "timings": out,
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
    ap.add_argument("--checks", type=int, default=200_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.checks)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2) + "\n")
        return 0
    for name, v in res["timings"].items():
        print(f"{name:36s} p50 {v['p50_us']:7.2f} µs  p99 {v['p99_us']:7.2f} µs  "
              f"p99.9 {v['p999_us']:7.2f} µs  (p50 ×{v['p50_ratio_to_baseline']:.1f} baseline)")  # fmt: skip
    for row in ("guard (real sandbox abstraction)", "session check (rules action map)"):
        ok = res["timings"][row]["p99_us"] <= 50.0
        print(f"target p99 ≤ 50 µs, {row}: {'met' if ok else 'NOT met'}")
    print(f"load average {res['load_average'][0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
