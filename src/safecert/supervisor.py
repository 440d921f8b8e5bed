"""The vendor supervisor: a tiny program that runs one vendor and takes its whole subtree down.

Started by :class:`safecert.procs.VendorProcess` (Linux) as

    python -I -S supervisor.py PARENT_PID STATUS_FD CONTAIN PROGRAM ARG...

with the vendor's stdin, stdout and stderr pipes as its own fds 0-2, in a session of its own. It
imports the standard library only (``-S``: no site-packages) and starts in about one bare interpreter
start-up. Guarantees, on Linux:

* *contained* (``CONTAIN`` is 1 and the kernel allows a PID namespace: as root, or through an
  unprivileged user namespace): the vendor runs as pid 2 of a PID namespace of its own whose pid 1
  is a fork of this program (:func:`_init`). The vendor cannot name, signal or stop anything
  outside that namespace (this supervisor and safecert included), and pid 1 ignores every signal
  sent from inside it (``SIGKILL`` and ``SIGSTOP`` too). When pid 1 exits — the vendor ended, a
  close request, the parent's death — the kernel SIGKILLs every process in the namespace, however
  it was started (``setsid``, double forks, ``env -i``), and pid 1's exit completes only once they
  are all gone;
* it is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): uncontained, every process the vendor
  starts stays in this process's subtree — an orphan is re-parented here, not to ``init``;
* it has a parent-death signal (``PR_SET_PDEATHSIG = SIGTERM``): when the thread that started it
  dies — ``kill -9`` of safecert included — it is told to close;
* on a close request (``SIGTERM``, ``SIGINT`` or ``SIGHUP``), or once the vendor has exited, it
  SIGKILLs its children, reaps them and looks again, until it has no child left (forks racing with
  the kill are re-parented here and caught by the next round); then it exits;
* the vendor inherits fds 0-2 and nothing else; the supervisor then points its own 0-2 at
  ``/dev/null``, so end-of-file on the pipes means what it meant without a supervisor;
* it exits like the vendor: with its exit code, or killed by the same signal (no core file).

It reports on ``STATUS_FD`` one line before dropping it: ``ok VENDOR_PID SUBREAPER CONTAINED``
(``VENDOR_PID`` as safecert's ``/proc`` names it; ``SUBREAPER``, ``CONTAINED`` are 1 where the
kernel agreed), ``error ERRNO`` when the vendor could not be started, or ``refused ERRNO`` when the
kernel gave a user namespace but refused its id maps (start it again with ``CONTAIN`` 0).

Assumptions: the vendor runs as the same user (a set-uid descendant cannot be killed; the clean-up
gives up after :data:`GIVE_UP_S`; contained through a user namespace, a set-uid program runs
without its privilege). Uncontained, the vendor can signal this process (same user): a vendor that
SIGKILLs or SIGSTOPs it hands its clean-up to :mod:`safecert.procs` (the starting process is a
subreaper too and sweeps what it adopts).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
CLOSE_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
GIVE_UP_S = 5.0


def _load_libc(name: str) -> ctypes._NamedFuncPointer | None:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _load_libc("prctl")
_UNSHARE = _load_libc("unshare")


def _prctl(option: int, arg: int) -> bool:
    return _PRCTL is not None and int(_PRCTL(option, arg, 0, 0, 0)) == 0


def _children(me: int) -> list[int]:
    """Our live and zombie children (``/proc/PID/task/PID/children``, else a ``/proc`` scan)."""
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as fh:
            return [int(pid) for pid in fh.read().split()]
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN
        pass
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                if int(fh.read().rpartition(b")")[2].split()[1]) == me:
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _reap(vendor: int, status: int | None) -> tuple[int | None, bool]:
    """Reap every child that has ended; (the vendor's wait status if seen, children left?)."""
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == vendor:
            status = code


def _wait_for(vendor: int) -> int | None:
    """Block until the vendor ends (its wait status) or a close is requested (None)."""
    status: int | None = None
    while status is None:
        if signal.sigwait(CLOSE_SIGNALS | {signal.SIGCHLD}) in CLOSE_SIGNALS:
            return None
        status, _ = _reap(vendor, None)
    return status


def _clear_subtree(vendor: int, status: int | None) -> int | None:
    """SIGKILL, reap, rescan until no child is left (or :data:`GIVE_UP_S` has passed)."""
    me = os.getpid()
    if status is None:  # the vendor is not reaped yet, so its pid still names its group
        try:
            os.killpg(vendor, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        for pid in _children(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        status, left = _reap(vendor, status)
        if not left:
            break
        signal.sigtimedwait({signal.SIGCHLD}, 0.01)  # a child changed state, or 10 ms passed
    return status


def _contain() -> bool:
    """Put our next child in a new PID namespace: directly where we may (``CAP_SYS_ADMIN``), else
    inside a new user namespace that maps our own user and group to themselves (unprivileged)."""
    if _UNSHARE is None:
        return False
    if int(_UNSHARE(_CLONE_NEWPID)) == 0:
        return True
    uid, gid = os.geteuid(), os.getegid()
    if int(_UNSHARE(_CLONE_NEWUSER | _CLONE_NEWPID)) != 0:
        return False
    # inside the new user namespace; unmapped, our ids would read as "nobody" to the vendor
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    return True


def _init(program: list[str], status_fd: int, exit_w: int) -> None:
    """Pid 1 of the vendor's namespace: start the vendor, reap every orphan, and on the vendor's
    end write its wait status to ``exit_w`` and exit — the kernel then kills what is left."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the supervisor gone (however): the namespace ends
    try:
        vendor = _spawn(program)
    except OSError as exc:
        os.write(status_fd, f"error {exc.errno}\n".encode())
        os._exit(127)
    me = int(os.readlink("/proc/self"))  # our pid as the (parent's) /proc mount names it
    named = _children(me)
    os.write(status_fd, f"ok {named[0] if named else vendor} 1 1\n".encode())
    os.close(status_fd)
    _prctl(_PR_SET_DUMPABLE, 0)  # not traceable by the vendor (same user), which can name us
    _quiet_stdio()
    status: int | None = None
    while status is None:
        signal.sigwait({signal.SIGCHLD})
        status, _ = _reap(vendor, None)
    os.write(exit_w, f"{status}\n".encode())
    os._exit(0)


def _quiet_stdio() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def _exit_like(status: int | None) -> None:
    if status is None:
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        _prctl(_PR_SET_DUMPABLE, 0)  # no core file of ours for the vendor's crash
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _spawn(program: list[str]) -> int:
    """Fork and exec ``program`` (``PATH`` searched) in a process group of its own, with the signal
    mask and dispositions :mod:`subprocess` would give it; ``OSError`` if the exec failed.

    Not ``os.posix_spawnp``: glibc's leaves its two internal real-time signals ignored in the
    program, which a direct start does not."""
    errors_r, errors_w = os.pipe()  # close-on-exec: end of file here means the exec happened
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)  # one killpg reaches what did not leave the group
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python, restored by Popen
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execvp(program[0], program)
        except OSError as exc:
            os.write(errors_w, str(exc.errno).encode())
        finally:
            os._exit(127)
    os.close(errors_w)
    report = b""
    while chunk := os.read(errors_r, 64):
        report += chunk
    os.close(errors_r)
    if report:
        os.waitpid(pid, 0)
        errno = int(report)
        raise OSError(errno, os.strerror(errno), program[0])
    return pid


def _contained(program: list[str], status_fd: int) -> None:
    """Run the vendor under :func:`_init` in its PID namespace; leave like the vendor."""
    exit_r, exit_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(exit_r)
        _init(program, status_fd, exit_w)
    os.close(exit_w)
    os.close(status_fd)
    _quiet_stdio()
    waited = _wait_for(init)
    if waited is None:  # a close request: pid 1's death ends the whole namespace
        try:
            os.kill(init, signal.SIGKILL)
        except OSError:
            pass
    status = _clear_subtree(init, waited)
    report = b""
    while chunk := os.read(exit_r, 64):
        report += chunk
    _exit_like(int(report) if report.strip() else status)


def main(argv: list[str]) -> None:
    parent, status_fd, contain, program = int(argv[1]), int(argv[2]), argv[3] == "1", argv[4:]
    # every signal we act on is taken with sigwait: none can interrupt us half-way
    signal.pthread_sigmask(signal.SIG_BLOCK, CLOSE_SIGNALS | {signal.SIGCHLD})
    subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    os.set_inheritable(status_fd, False)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    if contain:
        try:
            contained = _contain()
        except OSError as exc:  # a user namespace whose ids cannot be mapped (AppArmor's
            # restriction of unprivileged ones): we are stuck in it, so ask to be started again
            os.write(status_fd, f"refused {exc.errno}\n".encode())
            os._exit(127)
        if contained:
            _contained(program, status_fd)
    try:
        vendor = _spawn(program)
    except OSError as exc:
        os.write(status_fd, f"error {exc.errno}\n".encode())
        os._exit(127)
    os.write(status_fd, f"ok {vendor} {int(subreaper)} 0\n".encode())
    os.close(status_fd)
    _quiet_stdio()
    _exit_like(_clear_subtree(vendor, _wait_for(vendor)))


if __name__ == "__main__":
    main(sys.argv)
