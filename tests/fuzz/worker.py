"""Run hostile cases in a child process under a 4 GB address-space limit, with a deadline per case.

The parent (:class:`Worker`) starts ``python -m tests.fuzz.worker FD`` in its own session; the child
sets ``RLIMIT_AS`` to :data:`MEMORY_LIMIT` before importing safecert, then runs one case per request
(a JSON line on stdin) and answers on the pipe ``FD``. A case of a TOML format is the real command
(``safecert.cli.main.main``, in the child's process, as :func:`tests.fuzz.harness.run_cli` runs it)
in a fresh workspace; a ``cost-expression`` case is the expression door of a black-box run
(:func:`~safecert.blackbox.spec.compile_spec`, then ``step_cost``/``reached`` on real and extreme
step scopes, errors turned into the CLI's one line).

What is counted per case (:class:`Result`): ``traceback`` (an exception other than a
SafecertError escaped, or a traceback on stderr), ``memory`` (a ``MemoryError``, the child killed
or aborted while running it — what an allocation past the limit ends in — or its peak resident
memory raised above :data:`MEMORY_FLAG_MB`), ``hang`` (no answer
within the deadline: the child's whole process group is killed and reaped, and a new child serves
the next case), ``warnings`` (a warning the user would see: any category but the ones Python hides
by default) and the contract of :func:`tests.fuzz.harness.check`.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 4 << 30
#: a case that raises the child's peak resident memory above this is a blow-up too (a TOML bomb
#: may stay under the 4 GB limit and still take 1.6 GB); the child is then replaced, so that the
#: next case starts from an ordinary peak
MEMORY_FLAG_MB = 1536
#: warnings Python shows by default (DeprecationWarning & co. are hidden outside __main__)
HIDDEN = ("DeprecationWarning", "PendingDeprecationWarning", "ImportWarning", "ResourceWarning")


@dataclass
class Result:
    """What one case did; ``problems`` is empty when it kept every promise."""

    code: int | None = None
    stderr: str = ""
    seconds: float = 0.0
    traceback: bool = False
    memory: bool = False
    hang: bool = False
    warnings: list[str] = field(default_factory=list)
    peak_mb: float = 0.0
    problems: list[str] = field(default_factory=list)


class Worker:
    """The parent side: one child at a time, restarted after a hang or a death."""

    def __init__(self, root: Path, source: Path | None = None) -> None:
        """``source``: a ``src`` folder to import safecert from instead of this checkout's (the
        benchmark's baseline, an earlier revision)."""
        self.root = Path(root)
        self.env = dict(os.environ)
        if source is not None:
            self.env["PYTHONPATH"] = os.pathsep.join([str(source), str(REPO)])
        self.proc: subprocess.Popen[bytes] | None = None
        self.replies = -1

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        log = (self.root / "worker.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker", str(write_fd), str(self.root)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            pass_fds=(write_fd,),
            start_new_session=True,
            env=self.env,
        )
        log.close()
        os.close(write_fd)
        self.replies = read_fd
        self.buffer = b""

    def close(self) -> None:
        """Kill the child's process group and reap the child."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            os.close(self.replies)
            self.proc = None

    def run(self, fmt: str, case: Any, deadline_s: float) -> Result:
        """Run ``case`` (a :class:`tests.fuzz.hostile.Case`) of format ``fmt``."""
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        request = {
            "format": fmt,
            "data": base64.b64encode(case.data).decode(),
            "path_kind": case.path_kind,
            "limit_s": deadline_s,
        }
        start = time.monotonic()
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self._read_line(start + deadline_s + 30)  # the child's own alarm fires first
        seconds = time.monotonic() - start
        if line is None:
            code = self.proc.poll()
            self.close()
            if code is None:
                return Result(seconds=seconds, hang=True, problems=[f"no answer in {seconds:.0f}s"])
            return Result(
                seconds=seconds, memory=True, problems=[f"the worker died (exit status {code})"]
            )
        result = Result(**json.loads(line))
        if result.peak_mb > MEMORY_FLAG_MB:
            self.close()
        return result

    def _read_line(self, until: float) -> bytes | None:
        while b"\n" not in self.buffer:
            left = until - time.monotonic()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                return None
            chunk = os.read(self.replies, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------- the child


def _serve(reply_fd: int, root: Path) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    from tests.fuzz import doors

    for line in sys.stdin:
        request = json.loads(line)
        result = doors.run_case(
            request["format"],
            base64.b64decode(request["data"]),
            request["path_kind"],
            request["limit_s"],
            root,
        )
        os.write(reply_fd, json.dumps(result.__dict__).encode() + b"\n")


if __name__ == "__main__":
    _serve(int(sys.argv[1]), Path(sys.argv[2]))
