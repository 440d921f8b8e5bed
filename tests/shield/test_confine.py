"""Path confinement on a real temporary tree: hostile paths are refused, inside paths resolve."""

from __future__ import annotations

import os

import pytest

from safecert.shield.confine import MAX_PATH_CHARS, Jail, PathRefused, confine


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


def test_jail_refuses_links_at_every_component_and_hard_links(tree, tmp_path):
    jail = Jail(tree)
    try:
        assert jail.read(("prod", "a.log"), 10) == b"x"
        for parts in (("prod", "out.log"), ("link", "secret")):  # leaf link, folder link
            with pytest.raises(PathRefused):
                jail.read(parts, 10)
            with pytest.raises(PathRefused):
                jail.write(parts, b"pwned")
        os.link(tmp_path / "secret", tree / "prod" / "hard.log")
        with pytest.raises(PathRefused, match="hard link"):
            jail.write(("prod", "hard.log"), b"pwned")
        with pytest.raises(PathRefused):
            jail.unlink(("prod", "hard.log"))
        jail.set_tree_mode(("prod",), writable=False)  # skips the link and the hard link
        assert (tmp_path / "secret").read_text() == "s"
        assert (tmp_path / "secret").stat().st_mode & 0o777 != 0o444
        jail.set_tree_mode(("prod",), writable=True)
    finally:
        jail.close()
