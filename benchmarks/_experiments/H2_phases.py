"""Phases of one ``safecert certify`` (the CLI's own steps, replayed in order) marked by
``os.getppid()`` calls, for ``valgrind --tool=callgrind --dump-before=getppid``: each dump holds
the instructions of one phase (issue 28.3, helper H2). Also prints CPU and wall milliseconds per phase.

    valgrind --tool=callgrind --dump-before=getppid --callgrind-out-file=cg.%p \
        .venv/bin/python benchmarks/_experiments/H2_phases.py CONFIG OUT
"""

from __future__ import annotations

import os
import sys
import time

T = [("start", time.process_time(), time.perf_counter())]


def mark(name: str) -> None:
    os.getppid()
    T.append((name, time.process_time(), time.perf_counter()))


mark("interpreter")
import importlib  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from pathlib import Path  # noqa: E402

from safecert.cli import collector  # noqa: E402
from safecert.cli.main import app  # noqa: E402,F401

mark("typer+cli.main")
config, out = Path(sys.argv[1]), Path(sys.argv[2])
with collector.command_process(True):
    from safecert import procs
    from safecert.cli import blackbox as cb

    mark("cli.blackbox")
    with procs.reaping(), ExitStack() as stack:
        with collector.importing():
            started = stack.enter_context(cb._policy_started_early(config, False))
            mark("early worker")
            importlib.import_module("safecert.blackbox.certify")
            mark("import engine")
            importlib.import_module("safecert.report")
            mark("import report")
            from safecert.blackbox.progress import ProgressBar  # noqa: F401

            runner = cb._backend("local", None, 1)
        from safecert.blackbox import certify as c

        plan = c.plan_run(config, None)
        mark("plan_run")
        with (
            c.run_events(None) as events,
            c.open_store(plan, out, resume=False) as store,
            c.lent_oracle(plan, runner, started) as oracle,
            c.closing_local(runner),
        ):
            mark("store+oracle")
            ctx = c.make_context(plan, store, oracle)
            mark("make_context (preflight)")
            tracker = c.fixed_tracker(plan, store, events)
            tracker.start()
            c.run_jobs(runner, plan.all_jobs(store.done()), ctx, store, progress=tracker)
            mark("episodes")
            cert = c.finish(plan, store, out)
            tracker.finish(cert.verdict)
            mark("finish (judge+certificate)")
        mark("close")
    from safecert.report import write_run_report

    write_run_report(out / "certificate.json")
    mark("report")
    cb._verdict_table(cert)
    mark("table")
mark("exit freeze")
for (_, c0, w0), (name, c1, w1) in zip(T, T[1:], strict=False):
    print(
        f"{name:30s} {1000 * (c1 - c0):8.1f} ms CPU {1000 * (w1 - w0):8.1f} ms wall",
        file=sys.stderr,
    )
