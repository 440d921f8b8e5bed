"""Structure-aware fuzzing of safecert's input formats, shared by the suite and the long run.

Each format starts from a shipped, valid example (shrunk where its run would be long: fewer
episodes, tighter time limits) and applies 1-3 mutations drawn by hypothesis:

* structural, on the parsed document: delete a key, replace a value by a hostile one (non-finite,
  huge, negative, wrong type, empty, long string), wrap a value in deep nesting, add an unknown key;
* textual, on the written bytes: insert invalid UTF-8, truncate.

The command then runs in this process (``safecert.cli.main.main``), in a fresh folder holding the
inputs, with a wall-clock limit (``SIGALRM``). :func:`check` states the contract: exit 0, 1 or 2;
no exception escapes (a traceback); exit 2 prints exactly one line; nothing outside the output
folder is created, changed or removed; the limit is not reached (an absurd value must be refused).

Issue 27's hostile classes (chains, TOML bombs, special files, …) have their own generators in
:mod:`tests.fuzz.hostile`, run in a child process under a 4 GB address-space limit with a deadline
per case by :mod:`tests.fuzz.worker`, which judges each case with :func:`check` below.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import math
import os
import shutil
import signal
import tempfile
import time
import tomllib
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

HOSTILE: list[Any] = [
    -1,
    0,
    2**63,
    10**30,
    1e308,
    -1e308,
    math.inf,
    -math.inf,
    math.nan,
    1e-320,
    True,
    False,
    "",
    "x" * 5000,
    "1e308sigma",
    "inf",
    "${NO_SUCH_VARIABLE_14}",
    "\u00e9\u2603",
    [],
    {},
    [1, [2, [3]]],
    {"k": 1},
]
DEEP = 3000


@dataclass(frozen=True)
class Deep:
    """``value`` wrapped in ``depth`` arrays, written without recursion."""

    value: Any
    depth: int


# ----------------------------------------------------------------------------- writing TOML / JSON


def toml_value(v: Any) -> str:
    if isinstance(v, Deep):
        return "[" * v.depth + toml_value(v.value) + "]" * v.depth
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return (
            "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"
        )
    return json.dumps(str(v))


def write_toml(doc: dict[str, Any]) -> bytes:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in doc.items()).encode()


def write_json(doc: Any) -> bytes:
    """JSON with NaN/Infinity literals allowed (hostile input too) and :class:`Deep` nesting."""
    deep: list[Deep] = []

    def hold(v: Any) -> str:
        if isinstance(v, Deep):
            deep.append(v)
            return f"@@deep{len(deep) - 1}@@"
        raise TypeError(type(v))

    text = json.dumps(doc, allow_nan=True, default=hold)
    for i, d in enumerate(deep):
        inner = json.dumps(d.value, allow_nan=True, default=hold)
        text = text.replace(f'"@@deep{i}@@"', "[" * d.depth + inner + "]" * d.depth)
    return text.encode()


# ----------------------------------------------------------------------------- mutations


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and list indices) to a value inside ``doc``."""
    out: list[tuple] = []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for k, v in items:
        out.append(prefix + (k,))
        out.extend(paths(v, prefix + (k,)))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for k in path[:-1]:
        doc = doc[k]
    return doc


@st.composite
def mutated(draw: Callable, doc: Any, *, allow_null: bool) -> tuple[Any, list[str]]:
    """``doc`` (a deep copy) with 1-3 structural mutations; returns it and their descriptions."""
    doc = copy.deepcopy(doc)
    done: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        where = paths(doc)
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent, key = _parent(doc, path), path[-1]
        op = draw(st.sampled_from(["delete", "hostile", "hostile", "retype", "nest", "unknown"]))
        if op == "delete":
            del parent[key]
        elif op == "hostile":
            choices = HOSTILE + ([None] if allow_null else [])
            parent[key] = copy.deepcopy(draw(st.sampled_from(choices)))  # never share HOSTILE's
        elif op == "retype":
            v = parent[key]
            parent[key] = draw(st.sampled_from([str(v), [v], {"value": v}]))
        elif op == "nest":
            parent[key] = Deep(parent[key], DEEP)
        else:
            target = parent if isinstance(parent, dict) else doc
            target["unknown_key_14"] = 1
        done.append(f"{op} {'.'.join(map(str, path))}")
    return doc, done


@st.composite
def bytes_mutation(draw: Callable, data: bytes) -> tuple[bytes, str]:
    """Maybe one textual mutation of the written bytes."""
    op = draw(st.sampled_from(["none", "none", "utf8", "truncate"]))
    if op == "none" or not data:
        return data, ""
    at = draw(st.integers(0, len(data)))
    if op == "utf8":
        return data[:at] + b"\xff\xfe\xc3" + data[at:], f"invalid UTF-8 at byte {at}"
    return data[:at], f"truncated at byte {at}"


# ----------------------------------------------------------------------------- running


class Overtime(Exception):
    """The command ran past the fuzz limit."""


@dataclass
class Outcome:
    code: int | None
    stdout: str
    stderr: str
    error: str  # the traceback of an exception that escaped, or ""
    overtime: bool
    seconds: float


def _snapshot(root: Path, skip: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path == skip or skip in path.parents:
            continue
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(path.relative_to(root))] = "dir"
    return out


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def fire(signum: int, frame: object) -> None:
        raise Overtime

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(argv: list[str], cwd: Path, limit_s: float) -> Outcome:
    """``safecert ARGV`` in this process, in ``cwd``, for at most ``limit_s`` seconds."""
    from safecert.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    error, overtime = "", False
    here = os.getcwd()
    start = time.monotonic()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _alarm(limit_s):
            code = main(argv)
    except Overtime:
        overtime = True
    except SystemExit as exc:  # a command that calls sys.exit itself
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - any escape is the finding
        error = traceback.format_exc()
    finally:
        os.chdir(here)
    return Outcome(code, out.getvalue(), err.getvalue(), error, overtime, time.monotonic() - start)


def check(outcome: Outcome, before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The contract's violations (empty: the run was fine)."""
    bad = []
    if outcome.error:
        bad.append("traceback: " + outcome.error.strip().splitlines()[-1])
    if outcome.overtime:
        bad.append(f"still running after {outcome.seconds:.0f}s (an absurd value not refused?)")
    if "Traceback (most recent call last)" in outcome.stderr:
        bad.append("traceback on stderr")
    if not outcome.error and not outcome.overtime and outcome.code not in (0, 1, 2):
        bad.append(f"exit code {outcome.code}")
    if outcome.code == 2:
        lines = outcome.stderr.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("safecert: error:"):
            bad.append(f"exit 2 with {len(lines)} lines on stderr: {outcome.stderr[-300:]!r}")
    if before != after:
        changed = sorted(set(before.items()) ^ set(after.items()))
        bad.append(f"touched outside --out: {changed[:3]}")
    return bad


# ----------------------------------------------------------------------------- the formats


@dataclass
class Format:
    """A fuzzed input: its base document, how to lay out a workspace and the command to run."""

    name: str
    base: Any  # the parsed, valid example
    kind: str  # "toml" | "json" | "jsonl"
    target: str  # file name of the fuzzed input in the workspace
    setup: Callable[[Path], None]  # copies the other inputs
    argv: list[str]
    limit_s: float = 60.0


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)


def blackbox_format() -> Format:
    doc = tomllib.loads((EXAMPLES / "cartpole_python.toml").read_text())
    doc.update(episodes=3, max_steps=20, batch_size=4, workers=1)  # a run of seconds

    def setup(ws: Path) -> None:
        _copy(
            EXAMPLES / "vendors" / "cartpole_policies.py", ws / "vendors" / "cartpole_policies.py"
        )

    return Format(
        "blackbox-toml", doc, "toml", "run.toml", setup, ["certify", "run.toml", "--out", "out"]
    )


GRID_LOG_LINES = 200


def _grid_logs() -> list[bytes]:
    return (
        (EXAMPLES / "shield" / "grid_logs.jsonl")
        .read_bytes()
        .splitlines(keepends=True)[:GRID_LOG_LINES]
    )


def shield_model_format() -> Format:
    doc = tomllib.loads((EXAMPLES / "shield" / "grid.toml").read_text())

    def setup(ws: Path) -> None:
        (ws / "logs.jsonl").write_bytes(b"".join(_grid_logs()))

    return Format(
        "shield-model-toml",
        doc,
        "toml",
        "model.toml",
        setup,
        ["shield", "certify", "--model", "model.toml", "--logs", "logs.jsonl", "--out", "out"],
    )


def logs_format() -> Format:
    lines = [json.loads(x) for x in _grid_logs()]

    def setup(ws: Path) -> None:
        _copy(EXAMPLES / "shield" / "grid.toml", ws / "model.toml")

    return Format(
        "shield-logs-jsonl",
        lines,
        "jsonl",
        "logs.jsonl",
        setup,
        ["shield", "certify", "--model", "model.toml", "--logs", "logs.jsonl", "--out", "out"],
    )


def bnn_format() -> Format:
    doc = tomllib.loads((EXAMPLES / "bnn" / "lds.toml").read_text())
    doc["limits"] = {"per_epsilon_s": 3, "total_s": 6, "solver_s": 2, "max_iterations": 2}
    doc["data"] = {
        "initial_samples": 50,
        "unsafe_samples": 50,
        "bootstrap": False,
        "falsifier_samples": 200,
    }

    def setup(ws: Path) -> None:
        _copy(EXAMPLES / "bnn" / "lds.npz", ws / "lds.npz")

    return Format(
        "bnn-toml", doc, "toml", "bnn.toml", setup, ["bnn", "verify", "bnn.toml", "--out", "out"]
    )


def certificate_format(run_dir: Path) -> Format:
    """A certificate written by ``shield certify`` into ``run_dir`` (its evidence beside it)."""
    doc = json.loads((run_dir / "certificate.json").read_text())

    def setup(ws: Path) -> None:
        for path in run_dir.iterdir():
            if path.is_file() and path.name != "certificate.json":
                _copy(path, ws / "run" / path.name)
        for name in ("model.toml", "logs.jsonl"):
            src = run_dir.parent / name
            if src.is_file():
                _copy(src, ws / name)

    return Format(
        "certificate-json",
        doc,
        "json",
        "run/certificate.json",
        setup,
        ["verify", "run/certificate.json"],
    )


def make_certificate_run(folder: Path) -> Path:
    """Write the grid model, its logs and a shield certificate under ``folder``; returns the run."""
    folder.mkdir(parents=True, exist_ok=True)
    _copy(EXAMPLES / "shield" / "grid.toml", folder / "model.toml")
    (folder / "logs.jsonl").write_bytes(b"".join(_grid_logs()))
    outcome = run_cli(
        ["shield", "certify", "--model", "model.toml", "--logs", "logs.jsonl", "--out", "run"],
        folder,
        120,
    )
    assert outcome.code == 0, outcome.stderr + outcome.error
    return folder / "run"


@st.composite
def fuzz_input(draw: Callable, fmt: Format) -> tuple[bytes, list[str]]:
    """The bytes of one mutated input of ``fmt`` and what was done to it."""
    if fmt.kind == "jsonl":
        lines = list(fmt.base)
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["record", "record", "drop", "swap"]))
        if op == "record":
            rec, done = draw(mutated(lines[i], allow_null=True))
            lines[i] = rec
        elif op == "drop":
            del lines[i]
            done = [f"dropped line {i + 1}"]
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            done = [f"swapped lines {i + 1} and {j + 1}"]
        data = b"".join(write_json(x) + b"\n" for x in lines)
    else:
        doc, done = draw(mutated(fmt.base, allow_null=fmt.kind == "json"))
        data = write_toml(doc) if fmt.kind == "toml" else write_json(doc)
    data, textual = draw(bytes_mutation(data))
    return data, done + ([textual] if textual else [])


def run_one(fmt: Format, data: bytes, root: Path) -> tuple[Outcome, list[str]]:
    """Lay out a fresh workspace under ``root``, run the command, return outcome and violations."""
    ws = Path(tempfile.mkdtemp(dir=root))
    fmt.setup(ws)
    target = ws / fmt.target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    before = _snapshot(ws, ws / "out")
    outcome = run_cli(fmt.argv, ws, fmt.limit_s)
    after = _snapshot(ws, ws / "out")
    problems = check(outcome, before, after)
    if not problems:
        shutil.rmtree(ws, ignore_errors=True)
    return outcome, problems
