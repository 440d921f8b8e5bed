"""Python's cyclic garbage collector while ``safecert`` is its own process.

A command started from the shell is a short process: the modules it imports, and the classes,
functions and schemas they build (pydantic's models above all), live until it exits. The cyclic
collector traces such objects again and again while they are created, and once more at exit,
when the interpreter's final collections visit every object still alive — work that frees
nothing. In a one-episode ``safecert certify`` on SafeCartPole that is about 130 M instructions of
the process's 1,740 M (callgrind; benchmarks/RESULTS_startup.md, round 3).

So, only when :func:`safecert.cli.main.main` runs the process's own command line
(:func:`command_process`):

- :func:`importing` runs a command's start-up imports with the collector off, then moves every
  object alive into the collector's permanent generation (:func:`gc.freeze`), where it is never
  traced again, and turns the collector back on for the work that follows (episodes, reports);
- at exit everything alive is frozen too, so the interpreter's final collections skip it.

Assumptions, and what they cost: reference cycles that became garbage during an
:func:`importing` block are never freed (they are frozen with the rest: a one-time amount, 176
objects of 49,563 after ``certify``'s start-up, SafeCartPole and HalfCheetah alike), and objects
alive at exit are freed by reference counting only — Python never promised to finalise those.
Called in another program (``main(argv)``: tests, notebooks) nothing here touches the collector.

Example (what ``safecert certify`` does)::

    with importing():
        from safecert.blackbox.certify import certify
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_command_process = False


@contextmanager
def command_process(own: bool) -> Iterator[None]:
    """The block runs this process's own command line when ``own`` (the process then exits):
    :func:`importing` takes effect inside it, and everything alive at its end is frozen."""
    global _command_process
    if not own:
        yield
        return
    _command_process = True
    try:
        yield
    finally:
        _command_process = False
        gc.freeze()


@contextmanager
def importing() -> Iterator[None]:
    """Imports without the cyclic collector; afterwards everything alive is frozen and the
    collector is on again. Nothing happens outside :func:`command_process`."""
    if not _command_process or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
