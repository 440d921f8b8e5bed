"""TOML reading: every unreadable input is one ConfigError line naming the file."""

from __future__ import annotations

import os

import pytest

from safecert.config import read_toml
from safecert.errors import ConfigError


@pytest.mark.parametrize(
    "content, match",
    [
        (b'a = "\xff\xfe"\n', "not UTF-8 text \\(line 1"),
        (b"x = 1\ny = 2\nz = '\xc3\x28'\n", "line 3"),
        (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", "too deeply"),
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


def test_a_folder_is_not_a_config(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        read_toml(tmp_path)
