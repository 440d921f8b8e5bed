"""Path confinement on a real temporary tree: hostile paths are refused, inside paths resolve."""

from __future__ import annotations

import ctypes
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


def test_jail_refuses_a_real_folder_exchanged_in_and_clear_leaves_it_whole(tree, tmp_path):
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "s.txt").write_text("s")
    jail = Jail(tree)
    try:
        jail.write(("prod", "sub", "f.txt"), b"mine")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.renameat2(-100, bytes(tree / "prod" / "sub"), -100, bytes(outside), 2) != 0:
            pytest.skip("renameat2(RENAME_EXCHANGE) unavailable")
        swapped_in = ("prod", "sub")
        for op in (
            lambda: jail.read((*swapped_in, "inner", "s.txt"), 10),
            lambda: jail.write((*swapped_in, "new.txt"), b"pwned"),
            lambda: jail.unlink((*swapped_in, "inner", "s.txt")),
            lambda: jail.set_tree_mode(swapped_in, writable=False),
        ):
            with pytest.raises(PathRefused, match="did not create"):
                op()
        assert jail.lstat(swapped_in) is None and not jail.is_file((*swapped_in, "inner"))
        jail.set_tree_mode(("prod",), writable=False)  # walks prod, skips the foreign folder
        jail.clear()
        assert sorted(p.name for p in tree.rglob("*")) == ["inner", "prod", "s.txt", "sub"]
        assert (tree / "prod" / "sub" / "inner" / "s.txt").read_text() == "s"
        assert (tree / "prod" / "sub").stat().st_mode & 0o777 != 0o555
        assert (outside / "f.txt").read_bytes() == b"mine"  # ours, moved out: never followed
    finally:
        jail.close()
