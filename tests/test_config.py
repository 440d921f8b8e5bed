"""TOML reading and validation: every unreadable, oversized or misspelt input is one ConfigError
line naming the file or the key, decided before any super-linear work."""

from __future__ import annotations

import os
import signal
import string
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert import config as config_module
from safecert.config import (
    MAX_KEY_PARTS,
    MAX_TOML_NESTING,
    check_toml_shape,
    dump_toml,
    parse_model,
    read_toml,
)
from safecert.errors import ConfigError


@pytest.mark.parametrize(
    "content, match",
    [
        (b'a = "\xff\xfe"\n', "not UTF-8 text \\(line 1"),
        (b"x = 1\ny = 2\nz = '\xc3\x28'\n", "line 3"),
        (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", f"nested over {MAX_TOML_NESTING} deep"),
        (b"a = " + b"{b = " * 5000 + b"1" + b"}" * 5000 + b"\n", "nested over"),
        (b"a = [1,\n", "not valid TOML"),
    ],
)
def test_bad_toml_is_one_line(tmp_path, content, match):
    path = tmp_path / "c.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=match) as err:
        read_toml(path)
    assert "\n" not in str(err.value) and str(err.value).startswith("config:")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_config_is_one_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("a = 1\n")
    path.chmod(0)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_toml(path)


@pytest.fixture
def no_hang():
    """Fail (instead of hanging the suite) if a read blocks for 10 s."""

    def fire(signum, frame):
        raise AssertionError("read_toml blocked")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_special_files_are_named_for_what_they_are(tmp_path, no_hang):
    """A folder is "a directory", a FIFO with no writer and /dev/zero are "not a regular file":
    never "does not exist", never a blocked open or an endless read."""
    with pytest.raises(ConfigError, match="is a directory"):
        read_toml(tmp_path)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is not a regular file \\(it is a FIFO\\)"):
        read_toml(fifo)
    with pytest.raises(ConfigError, match="is not a regular file \\(it is a character device\\)"):
        read_toml("/dev/zero")
    with pytest.raises(ConfigError, match="does not exist"):
        read_toml(tmp_path / "missing.toml")


def test_size_is_bounded_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(config_module, "MAX_TOML_BYTES", 100)
    path = tmp_path / "c.toml"
    path.write_text("a = 1\n")
    assert read_toml(path) == {"a": 1}
    path.write_text("a = 1\n" * 20)
    with pytest.raises(ConfigError, match="120 bytes, more than the 100 allowed"):
        read_toml(path)


def test_a_dotted_key_of_50000_parts_is_refused_before_parsing(tmp_path):
    """tomllib needs 1.6 GB for 20,000 parts; the linear scan refuses at the 65th."""
    path = tmp_path / "c.toml"
    path.write_text(".".join(["a"] * 50_000) + " = 1\n")
    with pytest.raises(ConfigError, match=f"a key of more than {MAX_KEY_PARTS} parts \\(line 1\\)"):
        read_toml(path)
    path.write_text("[" + ".".join(['"a"'] * 5_000) + "]\n")
    with pytest.raises(ConfigError, match="more than 64 parts"):
        read_toml(path)


def test_the_limits_are_exact(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(".".join(["a"] * MAX_KEY_PARTS) + " = 1.5\n")
    assert read_toml(path)
    path.write_text(".".join(["a"] * (MAX_KEY_PARTS + 1)) + " = 1.5\n")
    with pytest.raises(ConfigError):
        read_toml(path)
    inner = "[" * (MAX_TOML_NESTING - 1) + "]" * (MAX_TOML_NESTING - 1)
    path.write_text(f"a = {inner}\n")
    assert read_toml(path)


keys = st.text(string.ascii_letters + string.digits + "._-\"'#[]{}= \\\n", min_size=1, max_size=8)
leaves = st.one_of(
    st.floats(allow_nan=False),
    st.integers(-(10**6), 10**6),
    st.booleans(),
    st.text(string.printable + "é☃", max_size=30),
    st.lists(st.floats(allow_nan=False), max_size=8),
)
documents = st.recursive(
    st.dictionaries(keys, leaves, max_size=5),
    lambda inner: st.dictionaries(keys, st.one_of(leaves, inner), max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(documents)
def test_the_scan_never_refuses_a_reasonable_document(doc):
    """Strings full of dots, quotes, brackets and '#', floats, tables: the pre-scan passes every
    document with short keys and shallow nesting, and tomllib reads it back."""
    text = dump_toml(doc)
    check_toml_shape(text, "doc")
    assert tomllib.loads(text) == doc


@settings(max_examples=100, deadline=None)
@given(st.integers(MAX_KEY_PARTS + 1, 400), st.sampled_from(["a", '"a.b"', "'x'", " a "]))
def test_the_scan_refuses_every_long_dotted_key(parts, part):
    text = f"x = 1.5\n[t]\n{'.'.join([part] * parts)} = 2\n"
    with pytest.raises(ConfigError, match="line 3"):
        check_toml_shape(text, "doc")


# ----------------------------------------------------------------------------- unknown keys


def test_an_unknown_key_is_named_before_a_missing_one_with_did_you_mean():
    from safecert.blackbox.config import RunConfig

    data = tomllib.loads(
        'policy = "p"\nenv = "CartPole-v1"\nepisode = 60\n[spec]\ncost = "0"\ngoal = "true"\n'
    )
    with pytest.raises(ConfigError) as err:
        parse_model(RunConfig, data)
    assert str(err.value) == "episode: unknown key; did you mean `episodes`?"


@pytest.mark.parametrize(
    "model, data, says",
    [
        ("shield", {"horizn": 3}, "horizn: unknown key; did you mean `horizon`?"),
        ("bnn", {"limits": {"max_iteration": 3}}, "did you mean `max_iterations`?"),
        ("bnn", {"sets": {"intial": {}}}, "sets.intial: unknown key; did you mean `initial`?"),
        ("blackbox", {"kpis": {"retrun": {}}}, "kpis.retrun: unknown key; did you mean `return`?"),
        ("shield", {"zzzzzz": 1}, "zzzzzz: unknown key; remove it or check its spelling (keys"),
    ],
)
def test_every_engine_suggests_the_close_key(model, data, says):
    from safecert.blackbox.config import RunConfig
    from safecert.bnn.config import BnnConfig
    from safecert.shield.model import ModelSpec

    cls = {"shield": ModelSpec, "bnn": BnnConfig, "blackbox": RunConfig}[model]
    with pytest.raises(ConfigError) as err:
        parse_model(cls, data)
    assert says in str(err.value)


def test_union_tags_stay_out_of_the_key():
    from safecert.bnn.config import DynamicsConfig

    data = {"state": ["x"], "action": ["u"], "next": {"x": "x"}, "choices": [10**400, 1]}
    with pytest.raises(ConfigError) as err:
        parse_model(DynamicsConfig, data, prefix="dynamics")
    assert str(err.value).startswith("dynamics.choices.0: ")
