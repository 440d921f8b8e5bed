"""Issue 27's hostile classes, one test each, through the real commands in a child process under a
4 GB address-space limit (tests/fuzz/worker.py); then a small derandomized run of every generator
(benchmarks/fuzz_inputs.py runs 1,000 cases per format). Each case must end in exit 0/1/2 with no
traceback, no warning shown, no hang, no memory blow-up, and exit 2 must be one stderr line."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz import harness, hostile
from tests.fuzz.worker import MEMORY_FLAG_MB, Result, Worker

EXAMPLES = harness.EXAMPLES
MAKERS = {
    "blackbox-toml": harness.blackbox_format,
    "shield-model-toml": harness.shield_model_format,
    "bnn-toml": harness.bnn_format,
}


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    with Worker(tmp_path_factory.mktemp("hostile")) as w:
        yield w


def _blackbox(**spec: str) -> bytes:
    doc = harness.blackbox_format().base
    doc = {**doc, "spec": {**doc["spec"], **spec}}
    return harness.write_toml(doc)


def _ok(result: Result) -> Result:
    assert not result.problems, result.problems
    assert not (result.traceback or result.hang or result.memory or result.warnings), result
    return result


def _refused(result: Result, *needles: str) -> str:
    _ok(result)
    assert result.code == 2, result
    line = result.stderr.strip()
    for needle in needles:
        assert needle in line, line
    return line


@pytest.mark.parametrize(
    "cost",
    [
        "+".join(["t"] * 4999) + " + sqrt(-1)",  # 5,000 terms, then an invalid operation
        "*".join(["reward"] * 1400) + " * log(0)",
        "obs" + "[0]" * 3000,  # indexes a number at the second step of the chain
    ],
)
def test_chains_are_evaluated_without_recursion(worker, cost):
    """Flat chains of thousands of operators pass the depth limit; the preflight episode evaluates
    them and the error they end in is the one line naming spec.cost (was RecursionError)."""
    _refused(worker.run("blackbox-toml", hostile.Case(_blackbox(cost=cost)), 120), "spec.cost")


@pytest.mark.parametrize(
    "cost, says",
    [
        ("10**10**10", "overflow encountered in power"),
        ("sqrt(-1) + obs[0]", "invalid value encountered in sqrt"),
        ("log(0)", "divide by zero encountered in log"),
    ],
)
def test_floating_point_errors_are_one_line_without_numpy_warnings(worker, cost, says):
    _refused(
        worker.run("blackbox-toml", hostile.Case(_blackbox(cost=cost)), 120), "spec.cost", says
    )


@pytest.mark.parametrize("fmt", ["blackbox-toml", "shield-model-toml", "bnn-toml"])
@pytest.mark.parametrize(
    "bomb, says",
    [
        (".".join(["a"] * 50_000) + " = 1\n", "a key of more than 64 parts"),
        ("[" + ".".join(["t"] * 50_000) + "]\n", "a key of more than 64 parts"),
        ("z = " + "[" * 50_000 + "]" * 50_000 + "\n", "nested over 64 deep"),
    ],
)
def test_toml_bombs_are_refused_before_parsing(worker, fmt, bomb, says):
    """100 KB of dotted key took tomllib 1.6 GB at 20,000 parts; it is refused by the linear scan
    (and the child's peak memory stays under the blow-up mark)."""
    base = harness.write_toml(MAKERS[fmt]().base)
    result = worker.run(fmt, hostile.Case(bomb.encode() + base), 60)
    _refused(result, "config:", says)
    assert result.peak_mb < MEMORY_FLAG_MB


@pytest.mark.parametrize(
    "kind, says",
    [
        ("folder", "is a directory"),
        ("fifo", "is not a regular file (it is a FIFO)"),
        ("dev-zero", "is not a regular file (it is a character device)"),
        ("link", "is not a regular file (it is a character device)"),
        ("missing", "does not exist"),
    ],
)
@pytest.mark.parametrize("fmt", ["blackbox-toml", "bnn-toml"])
def test_special_files_are_named_and_never_block(worker, fmt, kind, says):
    _refused(worker.run(fmt, hostile.Case(b"", path_kind=kind), 30), "config:", says)


@pytest.mark.parametrize(
    "cell_format",
    ["r{row:3000000000}c{col}", "{row.real}", "{row[0]}", "{0}", "{row:{col}}", "{row!r}"],
)
def test_cell_format_allows_only_row_and_col(worker, cell_format):
    doc = harness.shield_model_format().base
    doc = {**doc, "layout": {"rows": 1, "cols": 2, "cell_format": cell_format}}
    result = worker.run("shield-model-toml", hostile.Case(harness.write_toml(doc)), 60)
    _refused(result, "layout.cell_format", "{row} and {col}")


def test_a_bounded_cell_format_still_works(worker):
    doc = tomllib.loads((EXAMPLES / "shield" / "grid.toml").read_text())
    doc["layout"]["cell_format"] = doc["layout"]["cell_format"].replace("{row}", "{row:01d}")
    _ok(worker.run("shield-model-toml", hostile.Case(harness.write_toml(doc)), 120))


@pytest.mark.parametrize(
    "fmt, old, new, says",
    [
        ("blackbox-toml", "episodes", "episode", "episode: unknown key; did you mean `episodes`?"),
        ("shield-model-toml", "horizon", "horizn", "horizn: unknown key; did you mean `horizon`?"),
        ("bnn-toml", "epsilon", "epsilom", "epsilom: unknown key; did you mean `epsilon`?"),
    ],
)
def test_near_miss_keys_say_did_you_mean(worker, fmt, old, new, says):
    base = MAKERS[fmt]().base
    doc = {(new if k == old else k): v for k, v in base.items()}
    line = _refused(worker.run(fmt, hostile.Case(harness.write_toml(doc)), 60))
    assert line == f"safecert: error: {says}"


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("dynamics", "next", "x"), "1" * 400 + " * x", "dynamics.next.x"),
        (("sets", "initial", "box", "x"), [-(10**400), 0.5], "sets.initial.box.x.0"),
        (("dynamics", "choices"), [10**400, 1], "dynamics.choices.0"),
    ],
)
def test_huge_integers_are_checked_conversions(worker, path, value, field):
    doc = harness.bnn_format().base
    table = doc
    for k in path[:-1]:
        table = table[k]
    table[path[-1]] = value
    _refused(worker.run("bnn-toml", hostile.Case(harness.write_toml(doc)), 60), field)


# ----------------------------------------------------------------------------- generated cases

SUITE = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)


@pytest.mark.parametrize(
    "fmt", ["cost-expression", "blackbox-toml", "shield-model-toml", "bnn-toml"]
)
def test_generated_hostile_cases_keep_the_contract(worker, fmt):
    @SUITE
    @given(case=hostile.strategy(fmt))
    def one(case: hostile.Case) -> None:
        result = worker.run(fmt, case, 120)
        assert not result.problems, f"{fmt} after {case.done}: {result.problems}"

    one()


@pytest.mark.slow
def test_the_harness_catches_the_old_failures(tmp_path):
    """Not vacuous: against the revision before the fixes, the same cases are a traceback
    (RecursionError, OverflowError), a numpy warning and a memory blow-up."""
    repo = Path(__file__).resolve().parents[2]
    archive = subprocess.run(
        ["git", "archive", "1ea0a26^", "src"], cwd=repo, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    bnn = harness.bnn_format().base
    bnn["dynamics"]["next"]["x"] = "1" * 400 + " * x"
    with Worker(tmp_path, tmp_path / "src") as old:
        chain = old.run(
            "cost-expression", hostile.Case("+".join(["t"] * 4999).encode() + b"\0true"), 60
        )
        assert chain.traceback and "RecursionError" in str(chain.problems)
        warned = old.run("cost-expression", hostile.Case(b"log(0)\0true"), 60)
        assert warned.warnings and "divide by zero" in warned.warnings[0]
        big = old.run("bnn-toml", hostile.Case(harness.write_toml(bnn)), 60)
        assert big.traceback and "OverflowError" in str(big.problems)
        bomb = old.run("blackbox-toml", hostile.Case(b".".join([b"a"] * 20_000) + b" = 1\n"), 120)
        assert bomb.memory
