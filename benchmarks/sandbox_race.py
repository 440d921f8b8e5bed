"""The agents' sandbox against a real-folder swap race (issue 27): 0 escapes in >= 10^4 operations.

A second *process* exchanges a folder of the sandbox tree with a real folder outside the root
(``renameat2(RENAME_EXCHANGE)``, no link anywhere) as fast as it can, while the sandbox performs
one kind of operation on a file in that folder: ``read``, ``send`` (attachment), ``write``,
``delete``, ``chmod`` (swapping ``production/data``) or ``reset``. A second series exchanges
the *file* instead (``d/f.txt``, for chmod ``production/config.yaml``, with the outside folder's
file): it races the check-then-remove of ``delete`` and ``reset``. An escape is any operation
after which the outside folder differs — content, mode or presence of its file, its own mode, its
list of names (checked after every operation through descriptors held on the outside objects,
and once more by a path walk after the attacker stopped) — or whose reply or outbox message
carries the outside file's secret.

The baseline, run in the same process against the same attacker, is a per-component
``O_NOFOLLOW`` walk (the jail before issue 27): the fraction of its walks that land in the outside
folder says how often an unchecked walk escapes.

    .venv/bin/python benchmarks/sandbox_race.py                # 10^4 operations of each kind
    .venv/bin/python benchmarks/sandbox_race.py --ops 500 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from safecert.shield.descriptors import has_openat2
from safecert.shield.sandbox import Sandbox, SandboxConfig, ToolCall

SECRET = "TOP-SECRET-OUTSIDE-THE-ROOT"
OPS = ("read", "send", "write", "delete", "chmod", "reset")
SWAPS = ("folder", "file")
QUIET = SandboxConfig(confirm_prob=0.0, misfire_prob=0.0, horizon=10**9)
RESULTS = Path(__file__).with_name("RESULTS_sandbox_race.md")
BEFORE = (
    "The sandbox before issue 27 (commit 7a774c0, this script with `--ops 300`, measured once on "
    "2026-12-02; an escape there counts every operation after the outside folder first changed): "
    "read 237 of 300 leaked the secret, send 140, write 300, delete 293, chmod 298; reset "
    "stopped with `OSError: Directory not empty`; without a race, one reset while the outside "
    "folder sat at `workspace/d` deleted that folder and its files. A delete that checked the "
    "file and then called `unlinkat` by name (this work's first version, commit 48610bd) lost "
    "the outside file to the file-exchange attacker within 3,000 deletes: hence removals by "
    "rename to a random name, check, then remove."
)

# The attacker: exchange two real folders back and forth, resting ``pause`` seconds each time the
# outside folder is back at its path (0: never); on SIGTERM finish on an even count (the outside
# folder back at its path; a bounded number of tries, as the inside one may be gone) and write the
# count of exchanges done.
SWAPPER = """
import ctypes, os, signal, sys, time
a, b, count, pause = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3], float(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
n, stop = 0, False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
open(count + ".ready", "w").close()
tries_after_stop = 0
while not stop or (n % 2 and tries_after_stop < 10**6):
    tries_after_stop += stop
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
        n += 1
        if pause and n % 2 == 0:
            time.sleep(pause)
with open(count, "w") as fh:
    fh.write(str(n))
"""


@dataclass(frozen=True)
class RaceResult:
    """One operation kind against the swap race."""

    op: str
    swap: str  # what the attacker exchanges with the outside: the folder, or the file in it
    ops: int  # operations performed during the race
    succeeded: int  # of which the sandbox carried out (the rest were refused)
    escapes: int  # operations that touched or leaked the outside folder
    swaps: int  # exchanges the attacker completed
    baseline_walks: int
    baseline_escapes: int  # O_NOFOLLOW walks that landed in the outside folder
    fingerprint_unchanged: bool
    seconds: float


def fingerprint(top: Path) -> dict[str, tuple[str, int]]:
    """Content hash and mode of every file, mode of every folder, under ``top`` (by path)."""
    out: dict[str, tuple[str, int]] = {".": ("dir", os.stat(top).st_mode)}
    for dirpath, dirs, files in os.walk(top):
        for name in files:
            p = Path(dirpath) / name
            out[str(p.relative_to(top))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                p.lstat().st_mode,
            )
        for name in dirs:
            p = Path(dirpath) / name
            out[str(p.relative_to(top))] = ("dir", p.lstat().st_mode)
    return out


class _Watch:
    """Descriptors held on the outside folder and its file: checks that follow them wherever the
    attacker moves them."""

    def __init__(self, outside: Path) -> None:
        self.dir = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)
        self.file = os.open(outside / "f.txt", os.O_RDONLY)
        self.names = sorted(os.listdir(self.dir))
        self.dir_mode = os.fstat(self.dir).st_mode
        self.file_mode = os.fstat(self.file).st_mode

    def intact(self) -> bool:
        st = os.fstat(self.file)
        return (
            st.st_nlink == 1
            and st.st_mode == self.file_mode
            and os.pread(self.file, 100, 0) == SECRET.encode()
            and os.fstat(self.dir).st_mode == self.dir_mode
            and sorted(os.listdir(self.dir)) == self.names
        )

    def close(self) -> None:
        os.close(self.file)
        os.close(self.dir)


def _baseline_lands_outside(root: Path, parts: tuple[str, ...], outside_ino: int) -> bool:
    """One walk of the old jail (``O_NOFOLLOW`` per component, no identity check): does it reach
    the outside folder (or, for a file swap, the outside file)?"""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            except OSError:
                return False
            os.close(fd)
            fd = nxt
        return os.fstat(fd).st_ino == outside_ino
    finally:
        os.close(fd)


def _one(sb: Sandbox, op: str) -> tuple[bool, str]:
    """Perform one operation of kind ``op``; returns (carried out, text the agent saw)."""
    if op in ("delete", "reset"):
        sb.execute(ToolCall("write", {"path": "d/f.txt", "content": "inside"}))
    if op == "reset":
        sb.reset()
        return True, ""
    args = {
        "read": {"path": "d/f.txt"},
        "send": {"attach": "d/f.txt", "body": "x"},
        "write": {"path": "d/f.txt", "content": "pwned"},
        "delete": {"path": "d/f.txt"},
        "chmod": {"path": "production"},
    }[op]
    entry = sb.execute(ToolCall(op, args))
    return entry.ok, entry.output


def race(
    op: str,
    n_ops: int,
    workdir: Path,
    *,
    swap: str = "folder",
    baseline_walks: int = 2_000,
    pause_s: float = 0.0,
) -> RaceResult:
    """Run ``n_ops`` operations of kind ``op`` under the swap race in ``workdir`` (empty).

    The attacker exchanges as fast as it can; ``pause_s`` > 0 has it rest that long after each
    exchange that put the outside folder back, so that some operations find the tree still
    (without rests, on a fast machine every operation may meet a swap and be refused).

    ``swap="folder"`` exchanges the folder ``workspace/d`` (``production/data`` for chmod) with
    the outside folder; ``swap="file"`` exchanges the file in it (``d/f.txt``; for chmod
    ``production/config.yaml``) with the outside folder's file."""
    if op not in OPS or swap not in SWAPS:
        raise ValueError(f"op must be one of {OPS} and swap one of {SWAPS}, got {op!r}, {swap!r}")
    outside, root = workdir / "outside", workdir / "root"
    outside.mkdir(mode=0o700)
    (outside / "f.txt").write_text(SECRET)
    os.chmod(outside / "f.txt", 0o600)
    os.chmod(outside, 0o700)
    root.mkdir()
    before = fingerprint(outside)
    watch = _Watch(outside)
    sb = Sandbox(np.random.default_rng(0), root=root, config=QUIET)
    parts = ("production", "data") if op == "chmod" else ("workspace", "d")
    target = outside
    if swap == "file":
        parts = ("production", "config.yaml") if op == "chmod" else (*parts, "f.txt")
        target = outside / "f.txt"
    if op != "chmod":
        sb.execute(ToolCall("write", {"path": "d/f.txt", "content": "inside"}))
    count = workdir / "swaps"
    argv = [sys.executable, "-c", SWAPPER, str(root.joinpath(*parts)), str(target), str(count)]
    argv.append(repr(pause_s))
    attacker = subprocess.Popen(argv)
    escapes = succeeded = hits = walks = 0
    t0 = time.perf_counter()
    try:
        while not Path(f"{count}.ready").exists():
            if attacker.poll() is not None:
                raise RuntimeError("the swapping process ended before it started swapping")
            time.sleep(0.005)
        for _ in range(n_ops):
            ok, text = _one(sb, op)
            succeeded += ok
            if SECRET in text or not watch.intact():
                escapes += 1
        seconds = time.perf_counter() - t0
        if op in ("delete", "reset"):  # the folder may be gone: give the attacker its folder back
            sb.execute(ToolCall("write", {"path": "d/f.txt", "content": "inside"}))
        ino = os.fstat(watch.file if swap == "file" else watch.dir).st_ino
        while walks < baseline_walks or (hits == 0 and walks < 50 * baseline_walks):
            hits += _baseline_lands_outside(root, parts, ino)
            walks += 1
    finally:
        attacker.send_signal(signal.SIGTERM)
        attacker.wait(30)
    escapes += sum(SECRET in p.read_text() for p in sb.outbox.iterdir())
    sb.close()
    watch.close()
    return RaceResult(
        op=op,
        swap=swap,
        ops=n_ops,
        succeeded=succeeded,
        escapes=escapes,
        swaps=int(count.read_text() or 0),
        baseline_walks=walks,
        baseline_escapes=hits,
        fingerprint_unchanged=fingerprint(outside) == before,
        seconds=round(seconds, 2),
    )


def _markdown(rows: list[RaceResult], n_ops: int) -> str:
    lines = [
        "# Sandbox against a real-folder swap race (benchmarks/sandbox_race.py)",
        "",
        f"`python benchmarks/sandbox_race.py --ops {n_ops}`; openat2 in use: {has_openat2()}; "
        f"kernel {os.uname().release}. A second process exchanges `workspace/d` (for chmod: "
        "`production/data`) with a real folder outside the root (`renameat2(RENAME_EXCHANGE)`) "
        "while the sandbox operates on `d/f.txt`; `file` rows exchange `d/f.txt` (for chmod: "
        "`production/config.yaml`) with the outside folder's file instead. "
        "Escape = the outside folder changed (content, "
        "modes, names, checked after every operation by held descriptors and at the end by path) "
        "or its secret reached a reply or the outbox. Baseline: the pre-issue-27 walk "
        "(`O_NOFOLLOW` per component, no identity check) in the same process, same attacker.",
        "",
        "| operation | exchanged | operations | carried out | refused | escapes | attacker swaps | "
        "outside unchanged | seconds | baseline walks | baseline escapes | baseline escape rate |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        rate = r.baseline_escapes / r.baseline_walks if r.baseline_walks else 0.0
        lines.append(
            f"| {r.op} | {r.swap} | {r.ops:,} | {r.succeeded:,} | {r.ops - r.succeeded:,} | **{r.escapes}** | "
            f"{r.swaps:,} | {'yes' if r.fingerprint_unchanged else '**NO**'} | {r.seconds} | "
            f"{r.baseline_walks:,} | {r.baseline_escapes:,} | {rate:.1%} |"
        )
    return "\n".join([*lines, "", BEFORE]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000, help="operations of each kind")
    ap.add_argument("--only", choices=OPS, action="append", help="run these kinds only")
    ap.add_argument("--swap", choices=SWAPS, action="append", help="exchange these only")
    ap.add_argument("--json", action="store_true", help="JSON on stdout, RESULTS file untouched")
    args = ap.parse_args()
    rows = []
    for swap in args.swap or SWAPS:
        for op in args.only or OPS:
            with tempfile.TemporaryDirectory(prefix="sandbox-race-") as tmp:
                rows.append(race(op, args.ops, Path(tmp), swap=swap))
            print(rows[-1], file=sys.stderr)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        RESULTS.write_text(_markdown(rows, args.ops))
    bad = [r.op for r in rows if r.escapes or not r.fingerprint_unchanged]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
