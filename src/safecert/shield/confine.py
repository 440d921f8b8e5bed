"""Path confinement for the file-system sandbox: agent-supplied paths never leave the root.

Two layers. :func:`confine` resolves an agent's path *lexically* and says why it is refused
(absolute, ``~``, NUL, over-long, ``..`` above the root, outside the allowed folder, a symbolic
link on the way as seen now). It is a message, not a guarantee: the tree can change right after.
The guarantee is :class:`Jail` (threat model: docs/threat-model.md, "The agents' file-system
sandbox"): every operation walks its path from a descriptor of the root, one name at a time
(:func:`~safecert.shield.descriptors.open_beneath`: ``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV``, or ``O_NOFOLLOW``), enters a folder only if its
(device, inode) is one the jail created or found under the root when it was opened, and opens,
changes, reads or removes only files it owns the same way. A folder or file swapped in from
outside — by a link, a hard link, or a real folder exchanged with ``renameat2(RENAME_EXCHANGE)`` —
is refused, never entered, never emptied.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from safecert.errors import DataError
from safecert.shield.descriptors import (
    Ident,
    PathRefused,
    ident,
    kind,
    open_beneath,
    remove_checked,
)
from safecert.shield.jailwalk import Adopt, rmdir_if, walk

__all__ = ["MAX_NAME_BYTES", "MAX_PATH_CHARS", "Jail", "PathRefused", "confine"]

MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255  # NAME_MAX of Linux file systems
RESET_ATTEMPTS = 200  # passes of reset before a blocker is reported (a swap race passes)


def confine(root: Path, path: Any, *, base: Path, within: Path | None = None) -> Path:
    """Resolve ``path`` against ``base`` (a folder inside ``root``).

    Raises :class:`PathRefused` unless the result lies inside ``within`` (default: ``root``) with
    no symbolic link on the way. Never touches the file system outside the root; its messages
    quote the agent's own path, never the host's."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
        raise PathRefused(f"path must be a non-empty string of at most {MAX_PATH_CHARS} chars")
    if "\x00" in path or path.startswith(("~", "/", "\\")) or os.path.isabs(path):
        raise PathRefused(f"{path!r} is absolute or special; use a path inside the sandbox")
    within = within or root
    current = base
    for part in Path(path).parts:
        if len(os.fsencode(part)) > MAX_NAME_BYTES:
            raise PathRefused(f"a name in {path[:40]!r}… is over {MAX_NAME_BYTES} bytes")
        if part in ("", "."):
            continue
        if part == "..":
            if current == root:
                raise PathRefused(f"{path!r} leaves the sandbox root")
            current = current.parent
            continue
        current = current / part
        try:
            link = current.is_symlink()
        except OSError as exc:
            raise PathRefused(f"{path!r} cannot be looked up ({exc.strerror})") from None
        if link:
            raise PathRefused(f"{path!r} passes through a symbolic link")
    if current != within and within not in current.parents:
        where = "the sandbox root" if within == root else f"{within.name}/"
        raise PathRefused(f"{path!r} is outside {where}")
    return current


_DIR = os.O_RDONLY | os.O_DIRECTORY


class Jail:
    """File operations under a root folder on objects the jail owns, by descriptor.

    Owned: the root, everything found under it when the jail is opened (links excepted), and
    every folder and file the jail creates. Paths are tuples of names relative to the root,
    already free of ``..`` (:func:`confine`). Every walk keeps one descriptor per step and checks
    the identity of each folder it enters, so a name that leads elsewhere by the time it is used
    makes the operation refuse (:class:`PathRefused`) instead of acting outside.

    Assumptions: the root itself is not replaced before the jail opens it; an inode number freed
    by someone else (who deleted one of our files) is not reused by an outside object that is
    then moved in; an empty folder swapped in between our ``mkdirat`` and ``openat`` of it is
    taken for ours (a non-empty one is refused)."""

    def __init__(self, root: Path) -> None:
        self.root_fd = os.open(root, _DIR | os.O_CLOEXEC)
        self.root_ident = ident(os.fstat(self.root_fd))
        self._owned: set[Ident] = {self.root_ident}
        walk(self.root_fd, (), Adopt(self._owned))

    def close(self) -> None:
        if self.root_fd >= 0:
            os.close(self.root_fd)
            self.root_fd = -1

    def owns(self, st: os.stat_result) -> bool:
        """Whether the object of ``st`` is the jail's (by device and inode)."""
        return ident(st) in self._owned

    # -- walking -------------------------------------------------------------------------------
    def _enter(self, parent: int, name: str, create: bool) -> int:
        """Descriptor of the owned folder ``name`` in ``parent`` (made first when ``create``)."""
        created = False
        if create:
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
                created = True
            except FileExistsError:
                pass
        try:
            fd = open_beneath(parent, name, _DIR)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
                raise PathRefused(f"{name} is a link, a mount point or not a folder") from None
            raise
        st = os.fstat(fd)
        if created and not self.owns(st) and st.st_nlink == 2 and not os.listdir(fd):
            self._owned.add(ident(st))
        if not self.owns(st):
            os.close(fd)
            raise PathRefused(f"{name} is a folder the sandbox did not create; it is not entered")
        return fd

    @contextmanager
    def folder(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the owned folder ``parts`` (created when ``create``); one descriptor
        is held at a time whatever the depth."""
        cur = os.dup(self.root_fd)
        try:
            for part in parts:
                nxt = self._enter(cur, part, create)
                os.close(cur)
                cur = nxt
            yield cur
        finally:
            os.close(cur)

    def _open_file(self, folder: int, name: str, flags: int, *, create: bool = False) -> int:
        """An owned, single-link regular file, opened without blocking (a FIFO is refused, never
        waited on); created (and owned) when missing and ``create``."""
        if create:
            try:
                fd = open_beneath(folder, name, flags | os.O_CREAT | os.O_EXCL | os.O_NONBLOCK)
            except FileExistsError:
                pass
            else:
                self._owned.add(ident(os.fstat(fd)))
                return fd
        try:
            fd = open_beneath(folder, name, flags | os.O_NONBLOCK)
        except OSError as exc:
            why = {
                errno.ELOOP: "a symbolic link",
                errno.EXDEV: "a mount point",
                errno.ENXIO: "a FIFO, socket or device, not a regular file",
                errno.EISDIR: "a folder, not a file",
            }.get(exc.errno or 0)
            if why is None:
                raise
            raise PathRefused(f"{name} is {why}") from None
        why = self._not_ours(os.fstat(fd))
        if why is not None:
            os.close(fd)
            raise PathRefused(f"{name} is {why}")
        return fd

    def _not_ours(self, st: os.stat_result) -> str | None:
        """Why ``st`` is not an owned single-link regular file (``None`` if it is)."""
        if not stat.S_ISREG(st.st_mode):
            return f"{kind(st)}, not a regular file"
        if st.st_nlink != 1:
            return "a hard link"
        if not self.owns(st):
            return "a file the sandbox did not create (moved in from elsewhere)"
        return None

    def why_not_file(self, parts: tuple[str, ...]) -> str:
        """Why ``parts`` is not an owned regular file, in words for the agent (relative names)."""
        if not parts:
            return "the sandbox root is a folder, not a file"
        try:
            with self.folder(parts[:-1]) as d:
                st = os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
        except PathRefused as exc:
            return str(exc)
        except OSError as exc:
            return f"{'/'.join(parts)}: {exc.strerror}"
        return f"{'/'.join(parts)} is {self._not_ours(st) or 'a regular file'}"

    # -- operations ----------------------------------------------------------------------------
    def read(self, parts: tuple[str, ...], limit: int) -> bytes:
        """At most ``limit`` bytes of the owned, regular, single-link file ``parts``."""
        _need_leaf(parts)
        with self.folder(parts[:-1]) as d:
            fd = self._open_file(d, parts[-1], os.O_RDONLY)
            try:
                return os.read(fd, limit)
            finally:
                os.close(fd)

    def write(self, parts: tuple[str, ...], data: bytes) -> None:
        """Replace the content of ``parts`` (created, with its folders, when missing)."""
        _need_leaf(parts)
        with self.folder(parts[:-1], create=True) as d:
            fd = self._open_file(d, parts[-1], os.O_WRONLY, create=True)
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
        """``lstat`` of ``parts`` if it is the jail's (``None`` when missing, unreachable without
        a link or a foreign folder, or not owned)."""
        if not parts:
            return os.fstat(self.root_fd)
        try:
            with self.folder(parts[:-1]) as d:
                st = os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
        except (OSError, PathRefused):
            return None
        return st if self.owns(st) else None

    def is_file(self, parts: tuple[str, ...]) -> bool:
        st = self.lstat(parts)
        return st is not None and stat.S_ISREG(st.st_mode)

    def unlink(self, parts: tuple[str, ...]) -> None:
        """Remove the owned, regular, single-link file ``parts`` (``unlinkat`` in a folder
        descriptor the jail owns: a folder swapped meanwhile is never the one acted in)."""
        _need_leaf(parts)
        with self.folder(parts[:-1]) as d:
            st = os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
            why = self._not_ours(st)
            if why is not None:
                raise PathRefused(f"{'/'.join(parts)} is {why}")
            gone = remove_checked(d, parts[-1], lambda now: self._not_ours(now) is None)
            if gone is None:
                raise PathRefused(f"{'/'.join(parts)} changed while being deleted; nothing removed")
            self._owned.discard(ident(gone))

    def listdir(self, parts: tuple[str, ...]) -> list[str]:
        with self.folder(parts) as d:
            return sorted(os.listdir(d))

    def set_tree_mode(self, parts: tuple[str, ...], *, writable: bool) -> None:
        """Owned files 0644/0444 and owned folders 0755/0555 below ``parts``, by ``fchmod`` on
        descriptors (links, hard links and foreign objects are skipped: they are not ours)."""
        with self.folder(parts) as d:
            walk(d, parts, _Chmod(self, writable))

    def reset_tree(
        self,
        files: dict[tuple[str, ...], bytes],
        keep: set[tuple[str, ...]],
        folders: set[tuple[str, ...]] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        """Make the tree ``files``, their folders and ``folders``: owned objects not listed are
        removed (iteratively, by descriptor), names that hold no data of their own (symbolic
        links, extra hard links, FIFOs, sockets, devices) are unlinked, and a listed file is
        rewritten unless it is in ``keep`` and still an owned single-link regular file.

        Foreign folders and foreign single-link files are never entered, changed or removed. If
        one occupies a listed path, the pass is repeated (a swap race moves it away again) and
        after :data:`RESET_ATTEMPTS` passes a :class:`~safecert.errors.DataError` names it."""
        folders = set(folders) | {p[:i] for p in files for i in range(1, len(p))}
        blocked: tuple[str, ...] = ()
        for attempt in range(RESET_ATTEMPTS):
            walk(self.root_fd, (), _Prune(self, folders, keep & set(files)))
            found = self._rebuild(files, keep, folders)
            if found is None:
                return
            blocked = found
            time.sleep(0.0005 * min(attempt, 20))
        raise DataError(
            f"{'/'.join(blocked)} is occupied by a file or folder the sandbox did not create "
            "(moved in from elsewhere); it was left untouched",
            field="sandbox root",
            fix="move it out of the sandbox, then reset again",
        )

    def _rebuild(
        self,
        files: dict[tuple[str, ...], bytes],
        keep: set[tuple[str, ...]],
        folders: set[tuple[str, ...]],
    ) -> tuple[str, ...] | None:
        """Create the listed folders and files; the first path a foreign object blocks, or None."""
        for parts in sorted(folders, key=len):
            try:
                with self.folder(parts, create=True):
                    pass
            except PathRefused:
                return parts
        for parts, data in files.items():
            try:
                if parts not in keep or not self.is_file(parts):
                    self.write(parts, data)
            except PathRefused:
                return parts
        return None

    def clear(self) -> None:
        """Remove every owned object under the root (foreign ones stay untouched)."""
        walk(self.root_fd, (), _Prune(self, set(), set()))

    def remove_root(self, parent: int, name: str) -> bool:
        """``rmdir`` the (emptied) root through its parent's descriptor, found by identity: by
        ``name`` if it still is the root, else by a scan of the parent (the root was renamed).
        Whatever else sits at ``name`` is left alone. Returns whether the root was removed."""
        names = [name, *(n for n in os.listdir(parent) if n != name)]
        for candidate in names:
            if rmdir_if(parent, candidate, self.root_ident):
                return True
        return False


def _need_leaf(parts: tuple[str, ...]) -> None:
    if not parts:
        raise PathRefused("the sandbox root is a folder, not a file")


class _Chmod:
    """Walk visitor: modes of owned files and folders."""

    def __init__(self, jail: Jail, writable: bool) -> None:
        self.jail, self.writable = jail, writable

    def accepts(self, st: os.stat_result) -> bool:
        return self.jail.owns(st)

    def enter(self, fd: int, parts: tuple[str, ...]) -> None:
        pass

    def entry(self, fd: int, name: str, parts: tuple[str, ...], st: os.stat_result) -> None:
        if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and self.jail.owns(st)):
            return
        try:
            f = self.jail._open_file(fd, name, os.O_RDONLY)
        except (OSError, PathRefused):
            return  # swapped or linked meanwhile: not ours
        try:
            os.fchmod(f, 0o644 if self.writable else 0o444)
        finally:
            os.close(f)

    def leave(self, fd: int, parts: tuple[str, ...]) -> None:
        os.fchmod(fd, 0o755 if self.writable else 0o555)

    def after(self, parent: int, name: str, parts: tuple[str, ...], child: Ident) -> None:
        pass


class _Prune:
    """Walk visitor: remove everything owned that is neither a listed folder nor a kept file."""

    def __init__(self, jail: Jail, folders: set[tuple[str, ...]], keep: set[tuple[str, ...]]):
        self.jail, self.folders, self.keep = jail, folders, keep

    def accepts(self, st: os.stat_result) -> bool:
        return self.jail.owns(st)

    def enter(self, fd: int, parts: tuple[str, ...]) -> None:
        os.fchmod(fd, 0o755)  # removing entries needs a writable folder (unless we are root)

    def entry(self, fd: int, name: str, parts: tuple[str, ...], st: os.stat_result) -> None:
        if not self._removable(st, parts):
            return
        gone = remove_checked(fd, name, lambda now: self._removable(now, parts))
        if gone is not None:
            self.jail._owned.discard(ident(gone))

    def _removable(self, st: os.stat_result, parts: tuple[str, ...]) -> bool:
        """A name to remove: not a folder (those go in :meth:`after`); a single-link file only
        if it is owned and not kept (a foreign one keeps its data); links and special files."""
        if stat.S_ISDIR(st.st_mode):
            return False
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return self.jail.owns(st) and parts not in self.keep
        return True

    def leave(self, fd: int, parts: tuple[str, ...]) -> None:
        pass

    def after(self, parent: int, name: str, parts: tuple[str, ...], child: Ident) -> None:
        if parts in self.folders:
            return
        if remove_checked(parent, name, lambda now: ident(now) == child) is not None:
            self.jail._owned.discard(child)
