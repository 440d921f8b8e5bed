"""The black-box door, round 2 (issue 27): stores, conversions and messages.

Each test builds its own hostile input of one class the held-out corpus found, runs it through the
real command (``tests.conftest.run_cli``, in this process) where the message matters, and states
the property: exit code 2 and ONE stderr line that names the field and the fix, no traceback, no
numpy warning — or, for stores, that reading never changes the evidence file.
"""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.blackbox.oracles.base import MAX_JSON_DEPTH, OracleFailure, decode_reply
from tests.conftest import CliResult, run_cli

POLICY = """
import numpy as np

def balance(obs):
    obs = np.asarray(obs)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)

def null(obs):
    return None

def outside(obs):
    return np.full(len(obs), 7, dtype=np.int64)
"""

BASE = """
policy = "python:door_pol:{policy}"
env = "CartPole-v1"
episodes = 3
seed = 1
max_steps = 20
trust = "in-process"
{top}
[spec]
budget = 0.0
p_star = 0.3
cost = '{cost}'
goal = "{goal}"
{tail}
"""


def config(folder: Path, name: str = "run.toml", **fields: str) -> Path:
    """A small CartPole run (``door_pol`` policies) with ``fields`` filled into :data:`BASE`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "door_pol.py").write_text(POLICY)
    values = {"policy": "balance", "top": "", "cost": 'info.get("cost", 0)'}
    values |= {"goal": "no_termination", "tail": ""} | fields
    path = folder / name
    path.write_text(textwrap.dedent(BASE.format(**values)))
    return path


def refused(result: CliResult, field: str, *words: str) -> str:
    """Assert exit 2 with one stderr line ``safecert: error: FIELD: …`` holding ``words``."""
    assert result.code == 2, (result.code, result.stdout[-2000:], result.stderr[-2000:])
    line = result.stderr.strip()
    assert "\n" not in line, result.stderr
    assert "Traceback" not in line and "Warning" not in line, line
    assert line.startswith(f"safecert: error: {field}:"), line
    for word in words:
        assert word in line, (word, line)
    return line


# -- conversions ------------------------------------------------------------------------------


def test_http_policy_port_out_of_range_is_one_line_naming_policy(tmp_path):
    path = config(tmp_path)
    path.write_text(
        path.read_text().replace("python:door_pol:balance", "http://127.0.0.1:99999/act")
    )
    refused(run_cli("certify", path, "--out", tmp_path / "o"), "policy", "99999", "1-65535")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("mode", ["human", "rgb_array"])
def test_render_mode_is_refused_with_the_reason(tmp_path, mode):
    path = config(tmp_path, top=f'env_kwargs = {{render_mode = "{mode}"}}')
    refused(
        run_cli("certify", path, "--out", tmp_path / "o"),
        "env_kwargs.render_mode",
        "never renders",
        "remove render_mode",
    )


def test_vendor_reply_nested_too_deep_is_a_failure_reason_not_a_recursion_error():
    for depth in (MAX_JSON_DEPTH + 1, 5_000, 200_000):
        body = b'{"actions":' + b"[" * depth + b"]" * depth + b"}"
        with pytest.raises(OracleFailure, match=f"nests deeper than {MAX_JSON_DEPTH} levels"):
            decode_reply(body, 1)
    # orjson stops at NaN; the standard library then reads the rest: its recursion limit too
    body = b'{"actions": [NaN, ' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    with pytest.raises(OracleFailure, match="nests deeper"):
        decode_reply(body, 2)


def test_exec_vendor_with_a_deep_reply_fails_its_health_check_in_one_line(tmp_path):
    path = config(tmp_path)
    (tmp_path / "deep.py").write_text(
        "import sys\nfor line in sys.stdin:\n"
        "    print('{\"actions\":' + '[' * 50000 + ']' * 50000 + '}', flush=True)\n"
    )
    path.write_text(path.read_text().replace("python:door_pol:balance", "exec:python3 deep.py"))
    refused(run_cli("certify", path, "--out", tmp_path / "o"), "policy", "nests deeper than 1024")


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"null", 'the vendor replied null; expected {"actions"'),
        (b'{"actions": null}', "the vendor replied null; expected a list of 2 actions"),
        (b'{"actions": [0.5, null]}', "null at actions[1]"),
        (b'{"actions": [[1, "a"], [2, 3]]}', "a str at actions[0][1]"),
        (b'{"actions": [[1' + b"0" * 400 + b"], [2]]}", "an integer of 1329 bits at actions[0][0]"),
        (b'{"actions": [[' + b"9" * 5000 + b"]]}", "an integer of more than 4300 digits"),
    ],
)
def test_null_and_text_replies_say_what_they_hold(reply, said):
    with pytest.raises(OracleFailure) as info:
        decode_reply(reply, 2)
    assert said in info.value.reason and "dtype object" not in info.value.reason


def test_a_policy_replying_null_is_named_at_the_health_check(tmp_path):
    path = config(tmp_path, policy="null")
    refused(
        run_cli("certify", path, "--out", tmp_path / "o"),
        "policy",
        "the vendor replied null; expected a list of 1 action, one per observation",
    )


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    doc=JSON_VALUES,
    nest=st.integers(0, 3000),
    cut=st.integers(0, 50),
    rows=st.integers(0, 4),
)
def test_any_reply_decodes_or_fails_with_a_reason(doc, nest, cut, rows):
    """A generator of replies (any JSON value under "actions", wrapped in up to 3,000 lists, or
    cut short): the decoder returns a checked array or raises OracleFailure — nothing else."""
    body = json.dumps({"actions": doc}).encode()
    body = body.replace(b'"actions": ', b'"actions": ' + b"[" * nest, 1)[:-1] + b"]" * nest + b"}"
    for payload in (body, body[: len(body) - cut]):
        try:
            arr = decode_reply(payload, rows)
        except OracleFailure as exc:
            assert exc.reason and "\n" not in exc.reason
        else:
            assert isinstance(arr, np.ndarray) and len(arr) == rows


# -- sizes and overflow -----------------------------------------------------------------------


def test_a_grid_of_a_million_cells_is_refused_before_any_work(tmp_path):
    levels = ", ".join(str(i / 1000) for i in range(1000))
    tail = f"[envelope]\nobs_noise = {{levels = [{levels}]}}\nact_noise = {{levels = [{levels}]}}"
    path = config(tmp_path, tail=tail)
    refused(
        run_cli("certify", path, "--out", tmp_path / "o"),
        "envelope",
        "1,000,000 cells",
        "10,000",
        "fewer levels",
    )
    assert not (tmp_path / "o").exists()


def test_obs_ranges_whose_span_overflows_are_refused_without_a_numpy_warning(tmp_path):
    ranges = "[[-1e308, 1e308], [-1, 1], [-1, 1], [-1, 1]]"
    tail = f"[envelope]\nobs_noise = {{levels = [0.0, 0.1]}}\nobs_ranges = {ranges}"
    path = config(tmp_path, tail=tail)
    refused(
        run_cli("certify", path, "--out", tmp_path / "o"),
        "envelope.obs_ranges[0]",
        "overflows to inf",
        "declare the range",
    )


def test_a_space_whose_span_overflows_is_refused_naming_the_dimension():
    import warnings

    from safecert.blackbox.ranges import _ranges
    from safecert.errors import ConfigError

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy overflow warning would fail the test
        with pytest.raises(ConfigError, match=r"envelope.obs_ranges: .*dimension 1"):
            _ranges(
                np.array([0.0, -1e308]), np.array([1.0, 1e308]), np.zeros(2, bool), 0, "space", None
            )


def test_kpis_return_whose_span_overflows_is_refused_at_config_time(tmp_path):
    path = config(tmp_path, tail="[kpis]\nreturn = {lower = -1e308, upper = 1e308}")
    line = refused(run_cli("certify", path, "--out", tmp_path / "o"), "kpis.return", "overflows")
    assert "certificate" not in line
    assert not (tmp_path / "o").exists()  # refused before a store, an episode or a certificate


# -- stores -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run folder (3 CartPole episodes)."""
    base = tmp_path_factory.mktemp("door")
    result = run_cli("certify", config(base / "in"), "--out", base / "run")
    assert result.code in (0, 1), result.stderr
    return base / "run"


def test_rejudge_of_an_empty_store_is_one_line_and_leaves_the_file_empty(finished, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(finished / "certificate.json", run)
    (run / "episodes.sqlite").write_bytes(b"")
    refused(
        run_cli("rejudge", run, "--budget", "1", "--p-star", "0.2"),
        "episodes.sqlite",
        "empty file",
        "rerun safecert certify",
    )
    assert (run / "episodes.sqlite").read_bytes() == b""
    assert sorted(p.name for p in run.iterdir()) == ["certificate.json", "episodes.sqlite"]


def test_reading_commands_never_change_the_store(finished, tmp_path):
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    store = run / "episodes.sqlite"
    before = store.read_bytes()
    listing = sorted(p.name for p in run.iterdir())
    assert run_cli("verify", run / "certificate.json").code == 0
    result = run_cli("rejudge", run, "--budget", "1", "--p-star", "0.2")
    assert result.code in (0, 1), result.stderr
    assert run_cli("verify", run / "rejudge_d1_p0.2" / "certificate.json").code == 0
    listing.append("rejudge_d1_p0.2")
    assert store.read_bytes() == before  # no schema, no pragma, no journal mode written
    assert sorted(p.name for p in run.iterdir()) == sorted(listing)  # no -wal / -shm left beside it


def test_a_store_with_tables_but_no_episode_is_not_rejudged(finished, tmp_path):
    import sqlite3

    from safecert.blackbox.store import _SCHEMA

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(finished / "certificate.json", run)
    with sqlite3.connect(run / "episodes.sqlite") as db:
        db.executescript(_SCHEMA)
    refused(
        run_cli("rejudge", run, "--budget", "1", "--p-star", "0.2"),
        "episodes.sqlite",
        "holds no episode",
    )


@pytest.mark.parametrize("edit", ["DELETE FROM episodes WHERE idx = 1", "DELETE FROM episodes"])
def test_rejudge_of_an_incomplete_store_is_one_line_not_a_value_error(finished, tmp_path, edit):
    import sqlite3

    run = Path(shutil.copytree(finished, tmp_path / "run"))
    with sqlite3.connect(run / "episodes.sqlite") as db:
        db.execute(edit)
    db.close()
    refused(
        run_cli("rejudge", run, "--budget", "1", "--p-star", "0.2"),
        "episodes.sqlite",
        "missing" if "idx" in edit else "holds no episode",
    )


def test_a_failed_pre_run_check_does_not_block_the_corrected_rerun(tmp_path):
    out = tmp_path / "o"
    path = config(tmp_path, cost="obs[9]")
    refused(run_cli("certify", path, "--out", out), "spec.cost", "obs[9]")
    assert (out / "episodes.sqlite").is_file()  # the failed attempt left its (empty) store
    path.write_text(path.read_text().replace("obs[9]", 'info.get("cost", 0)'))
    result = run_cli("certify", path, "--out", out)  # the same folder, no --resume needed
    assert result.code in (0, 1), result.stderr
    assert (out / "certificate.json").is_file()


def test_resume_with_another_config_names_both_files_and_the_fix(finished, tmp_path):
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    other = config(tmp_path / "other")
    line = refused(run_cli("certify", other, "--out", run, "--resume"), "--resume")
    started = str((finished.parent / "in" / "run.toml").resolve())
    assert f"started with the config {started}" in line
    assert f"--resume was given {other.resolve()}" in line
    assert "is gone" not in line and "no longer on disk" not in line  # it exists
    assert f"safecert certify {started} --out {run} --resume" in line


def test_resume_after_editing_the_config_says_it_changed(tmp_path):
    path = config(tmp_path)
    out = tmp_path / "o"
    assert run_cli("certify", path, "--out", out).code in (0, 1)
    refused(run_cli("certify", path, "--out", out), "--out", "already holds a run", "--resume")
    path.write_text(path.read_text() + "# edited\n")
    refused(
        run_cli("certify", path, "--out", out, "--resume"),
        "--resume",
        "the config file run.toml changed since this run started (3 episodes stored",
        "restore it",
    )


# -- messages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["sh missing.sh", "python3 missing.py", "sh ./missing"])
def test_a_missing_vendor_script_is_found_at_config_time(tmp_path, command):
    path = config(tmp_path)
    path.write_text(path.read_text().replace("python:door_pol:balance", f"exec:{command}"))
    script = command.split()[-1]
    refused(run_cli("certify", path, "--out", tmp_path / "o"), "policy", script, "does not exist")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_exec_node_with_a_missing_script_names_it(tmp_path):
    path = config(tmp_path)
    path.write_text(path.read_text().replace("python:door_pol:balance", "exec:node script.js"))
    refused(
        run_cli("certify", path, "--out", tmp_path / "o"),
        "policy",
        "'script.js'",
        str(tmp_path / "script.js"),
        "does not exist",
    )


def test_obs_index_out_of_range_names_the_size_and_valid_range(tmp_path):
    path = config(tmp_path, cost="obs[9]")
    line = refused(run_cli("certify", path, "--out", tmp_path / "o"), "spec.cost", "obs[9]")
    assert "obs has 4 entries (index 0 to 3, or -4 to -1)" in line
    assert "info.get" not in line


def test_misspelt_goal_name_says_it_once_with_did_you_mean(tmp_path):
    path = config(tmp_path, goal="episode_retrun > 3")
    line = refused(run_cli("certify", path, "--out", tmp_path / "o"), "spec.goal")
    assert line.count("episode_retrun > 3") == 1, line
    assert "did you mean 'episode_return'?" in line


def test_a_policy_always_out_of_space_is_explained_in_the_console(tmp_path):
    path = config(tmp_path, policy="outside")
    result = run_cli("certify", path, "--out", tmp_path / "o")
    assert result.code == 1, result.stderr
    text = " ".join(result.stdout.split())
    assert "failed episodes: 3/3 ended by an action outside the action space" in text
    assert "action 7 is outside Discrete(2)" in text
    assert "every episode failed so: return actions inside the space" in text


def test_a_crashed_vendors_error_line_is_kept_wherever_it_is_printed():
    from safecert.isolation import stderr_summary

    node = (
        "/tmp/v/bad.js:1\nconst x = require('nope');\n          ^\n\n"
        "Error: Cannot find module 'nope'\nRequire stack:\n- /tmp/v/bad.js\n"
        + "    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)\n" * 8
        + "}\n\nNode.js v20.20.2\n"
    )
    assert stderr_summary(node) == ["Error: Cannot find module 'nope'", "Node.js v20.20.2"]
    python = 'Traceback (most recent call last):\n  File "v.py", line 1\nImportError: no x\n'
    assert stderr_summary(python) == ["ImportError: no x"]
    assert stderr_summary("") == [] and stderr_summary("one\n") == ["one"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_node_vendor_that_crashes_at_start_says_why_in_one_line(tmp_path):
    path = config(tmp_path)
    (tmp_path / "bad.js").write_text('const x = require("nonexistent-module-abc");\n')
    path.write_text(path.read_text().replace("python:door_pol:balance", "exec:node bad.js"))
    refused(
        run_cli("certify", path, "--out", tmp_path / "o"),
        "policy",
        "Error: Cannot find module 'nonexistent-module-abc'",
    )


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("exec:/dev/zero", "vendor program /dev/zero is not a regular file"),
        ("onnx:/dev/null", "ONNX model /dev/null is not a regular file"),
        ("exec:./", "is a folder"),
        ("torchscript:.", "is a folder"),
    ],
)
def test_a_policy_file_that_is_a_folder_or_a_device_is_not_called_missing(tmp_path, policy, said):
    path = config(tmp_path)
    path.write_text(path.read_text().replace("python:door_pol:balance", policy))
    line = refused(run_cli("certify", path, "--out", tmp_path / "o"), "policy", said)
    assert "does not exist" not in line


@pytest.mark.parametrize(
    ("artifact", "said"),
    [
        ("/dev/zero", "is not a regular file (it is a character device)"),
        (".", "is a directory"),
        ("gone.bin", "does not exist"),
    ],
)
def test_an_artifact_that_is_a_device_or_a_folder_is_not_called_missing(tmp_path, artifact, said):
    path = config(tmp_path, top=f'artifacts = ["{artifact}"]')
    refused(run_cli("certify", path, "--out", tmp_path / "o"), "artifacts[0]", said)


@pytest.mark.parametrize(
    ("headers", "field", "said"),
    [
        ('headers = {X-Key = "a\\nb"}', "headers.X-Key", "line break"),
        ('headers = {"X Key" = "1"}', "headers", "not an HTTP header name"),
    ],
)
def test_http_headers_that_would_break_the_request_are_refused(tmp_path, headers, field, said):
    path = config(tmp_path, top=headers)
    path.write_text(path.read_text().replace("python:door_pol:balance", "http://127.0.0.1:9/act"))
    refused(run_cli("certify", path, "--out", tmp_path / "o"), field, said)


FLOATS = st.sampled_from([0.0, 1.0, -1.0, 1e300, -1e300, 1e308, -1e308, 1.7e308, -1.7e308]) | (
    st.floats(allow_nan=False, allow_infinity=False)
)


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(st.tuples(FLOATS, FLOATS), min_size=1, max_size=4), kpi=st.tuples(FLOATS, FLOATS)
)
def test_any_declared_range_is_refused_in_one_line_or_has_a_finite_span(pairs, kpi):
    """A generator of declared ranges (obs_ranges, act_ranges, kpis.return) around the float
    limits: each config is either refused with a ConfigError naming its field, or every span
    it declares is finite and positive."""
    import warnings

    from safecert.blackbox.config import RunConfig
    from safecert.config import parse_model
    from safecert.errors import ConfigError

    data = {
        "policy": "python:m:f",
        "env": "CartPole-v1",
        "episodes": 1,
        "kpis": {"return": {"lower": kpi[0], "upper": kpi[1]}},
        "envelope": {
            "obs_ranges": [list(p) for p in pairs],
            "act_ranges": [list(p) for p in pairs],
        },
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            cfg = parse_model(RunConfig, data)
        except ConfigError as exc:
            assert "\n" not in str(exc)
            assert str(exc).startswith(("envelope", "kpis.return")), str(exc)
            return
    spans = [hi - lo for lo, hi in cfg.envelope.obs_ranges + cfg.envelope.act_ranges]
    spans.append(cfg.kpis.return_.upper - cfg.kpis.return_.lower)
    assert all(np.isfinite(s) and s > 0 for s in spans)


@settings(max_examples=100, deadline=None)
@given(
    counts=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    duplicate=st.booleans(),
)
def test_grid_size_is_the_number_of_cells_the_grid_builds(counts, duplicate):
    """grid_size (computed before any cell is built) against an independent route: building the
    grid and counting its cells; duplicated levels count once in both."""
    from safecert.blackbox.config import MAX_CELLS, Envelope, grid_size
    from safecert.blackbox.grid import grid_cells
    from safecert.errors import ConfigError

    names = ["obs_noise", "act_noise", "delay", "mass", "friction", "random_dynamics"]
    data: dict = {}
    for name, n in zip(names, counts, strict=False):
        levels = list(range(n)) if name == "delay" else [i / 20 for i in range(n)]
        if name in ("mass", "friction"):
            levels = [1.0 + i / 10 for i in range(n)]
        levels = levels + levels[:1] * duplicate
        if name in ("mass", "friction"):
            data.setdefault("dynamics", {})[name] = levels
        else:
            data[name] = {"levels": levels}
    if math.prod(counts[: len(names)]) > MAX_CELLS:
        with pytest.raises(ConfigError, match=f"{math.prod(counts):,} cells"):
            Envelope.model_validate(data)
        return
    envelope = Envelope.model_validate(data)
    assert grid_size(envelope) == len(grid_cells(envelope))


@pytest.mark.parametrize("out", ["/dev/null", "file", "/proc/safecert-nope"])
@pytest.mark.parametrize("command", ["certify", "rejudge"])
def test_an_output_folder_that_is_a_file_or_cannot_be_made_is_one_line(
    finished, tmp_path, out, command
):
    (tmp_path / "file").write_text("x")
    target = tmp_path / out if out == "file" else Path(out)
    if command == "certify":
        result = run_cli("certify", config(tmp_path / "in"), "--out", target)
    else:
        run = Path(shutil.copytree(finished, tmp_path / "run"))
        result = run_cli("rejudge", run, "--budget", "1", "--p-star", "0.2", "--out", target)
    refused(result, "--out", "not a folder" if out != "/proc/safecert-nope" else "cannot create")
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("replay", ["9" * 5000 + ":0", "0:" + "1" * 19, "\u0663:1", "-1:0"])
def test_replay_numbers_are_checked_before_conversion(tmp_path, replay):
    path = config(tmp_path)
    refused(
        run_cli("certify", path, "--out", tmp_path / "o", "--replay", replay),
        "--replay",
        "CELL:INDEX",
    )


@pytest.mark.parametrize("threshold", ["1e999", "1.5.5", "-1e400"])
def test_a_return_goal_threshold_that_is_not_finite_is_said_once(tmp_path, threshold):
    path = config(tmp_path, goal=f"return>={threshold}")
    line = refused(run_cli("certify", path, "--out", tmp_path / "o"), "spec.goal", "not a finite")
    assert line.count(f"return>={threshold}") == 1 and "(got" not in line
