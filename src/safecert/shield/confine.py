"""Path confinement for the file-system sandbox: agent-supplied paths never leave the root.

Two layers. :func:`confine` resolves an agent's path *lexically* and says why it is refused
(absolute, ``~``, NUL, over-long, ``..`` above the root, outside the allowed folder, a symbolic
link on the way as seen now). It is a message, not a guarantee: the tree can change right after.
The guarantee is :class:`Jail`: every operation re-walks the path from a descriptor of the root
with ``O_NOFOLLOW`` at every component and acts on the descriptors it opened, so nothing planted
beside the agent — a folder swapped for a link between check and use, a link, a hard link to an
outside file — lets it read, write, change the mode of or delete anything outside the root.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
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


class Jail:
    """File operations under a root folder that never follow a link and never check-then-use.

    Every operation walks its path from a descriptor of the root, one component at a time, with
    ``openat(O_NOFOLLOW | O_DIRECTORY)`` per folder and ``O_NOFOLLOW`` on the leaf, then acts on the
    descriptors it opened (``fstat``, ``fchmod``, ``ftruncate``, ``unlinkat``). A folder swapped for a
    symbolic link at any moment makes the walk fail (ELOOP/ENOTDIR) instead of leaving the root; a
    regular file with more than one hard link is refused (its other name may lie outside). Paths
    are tuples of components relative to the root, already free of ``..`` (:func:`confine`).
    The root itself is trusted (its descriptor is opened once)."""

    def __init__(self, root: Path) -> None:
        self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        if self.root_fd >= 0:
            os.close(self.root_fd)
            self.root_fd = -1

    @contextmanager
    def folder(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the folder ``parts`` (created when ``create``), walked without links."""
        fds: list[int] = []
        try:
            cur = self.root_fd
            for part in parts:
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=cur)
                    except FileExistsError:
                        pass
                try:
                    cur = os.open(part, _DIR_FLAGS, dir_fd=cur)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    where = "/".join(parts)
                    raise PathRefused(f"{where} passes through a link or a non-folder") from None
                fds.append(cur)
            yield cur
        finally:
            for fd in reversed(fds):
                os.close(fd)

    def _open_leaf(self, folder: int, name: str, flags: int) -> int:
        if name in ("", ".", ".."):
            raise PathRefused(f"{name!r} is not a file name")
        try:
            fd = os.open(name, flags | _LEAF_FLAGS, 0o644, dir_fd=folder)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise PathRefused(f"{name} is a symbolic link") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "a hard link"
            raise PathRefused(f"{name} is {what}")
        return fd

    def read(self, parts: tuple[str, ...], limit: int) -> bytes:
        """At most ``limit`` bytes of the regular, single-link file ``parts``."""
        _need_leaf(parts)
        with self.folder(parts[:-1]) as d:
            fd = self._open_leaf(d, parts[-1], os.O_RDONLY)
            try:
                return os.read(fd, limit)
            finally:
                os.close(fd)

    def write(self, parts: tuple[str, ...], data: bytes) -> None:
        """Replace the content of ``parts`` (created, with its folders, when missing)."""
        _need_leaf(parts)
        with self.folder(parts[:-1], create=True) as d:
            fd = self._open_leaf(d, parts[-1], os.O_WRONLY | os.O_CREAT)
            try:
                old_size = os.fstat(fd).st_size
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if old_size > len(data):  # truncating is slow on some file systems: only if needed
                    os.ftruncate(fd, len(data))
            finally:
                os.close(fd)

    def lstat(self, parts: tuple[str, ...]) -> os.stat_result | None:
        """``lstat`` of ``parts`` (``None`` when missing or unreachable without a link)."""
        if not parts:
            return os.fstat(self.root_fd)
        try:
            with self.folder(parts[:-1]) as d:
                return os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
        except (OSError, PathRefused):
            return None

    def is_file(self, parts: tuple[str, ...]) -> bool:
        st = self.lstat(parts)
        return st is not None and stat.S_ISREG(st.st_mode)

    def unlink(self, parts: tuple[str, ...]) -> None:
        """Remove the regular, single-link file ``parts`` (``unlinkat``; a name swapped for a link
        meanwhile is removed itself, never its target)."""
        _need_leaf(parts)
        with self.folder(parts[:-1]) as d:
            st = os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise PathRefused(f"{'/'.join(parts)} is not a single-link regular file")
            os.unlink(parts[-1], dir_fd=d)

    def listdir(self, parts: tuple[str, ...]) -> list[str]:
        with self.folder(parts) as d:
            return sorted(os.listdir(d))

    def set_tree_mode(self, parts: tuple[str, ...], *, writable: bool) -> None:
        """Files 0644/0444 and folders 0755/0555 below ``parts``, by ``fchmod`` on descriptors
        (links and multi-link files are skipped: their targets are not ours)."""
        with self.folder(parts) as d:
            _chmod_tree(d, writable)

    def reset_tree(
        self,
        files: dict[tuple[str, ...], bytes],
        keep: set[tuple[str, ...]],
        folders: set[tuple[str, ...]] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        """Make the tree exactly ``files``, their folders and ``folders``: anything else is
        removed without following links; a listed file is rewritten unless it is in ``keep`` and
        still a single-link regular file."""
        folders = set(folders) | {p[:i] for p in files for i in range(1, len(p))}
        _prune(self.root_fd, (), folders, {p for p in files if p in keep})
        for parts in sorted(folders, key=len):
            with self.folder(parts, create=True):
                pass
        for parts, data in files.items():
            if not self.is_file(parts) or parts not in keep:
                self.write(parts, data)


def _need_leaf(parts: tuple[str, ...]) -> None:
    if not parts:
        raise PathRefused("the sandbox root is a folder, not a file")


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LEAF_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _chmod_tree(d: int, writable: bool) -> None:
    for name in os.listdir(d):
        st = os.stat(name, dir_fd=d, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=d)
            except OSError:
                continue  # swapped for a link meanwhile: not ours
            try:
                _chmod_tree(sub, writable)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            try:
                fd = os.open(name, os.O_RDONLY | _LEAF_FLAGS, dir_fd=d)
            except OSError:
                continue
            try:
                if os.fstat(fd).st_nlink == 1:
                    os.fchmod(fd, 0o644 if writable else 0o444)
            finally:
                os.close(fd)
    os.fchmod(d, 0o755 if writable else 0o555)


def _prune(
    d: int, here: tuple[str, ...], folders: set[tuple[str, ...]], keep: set[tuple[str, ...]]
) -> None:
    """Remove below folder ``d`` everything that is neither a listed folder nor a kept file."""
    os.fchmod(d, 0o755)
    for name in os.listdir(d):
        path = (*here, name)
        st = os.stat(name, dir_fd=d, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) and path in folders:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=d)
            except OSError:
                _remove(d, name)
                continue
            try:
                _prune(sub, path, folders, keep)
            finally:
                os.close(sub)
        elif not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and path in keep):
            _remove(d, name)


def _remove(d: int, name: str) -> None:
    """Remove ``name`` in folder ``d``; a folder recursively by descriptor, a link itself."""
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=d)
    except OSError:  # not a folder (or a link to one): unlink the name
        os.unlink(name, dir_fd=d)
        return
    try:
        os.fchmod(sub, 0o755)
        for child in os.listdir(sub):
            _remove(sub, child)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=d)
