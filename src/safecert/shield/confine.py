"""Path confinement for the file-system sandbox: agent-supplied paths never leave the root.

:func:`confine` resolves a relative path component by component without following anything
outside the root: absolute, ``~``, NUL and over-long paths are refused, ``..`` may not climb above
the root, and any symbolic link on the way is refused (only ``lstat`` of components already
inside the root). Files are then opened with ``O_NOFOLLOW`` (:func:`nofollow_opener`), so a link
planted between the check and the open is refused by the kernel too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_PATH_CHARS = 1024


class PathRefused(Exception):
    """Raised internally when an argument path would leave the sandbox."""


def confine(root: Path, path: Any, *, base: Path, within: Path | None = None) -> Path:
    """Resolve ``path`` against ``base`` (a folder inside ``root``).

    Raises :class:`PathRefused` unless the result lies inside ``within`` (default: ``root``) with
    no symbolic link on the way. Never touches the file system outside the root."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
        raise PathRefused(f"path must be a non-empty string of at most {MAX_PATH_CHARS} chars")
    if "\x00" in path or path.startswith(("~", "/", "\\")) or os.path.isabs(path):
        raise PathRefused(f"{path!r} is absolute or special; use a path inside the sandbox")
    within = within or root
    current = base
    for part in Path(path).parts:
        if part in ("", "."):
            continue
        if part == "..":
            if current == root:
                raise PathRefused(f"{path!r} leaves the sandbox root")
            current = current.parent
            continue
        current = current / part
        if current.is_symlink():
            raise PathRefused(f"{path!r} passes through a symbolic link")
    if current != within and within not in current.parents:
        where = "the sandbox root" if within == root else f"{within.name}/"
        raise PathRefused(f"{path!r} is outside {where}")
    return current


def nofollow_opener(flags: int) -> Callable[[str, int], int]:
    """An ``open(..., opener=)`` that refuses to follow a symbolic link in the last component."""

    def opener(path: str, _flags: int) -> int:
        return os.open(path, flags | os.O_NOFOLLOW, 0o644)

    return opener


def set_tree_mode(top: Path, *, writable: bool) -> None:
    """Make a folder tree read-only (files 0444, folders 0555) or writable again."""
    for dirpath, _dirnames, filenames in os.walk(top):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644 if writable else 0o444)
        os.chmod(dirpath, 0o755 if writable else 0o555)


def make_writable(top: Path) -> None:
    """Folders writable again (before removing a tree)."""
    for dirpath, _dirs, _files in os.walk(top):
        os.chmod(dirpath, 0o755)
