"""OpenBLAS's idle threads while ``safecert`` is its own process.

NumPy's and SciPy's OpenBLAS start a thread per extra core when they are loaded, and an idle thread
spins — burns a core — for 2**28 cycles (about 0.1 s) after its start and after each BLAS call
before it sleeps. ``safecert certify`` loads NumPy in its judging process and, at the same moment,
in its policy worker: on a machine with two cores, the two spinning threads left the judge's
imports half a core (SafeCartPole, isolated policy: the engine's imports took 169 ms instead of
85 ms, the whole run 0.35 s instead of 0.28 s; benchmarks/RESULTS_startup.md, round 5).

So, when :func:`safecert.cli.main.main` runs the process's own command line,
:func:`let_idle_threads_sleep` sets ``OPENBLAS_THREAD_TIMEOUT=4`` (2**4 cycles, OpenBLAS's least)
unless the user set it: in this process and in every process it starts (policy and environment
workers, pool workers, ``exec:`` vendors, which inherit its environment), an idle BLAS thread
sleeps at once and wakes for the next call. Results do not change: the variable says how long an
idle thread waits before it sleeps, not how many threads share a call nor how a call's work is
split. It must be set before NumPy is first imported (OpenBLAS reads it once, when it is loaded);
``safecert``'s commands import NumPy only after ``main`` starts. Called in another program
(``main(argv)``: tests, notebooks), nothing is set. (This OpenBLAS reads no other name for it:
``GOTO_THREAD_TIMEOUT=4`` still spins.)
"""

from __future__ import annotations

import os

#: 2**4 cycles: OpenBLAS raises any smaller positive value to 4
IDLE_SPIN = "4"


def let_idle_threads_sleep() -> None:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` for this process and its children, unless the user set it."""
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", IDLE_SPIN)
