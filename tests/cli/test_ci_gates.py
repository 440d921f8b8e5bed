"""A CI-grade command line: ``verify --require``, ``--junit FILE``, ``--events FILE`` and progress
lines when stderr is not a terminal (issue 22, item 3), through the real command."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.blackbox import pipeline_helpers
from tests.conftest import REPO, run_cli

cli_here = pipeline_helpers.cli_here  # the in-process CLI fixture

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "junit.xsd"
SHIELD = REPO / "examples" / "shield"


# --- JUnit XML against the Jenkins/Ant schema, validated by xmlschema (a full XSD 1.0 validator)


def _schema():  # type: ignore[no-untyped-def]
    import xmlschema

    return xmlschema.XMLSchema(SCHEMA)


def junit_cases(path: Path) -> tuple[ET.Element, list[ET.Element]]:
    """Validate ``path`` against the schema; return its one testsuite and its test cases, after
    checking that the counts it states are the counts it holds."""
    _schema().validate(path)  # raises XMLSchemaValidationError naming the offending element
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == len(failed)
    return suite, cases


def test_the_validator_rejects_what_the_schema_does_not_allow(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuites><testsuite name="x"><testcase/></testsuite></testsuites>')
    import xmlschema

    with pytest.raises(xmlschema.XMLSchemaValidationError, match="missing required attribute"):
        junit_cases(bad)
    bad.write_text(
        '<testsuites><testsuite name="x" tests="1"><testcase name="a"><system-out>o</system-out>'
        '<failure message="m"/></testcase></testsuite></testsuites>'
    )
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        junit_cases(bad)


def _values(case: ET.Element) -> dict[str, str]:
    text = case.findtext("system-out") or ""
    return dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)


def _events(path: Path) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all("time" in e and "kind" in e for e in lines)
    return lines


# --- black-box: certify → JUnit, events, verify --require


@pytest.fixture
def certified(tmp_path, cli_here):
    config = pipeline_helpers.cartpole_run(tmp_path, episodes=8, max_steps=40)
    out = tmp_path / "out"
    res = cli_here(
        "certify", config, "--out", out, "--workers", "1", "--json",
        "--junit", tmp_path / "certify.xml", "--events", tmp_path / "events.jsonl",
    )  # fmt: skip
    return tmp_path, out, res


def test_certify_junit_one_case_per_cell_and_events_end_finished(certified):
    folder, out, res = certified
    cert = json.loads((out / "certificate.json").read_text())
    assert res.code == (0 if cert["verdict"] == "PASS" else 1)
    assert json.loads(res.stdout)["verdict"] == cert["verdict"]  # stdout is the JSON alone

    suite, cases = junit_cases(folder / "certify.xml")
    cells = cert["result"]["cells"]
    assert len(cases) == 1 + len(cells)  # stage 1, then every grid cell
    for case, cell in zip(cases[1:], cells, strict=True):
        values = _values(case)
        assert int(values["episodes"]) == cell["episodes"] == 8
        assert int(values["failures"]) == cell["failures"]
        assert values["decision"] == cell["decision"]
        assert float(values["upper_bound"]) == pytest.approx(cell["upper_bound"], rel=1e-5)
        assert (case.find("failure") is not None) == (cell["decision"] != "PASS")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == cert["verdict"] and props["kind"] == "blackbox"

    events = _events(folder / "events.jsonl")
    assert events[0]["kind"] == "run_started" and events[-1]["kind"] == "run_finished"
    assert events[0]["cells"] == len(cells) and events[0]["episodes_total"] == 8 * len(cells)
    assert events[-1]["verdict"] == cert["verdict"]
    stored = [e for e in events if e["kind"] == "episodes_stored"]
    assert stored and stored[-1]["done"] == stored[-1]["total"] == 8 * len(cells)
    assert [e["done"] for e in stored] == sorted(e["done"] for e in stored)
    decided = {e["cell"]: e for e in events if e["kind"] == "cell_decided"}
    assert sorted(decided) == list(range(len(cells)))
    for i, cell in enumerate(cells):  # decided during the run as the judge decides at the end
        assert decided[i]["decision"] == cell["decision"]
        assert decided[i]["failures"] == cell["failures"]


def test_verify_require_gate(certified, cli_here):
    folder, out, _ = certified
    cert_path = out / "certificate.json"
    verdict = json.loads(cert_path.read_text())["verdict"]
    other = "FAIL" if verdict == "PASS" else "PASS"

    ok = cli_here("verify", cert_path, "--require", verdict, "--json")
    assert ok.code == 0, ok.stderr
    assert ok.json()["required"] == [verdict] and ok.json()["required_met"] is True

    gated = cli_here("verify", cert_path, "--require", other, "--junit", folder / "verify.xml")
    assert gated.code == 1
    assert f"verdict is {verdict}" in gated.stdout and f"required {other}" in gated.stdout
    _, cases = junit_cases(folder / "verify.xml")
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["required verdict"]  # every check passed; the verdict did not
    assert len(cases) > 1

    both = cli_here("verify", cert_path, "--require", "pass,fail", "--json")
    assert both.code == 0 and both.json()["required_met"] is True

    for bad, words in (("GREEN", "GREEN is not a verdict"), ("SAFE", "never SAFE"), ("", "")):
        res = cli_here("verify", cert_path, "--require", bad)
        lines = res.stderr.strip().splitlines()
        assert res.code == 2 and len(lines) == 1 and "--require" in lines[0], res.stderr
        assert words in lines[0] and "Traceback" not in res.stderr


def test_rejudge_junit(certified, cli_here):
    folder, out, _ = certified
    res = cli_here(
        "rejudge", out, "--budget", "0", "--p-star", "0.99", "--junit", folder / "r.xml", "--json"
    )
    assert res.code == 0, res.stderr
    _, cases = junit_cases(folder / "r.xml")
    assert len(cases) == 1 + len(res.json()["result"]["cells"])
    assert all(c.find("failure") is None for c in cases)


# --- shield


def test_shield_synthesize_and_certify_junit(tmp_path, cli_here):
    common = ["--model", SHIELD / "grid.toml", "--logs", SHIELD / "grid_logs.jsonl"]
    syn = cli_here(
        "shield", "synthesize", *common, "--epsilon", "0.2", "--out", tmp_path / "syn",
        "--allow-goal-unreachable", "--junit", tmp_path / "syn.xml", "--json",
    )  # fmt: skip
    assert syn.code == 0, syn.stderr
    suite, cases = junit_cases(tmp_path / "syn.xml")
    (case,) = cases
    values = _values(case)
    assert float(values["bound"]) == pytest.approx(syn.json()["bound"], rel=1e-5)
    assert float(values["epsilon"]) == 0.2 and case.find("failure") is None

    tight = cli_here(
        "shield", "certify", *common, "--epsilon", "1e-9", "--out", tmp_path / "cert",
        "--junit", tmp_path / "cert.xml",
    )  # fmt: skip
    assert tight.code == 1
    _, (case,) = junit_cases(tmp_path / "cert.xml")
    assert case.find("failure") is not None and _values(case)["verdict"] == "FAIL"

    bound = cli_here(
        "shield", "certify", *common, "--out", tmp_path / "b", "--junit", tmp_path / "b.xml"
    )
    assert bound.code == 0
    _, (case,) = junit_cases(tmp_path / "b.xml")
    assert case.find("failure") is None and _values(case)["verdict"] == "BOUND"
    gate = cli_here("verify", tmp_path / "b" / "certificate.json", "--require", "PASS")
    assert gate.code == 1 and "verdict is BOUND" in gate.stdout


# --- BNN: one case per ε attempt, events per ε


def test_bnn_unknown_attempt_is_a_junit_failure_with_its_reason(tmp_path, cli_here):
    from tests.bnn.conftest import EXAMPLE, FAST

    shutil.copyfile(EXAMPLE / "lds.npz", tmp_path / "lds.npz")
    (tmp_path / "run.toml").write_text(FAST)
    res = cli_here(
        "bnn", "verify", tmp_path / "run.toml", "--out", tmp_path / "out", "--time-limit",
        "0.001", "--json", "--junit", tmp_path / "bnn.xml", "--events", tmp_path / "bnn.jsonl",
    )  # fmt: skip
    assert res.code == 1 and res.json()["verdict"] == "UNKNOWN"
    _, cases = junit_cases(tmp_path / "bnn.xml")
    attempts = res.json()["search"]
    assert len(cases) == len(attempts) >= 1
    for case, attempt in zip(cases, attempts, strict=True):
        failure = case.find("failure")
        assert failure is not None and attempt["reason"] in failure.get("message")
        assert _values(case)["verdict"] == "UNKNOWN"

    events = _events(tmp_path / "bnn.jsonl")
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("epsilon_started") == kinds.count("epsilon_finished") == len(attempts)
    assert events[-1]["verdict"] == "UNKNOWN"
    finished = [e for e in events if e["kind"] == "epsilon_finished"]
    assert [e["reason"] for e in finished] == [a["reason"] for a in attempts]


# --- progress lines when stderr is not a terminal (a real subprocess: stderr is a pipe)


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    config = pipeline_helpers.cartpole_run(tmp_path, episodes=40, max_steps=40)
    env = {**os.environ, "SAFECERT_PROGRESS_INTERVAL": "0"}
    res = run_cli(
        "certify", str(config), "--out", str(tmp_path / "out"), "--workers", "1", "--json",
        env=env,
    )  # fmt: skip
    assert res.code in (0, 1), res.stderr
    json.loads(res.stdout)  # stdout holds the JSON and nothing else
    lines = [x for x in res.stderr.splitlines() if x.startswith("safecert: ")]
    assert lines[0].startswith("safecert: started: blackbox run, 4 cells, up to 160 episodes")
    progress = [x for x in lines if " episodes, " in x and "cells decided" in x and "ETA" in x]
    assert progress and progress[-1].startswith("safecert: 160/160 episodes")
    assert lines[-1].startswith("safecert: finished: verdict ")
    assert "\r" not in res.stderr and "\x1b[" not in res.stderr  # lines, not a redrawn bar


def test_progress_lines_are_rate_limited():
    from io import StringIO

    from safecert.events import Events, ProgressLines

    now = [0.0]
    stream = StringIO()
    events = Events(ProgressLines(stream, interval_s=10.0, clock=lambda: now[0]))
    events.emit("run_started", engine="blackbox", cells=2, episodes_total=100, episodes_stored=0)
    for done in range(10, 101, 10):
        now[0] += 3.0  # a batch every 3 s: a line at 12 s, 24 s
        events.emit("episodes_stored", done=done, total=100, failures=0, cells=2, cells_decided=0)
    events.emit("run_finished", verdict="PASS")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 + 2
    assert lines[1] == "safecert: 40/100 episodes, 0/2 cells decided, 0 failures, ETA 18 s"


def test_sequential_certify_junit_and_events(tmp_path, cli_here):
    config = pipeline_helpers.cartpole_run(tmp_path, episodes=40, max_steps=40)
    config.write_text(config.read_text() + '\n[sequential]\nmethod = "curtail"\n')
    res = cli_here(
        "certify", config, "--out", tmp_path / "out", "--workers", "1", "--json",
        "--junit", tmp_path / "seq.xml", "--events", tmp_path / "seq.jsonl",
    )  # fmt: skip
    cert = res.json()
    assert cert["kind"] == "sequential" and res.code == (0 if cert["verdict"] == "PASS" else 1)
    _, cases = junit_cases(tmp_path / "seq.xml")
    cells = cert["result"]["cells"]
    assert len(cases) == 1 + len(cells)
    for case, cell in zip(cases[1:], cells, strict=True):
        assert _values(case)["decision"] == cell["decision"]
        assert (case.find("failure") is not None) == (cell["decision"] != "PASS")
    events = _events(tmp_path / "seq.jsonl")
    assert events[0]["engine"] == "sequential" and events[-1]["kind"] == "run_finished"
    assert events[-1]["verdict"] == cert["verdict"]
    decided = {e["cell"]: e["decision"] for e in events if e["kind"] == "cell_decided"}
    assert decided == {i: c["decision"] for i, c in enumerate(cells)}


def test_an_unwritable_events_path_is_one_line(tmp_path, cli_here):
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = cli_here(
        "bnn", "verify", "--benchmark", "lds", "--epsilon", "0.1sigma",
        "--out", tmp_path / "out", "--events", blocker / "events.jsonl",
    )  # fmt: skip
    assert res.code == 2 and "events: cannot write" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()  # refused before the run wrote anything
