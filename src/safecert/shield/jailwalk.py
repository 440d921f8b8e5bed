"""Iterative, descriptor-based walks of the jail's tree (no recursion, a bounded number of fds).

:func:`walk` visits the folders below a folder descriptor depth-first. It enters a folder only if
the visitor accepts its identity (the jail accepts the folders it owns), holds two descriptors
whatever the depth (the top and the current folder), and climbs back with ``openat("..")``
checked against the identity it recorded on the way down. If a folder was moved meanwhile (its
``..`` is no longer the folder it came from), it re-walks the recorded names from the top, each
checked by identity, and abandons the part of the walk that no longer hangs where it did: it never
acts on a folder reached through a name that now leads elsewhere.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Protocol

from safecert.shield.descriptors import Ident, PathRefused, ident, open_beneath

_DIR = os.O_RDONLY | os.O_DIRECTORY


class Visitor(Protocol):
    """What a walk does; every callback gets descriptors of folders it accepted."""

    def accepts(self, st: os.stat_result) -> bool:
        """Enter this folder (``lstat`` of the entry, then ``fstat`` of the opened folder)?"""
        ...

    def enter(self, fd: int, parts: tuple[str, ...]) -> None:
        """Called once per folder entered (the top included), before its entries."""
        ...

    def entry(self, fd: int, name: str, parts: tuple[str, ...], st: os.stat_result) -> None:
        """An entry of folder ``fd`` that is not entered (any type, links included)."""
        ...

    def leave(self, fd: int, parts: tuple[str, ...]) -> None:
        """All entries of folder ``fd`` were visited."""
        ...

    def after(self, parent: int, name: str, parts: tuple[str, ...], child: Ident) -> None:
        """Back in ``parent`` after the folder ``name`` (identity ``child``) was left."""
        ...


@dataclass
class _Frame:
    name: str
    parts: tuple[str, ...]
    ident: Ident
    pending: list[str] = field(default_factory=list)


def _listing(fd: int) -> list[str]:
    return sorted(os.listdir(fd), reverse=True)  # popped from the end: name order


def open_accepted(parent: int, name: str, visitor: Visitor) -> int | None:
    """Descriptor of the folder ``name`` in ``parent`` if the visitor accepts what was opened."""
    try:
        fd = open_beneath(parent, name, _DIR)
    except (OSError, PathRefused):
        return None  # gone, swapped for a link or a non-folder, a mount point: not entered
    if visitor.accepts(os.fstat(fd)):
        return fd
    os.close(fd)
    return None


def walk(top: int, parts: tuple[str, ...], visitor: Visitor) -> None:
    """Visit the tree below folder descriptor ``top`` (its path ``parts``); ``top`` stays open."""
    top_ident = ident(os.fstat(top))
    frames = [_Frame("", parts, top_ident)]
    cur = os.dup(top)
    try:
        visitor.enter(cur, parts)
        frames[0].pending = _listing(cur)
        while frames:
            frame = frames[-1]
            if frame.pending:
                name = frame.pending.pop()
                here = (*frame.parts, name)
                try:
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                sub = None
                if stat.S_ISDIR(st.st_mode) and visitor.accepts(st):
                    sub = open_accepted(cur, name, visitor)
                if sub is None:
                    visitor.entry(cur, name, here, st)
                    continue
                child = _Frame(name, here, ident(os.fstat(sub)))
                os.close(cur)
                cur = sub
                visitor.enter(cur, here)
                child.pending = _listing(cur)
                frames.append(child)
                continue
            visitor.leave(cur, frame.parts)
            frames.pop()
            if not frames:
                break
            cur = _climb(cur, top, frames)
            if len(frames) and frames[-1].parts == frame.parts[:-1]:
                visitor.after(cur, frame.name, frame.parts, frame.ident)
    finally:
        os.close(cur)


def _climb(cur: int, top: int, frames: list[_Frame]) -> int:
    """Descriptor of ``frames[-1]``'s folder, reached from ``cur`` by ``..`` or re-walked from the
    top; closes ``cur``. Frames whose folder no longer hangs where it did are dropped."""
    want = frames[-1].ident
    try:
        up = os.open("..", _DIR | os.O_CLOEXEC, dir_fd=cur)
    except OSError:
        up = -1
    os.close(cur)
    if up >= 0 and ident(os.fstat(up)) == want:
        return up
    if up >= 0:
        os.close(up)
    fd = os.dup(top)
    for depth in range(1, len(frames)):
        try:
            nxt = open_beneath(fd, frames[depth].name, _DIR)
        except (OSError, PathRefused):
            nxt = -1
        if nxt >= 0 and ident(os.fstat(nxt)) == frames[depth].ident:
            os.close(fd)
            fd = nxt
            continue
        if nxt >= 0:
            os.close(nxt)
        del frames[depth:]  # moved away: the rest of that part of the walk is abandoned
        break
    return fd


def rmdir_if(parent: int, name: str, want: Ident) -> bool:
    """``rmdir`` ``name`` in ``parent`` if it is the empty folder ``want`` (rmdir never removes a
    non-empty folder, so a folder swapped in after the check loses nothing but an empty name)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if ident(st) != want:
            return False
        os.rmdir(name, dir_fd=parent)
    except OSError:
        return False
    return True


class Adopt:
    """Visitor: record every folder and single-link regular file found (links excepted)."""

    def __init__(self, owned: set[Ident]) -> None:
        self.owned = owned

    def accepts(self, st: os.stat_result) -> bool:
        return True

    def enter(self, fd: int, parts: tuple[str, ...]) -> None:
        self.owned.add(ident(os.fstat(fd)))

    def entry(self, fd: int, name: str, parts: tuple[str, ...], st: os.stat_result) -> None:
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            self.owned.add(ident(st))

    def leave(self, fd: int, parts: tuple[str, ...]) -> None:
        pass

    def after(self, parent: int, name: str, parts: tuple[str, ...], child: Ident) -> None:
        pass
