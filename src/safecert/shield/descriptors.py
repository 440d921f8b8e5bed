"""Descriptor primitives of the sandbox's jail: one-name opens that stay in their folder.

:func:`open_beneath` opens one name inside a folder descriptor. Where the kernel has ``openat2``
(Linux >= 5.6, and not blocked by a seccomp filter) it resolves with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV``: no ``..`` above the folder, no symbolic link anywhere
(the leaf included), no mount point crossed. Elsewhere it falls back to ``openat`` with
``O_NOFOLLOW``, which gives the same answer for one name except for the mount check. Either way the
object opened is the one named in *that* folder at that instant; whether the folder is still where
it was is the caller's question (the jail answers it with identities, see
:mod:`safecert.shield.confine`).

Errors never carry a host path: ``OSError.filename`` is at most the one name asked for.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
from collections.abc import Callable
from typing import NamedTuple

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_FLAGS = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (the unified syscall table)


class PathRefused(Exception):
    """Raised internally when an argument path would leave the sandbox or reach an object the
    sandbox does not own; its message is for the agent (relative names only)."""


class Ident(NamedTuple):
    """Identity of a file-system object: (device, inode)."""

    dev: int
    ino: int


def ident(st: os.stat_result) -> Ident:
    return Ident(st.st_dev, st.st_ino)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2_call() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's ``syscall`` when ``openat2`` answers, else ``None`` (probed once, at import)."""
    if not os.uname().sysname == "Linux":
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    how = _OpenHow(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, RESOLVE_FLAGS)
    fd = fn(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(-100),  # AT_FDCWD
        ctypes.c_char_p(b"."),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        return None  # ENOSYS (old kernel) or EPERM (seccomp): the O_NOFOLLOW walk serves
    os.close(fd)
    return fn


_OPENAT2 = _openat2_call()


def has_openat2() -> bool:
    """Whether :func:`open_beneath` uses ``openat2`` on this machine."""
    return _OPENAT2 is not None


def open_beneath(dirfd: int, name: str, flags: int, mode: int = 0o644) -> int:
    """Open the single name ``name`` inside folder ``dirfd``, never following a link.

    ``flags`` are ``os.open`` flags; ``O_NOFOLLOW | O_CLOEXEC`` are always added. Raises
    ``OSError`` (ELOOP for a link, EXDEV for a mount point under ``openat2``, ENXIO for a FIFO
    opened for writing without a reader when ``O_NONBLOCK`` is given)."""
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise PathRefused(f"{name!r} is not a file name")
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if _OPENAT2 is None:
        return os.open(name, flags, mode, dir_fd=dirfd)
    creates = bool(flags & os.O_CREAT) or flags & os.O_TMPFILE == os.O_TMPFILE
    how = _OpenHow(flags, mode if creates else 0, RESOLVE_FLAGS)  # openat2: mode only to create
    raw = os.fsencode(name)
    for _ in range(8):  # EAGAIN: the kernel saw a concurrent rename and asks to retry
        fd = _OPENAT2(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(raw),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            break
    raise OSError(err, os.strerror(err), name)


def _renameat2_call() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2  # glibc >= 2.28
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2_call()
_RENAME_NOREPLACE = 1


def rename_noreplace(folder: int, src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` inside ``folder``, never over an existing entry."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(folder, os.fsencode(src), folder, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without the flag
            raise OSError(err, os.strerror(err), dst)
    try:
        os.stat(dst, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=folder, dst_dir_fd=folder)
        return
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)


def remove_checked(
    folder: int, name: str, accept: Callable[[os.stat_result], bool]
) -> os.stat_result | None:
    """Remove the entry ``name`` of ``folder`` only if ``accept`` holds for the object removed.

    ``unlinkat`` and ``rmdir`` go by name, so a check followed by a removal can be raced by a
    process that exchanges ``name`` in between. Instead the entry is first renamed to a fresh
    random name in the same folder: that moves whatever sits at ``name`` at that instant out of
    reach of a process exchanging ``name``. It is checked there (``lstat``) and removed if
    accepted; otherwise it is renamed back (never over a new entry). Returns the ``lstat`` of
    the object removed, or ``None`` (nothing removed)."""
    hidden = f".safecert-removing-{secrets.token_hex(12)}"
    try:
        os.rename(name, hidden, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        return None
    st = os.stat(hidden, dir_fd=folder, follow_symlinks=False)
    if accept(st):
        try:
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(hidden, dir_fd=folder)
            else:
                os.unlink(hidden, dir_fd=folder)
            return st
        except OSError:
            pass  # a folder that is not empty: it goes back
    try:
        rename_noreplace(folder, hidden, name)
    except OSError:
        pass  # its name was taken meanwhile: it stays, whole, under the hidden name
    return None


def kind(st: os.stat_result) -> str:
    """What an object is, in words, for a refusal message."""
    m = st.st_mode
    if stat.S_ISDIR(m):
        return "a folder"
    if stat.S_ISLNK(m):
        return "a symbolic link"
    if stat.S_ISFIFO(m):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(m):
        return "a socket"
    if stat.S_ISCHR(m) or stat.S_ISBLK(m):
        return "a device"
    return "a regular file"
