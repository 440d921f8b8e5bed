"""Path confinement on a real temporary tree: hostile paths are refused, inside paths resolve."""

from __future__ import annotations

import os

import pytest

from safecert.shield.confine import MAX_PATH_CHARS, PathRefused, confine, nofollow_opener


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "prod").mkdir(parents=True)
    (root / "prod" / "a.log").write_text("x")
    (root / "link").symlink_to(tmp_path)
    (root / "prod" / "out.log").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("s")
    return root


@pytest.mark.parametrize(
    "path",
    ["../x", "prod/../../x", "/etc/passwd", "~/x", "a\x00b", "", "x" * (MAX_PATH_CHARS + 1),
     "link/secret", "link", "prod/out.log", 3, None],
)  # fmt: skip
def test_hostile_paths_are_refused(tree, path):
    with pytest.raises(PathRefused):
        confine(tree, path, base=tree)


def test_inside_paths_resolve_and_within_narrows(tree):
    assert confine(tree, "prod/./a.log", base=tree) == tree / "prod" / "a.log"
    assert confine(tree, "../a.log", base=tree / "prod") == tree / "a.log"
    assert (
        confine(tree, "a.log", base=tree / "prod", within=tree / "prod") == tree / "prod" / "a.log"
    )
    with pytest.raises(PathRefused, match="outside prod/"):
        confine(tree, "../x", base=tree / "prod", within=tree / "prod")


def test_nofollow_opener_refuses_a_planted_link(tree):
    with pytest.raises(OSError):
        open(tree / "prod" / "out.log", "rb", opener=nofollow_opener(os.O_RDONLY))  # noqa: SIM115
    with open(tree / "prod" / "a.log", "rb", opener=nofollow_opener(os.O_RDONLY)) as fh:
        assert fh.read() == b"x"
