"""safecert.procs: vendors under the supervisor — real processes, checked through /proc.

The hard cases (docs/oracles-and-envs.md, "No orphans"): a vendor child that double-forks, calls
``setsid`` and re-executes itself with an empty environment (no session, group or mark of ours
reaches it), one that keeps changing its pid while we look, and the vendor's own children when the
process that started the vendor is killed with ``kill -9``."""

from __future__ import annotations

import functools
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from safecert import orphans, procs
from tests.blackbox.hostile import VENDOR, new_tag, scrubbed, stat, supervisors, tagged, wait_until

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.timeout(60),  # a regression here is a hang: fail it instead
]
REQUEST = b'{"observations": [[0.0, 0.0, 0.1, 0.2]]}\n'


def hostile(*args: str) -> list[str]:
    return [sys.executable, str(VENDOR), *args]


@pytest.fixture(autouse=True)
def _no_vendor_left():
    """Whatever a test left open (a failing one too) is closed before the next."""
    yield
    procs.kill_all()


def read(pipe, *, line: bool = False, seconds: float = 10.0) -> bytes:
    """Read up to end of file (or one line) within ``seconds``; a hang fails the test."""
    data, deadline = b"", time.monotonic() + seconds
    while not (line and data.endswith(b"\n")):
        remaining = deadline - time.monotonic()
        assert remaining > 0 and select.select([pipe], [], [], remaining)[0], f"no EOF: {data!r}"
        chunk = os.read(pipe.fileno(), 1 if line else 65536)
        if not chunk:
            break
        data += chunk
    return data


def ask(vendor: procs.VendorProcess) -> bytes:
    vendor.stdin.write(REQUEST)
    return read(vendor.stdout, line=True)


def started(tag: str, count: int) -> None:
    assert wait_until(lambda: len(tagged(tag)) >= count), tagged(tag)


def stays_empty(tag: str, seconds: float = 0.5) -> bool:
    """No tagged process in any census for ``seconds`` (one census can miss a process that forks
    and exits while /proc is listed; many in a row cannot keep missing a live one)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if tagged(tag):
            return False
        time.sleep(0.01)
    return True


def test_a_scrubbed_double_forked_setsid_daemon_dies_with_the_vendor():
    """Gap (a): the daemon shares nothing with the vendor (session, group, environment) and was
    re-parented once its parent exited — to the vendor's own reaper (the supervisor, or the pid 1
    of the vendor's namespace, a fork of it), not to init; it dies on ``kill``."""
    tag = new_tag()
    vendor = procs.VendorProcess(hostile("--fork", "--scrub", "--tag", tag))
    assert ask(vendor) == b'{"actions": [[1]]}\n'
    # supervisor, [namespace pid 1,] vendor, setsid child, daemon, scrubbed daemon
    started(tag, 6 if vendor.contained else 5)
    assert wait_until(lambda: len(scrubbed(tag)) == 1)
    [daemon] = scrubbed(tag)
    ppid, pgid, sid = stat(daemon)
    reaper, vendor_pgid, vendor_sid = stat(vendor.vendor_pid)
    assert ppid == reaper and reaper in (vendor.pid, *orphans._children_of(vendor.pid))
    assert sid == pgid != vendor_sid and pgid != vendor_pgid  # another session and group
    assert supervisors(tag) == sorted({vendor.pid, reaper})  # the namespace pid 1 is a fork
    vendor.kill()
    assert tagged(tag) == []  # at once: kill returns when the subtree is empty


def test_control_without_the_supervisor_the_scrubbed_daemon_survives():
    """The same vendor run directly (``supervised=False``, the non-Linux path): killing its
    session's group misses the daemon — the case above is a real escape."""
    tag = new_tag()
    vendor = procs.VendorProcess(hostile("--scrub", "--tag", tag), supervised=False)
    assert ask(vendor)
    assert wait_until(lambda: len(scrubbed(tag)) == 1)
    vendor.kill()
    try:
        assert wait_until(lambda: tagged(tag) == scrubbed(tag) != [])
        assert stat(scrubbed(tag)[0])[0] != vendor.pid
    finally:
        for pid in tagged(tag):
            os.kill(pid, signal.SIGKILL)


def test_a_daemon_that_changes_its_pid_while_we_look_is_caught():
    """Gap (a), racing: the scrubbed daemon forks and lets its parent exit every 20 ms — too fast
    for a /proc scan on a loaded machine; it tells its pids on stderr. Killed while it hops."""
    tag = new_tag()
    vendor = procs.VendorProcess(hostile("--scrub", "--hop", "--tag", tag))
    assert ask(vendor)
    hops = set()
    while len(hops) < 5:
        hops.add(read(vendor.stderr, line=True))
    vendor.kill()
    assert stays_empty(tag, seconds=2.5)  # a survivor would sit still (and be seen) after 2 s


def test_a_vendor_that_exits_takes_its_escapees_down_and_its_exit_code_through(tmp_path):
    tag = new_tag()
    script = tmp_path / "leave.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(VENDOR.parent)!r})\n"
        "from hostile_vendor import leave_children, leave_scrubbed\n"
        f"leave_children()\nleave_scrubbed({tag!r}, hop=False)\nsys.exit(3)\n"
    )
    vendor = procs.VendorProcess([sys.executable, str(script), tag])
    assert vendor.wait(timeout=10) == 3
    assert read(vendor.stdout) == b""  # every holder of the pipe is gone: end of file
    assert tagged(tag) == []
    vendor.kill()


@pytest.mark.parametrize(
    "command",
    [["sh", "-c", "exit 7"], ["sh", "-c", "kill -USR1 $$"], ["sh", "-c", "kill -SEGV $$"]],
    ids=["exit-7", "SIGUSR1", "SIGSEGV"],
)
def test_exit_status_reads_as_the_vendors_own(tmp_path, command):
    """Same status as the program run directly with subprocess (the independent route); a crash
    of the vendor leaves no core file of the supervisor behind."""
    direct = subprocess.run(command, cwd=tmp_path, check=False).returncode
    vendor = procs.VendorProcess(command, cwd=str(tmp_path))
    assert vendor.wait(timeout=10) == direct != 0
    vendor.kill()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("core")]


def test_a_program_that_cannot_start_fails_like_popen(tmp_path):
    with pytest.raises(OSError) as direct:
        subprocess.Popen([str(tmp_path / "missing")])
    with pytest.raises(OSError) as supervised:
        procs.VendorProcess([str(tmp_path / "missing")])
    assert str(supervised.value) == str(direct.value)
    assert supervised.value.errno == direct.value.errno
    assert procs.kill_all() == 0  # nothing was left to close


def test_the_vendor_sees_what_it_would_see_without_a_supervisor(tmp_path):
    """argv, cwd, environment, open fds, signal mask and ignored signals: equal to the same program
    run without the supervisor (``supervised=False``: straight from ``subprocess.Popen``)."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "show.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            status = dict(line.split(":\\t", 1) for line in open("/proc/self/status"))
            print(json.dumps({
                "argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ),
                "fds": sorted(os.listdir("/proc/self/fd")),
                "blocked": status["SigBlk"], "ignored": status["SigIgn"],
                "own_group": os.getpgid(0) == os.getpid(),
            }))
            """
        )
    )
    seen = []
    for supervised in (True, False):
        vendor = procs.VendorProcess(
            [sys.executable, "bin/show.py", "$HOME", "a b"],
            cwd=str(tmp_path),
            supervised=supervised,
        )
        seen.append(json.loads(read(vendor.stdout)))
        assert vendor.wait(timeout=10) == 0
        vendor.kill()
    assert seen[0] == seen[1]
    assert seen[0]["argv"][1:] == ["$HOME", "a b"] and seen[0]["fds"] == ["0", "1", "2", "3"]


def test_end_of_file_when_the_vendor_closes_stdout_while_alive():
    """The supervisor keeps no copy of the vendor's pipes."""
    vendor = procs.VendorProcess(["sh", "-c", "exec >&-; exec sleep 30"])
    start = time.monotonic()
    assert read(vendor.stdout, seconds=5) == b""
    assert time.monotonic() - start < 5 and vendor.poll() is None
    vendor.kill()
    assert vendor.returncode == -signal.SIGKILL


def test_reaping_kills_what_was_left_open():
    tag = new_tag()
    with procs.reaping():
        vendor = procs.VendorProcess(hostile("--scrub", "--tag", tag))
        assert ask(vendor)
        started(tag, 3)
    assert vendor.returncode is not None and tagged(tag) == []
    assert procs.kill_all() == 0


HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from safecert import orphans, procs
from tests.blackbox.hostile import VENDOR
vendor = procs.VendorProcess([sys.executable, str(VENDOR), {args}])
vendor.stdin.write(b'{{"observations": [[0, 0, 0, 0]]}}\\n')
vendor.stdout.readline()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("hop", [False, True], ids=["sleeping", "hopping"])
def test_kill_minus_9_of_the_starter_takes_the_vendors_children_down(hop):
    """Gap (b): the vendor's children — a ``setsid`` child, a daemon, a scrubbed daemon — outlive
    a parent-death signal on the vendor; the supervisor's covers them."""
    tag = new_tag()
    args = ["--fork", "--scrub", *(["--hop"] if hop else []), "--tag", tag]
    root = str(Path(__file__).parents[1])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(root=root, args=", ".join(map(repr, args)))],
        stdout=subprocess.PIPE,
    )
    try:
        assert read(holder.stdout, line=True, seconds=30) == b"ready\n"
        started(tag, 6)  # holder (its -c text), supervisor, vendor, three escapees
        assert wait_until(lambda: len(scrubbed(tag)) == 1)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert wait_until(lambda: tagged(tag) == [], timeout=5.0), tagged(tag)
        assert stays_empty(tag, seconds=2.5 if hop else 0.5)
    finally:
        holder.kill()
        holder.wait()


def attack_report(vendor: procs.VendorProcess, targets: int) -> list[list[str]]:
    """The hostile vendor's ``attack HOW PID OUTCOME`` lines (two routes per target)."""
    lines = [read(vendor.stderr, line=True).split() for _ in range(2 * targets)]
    assert all(line[0] == b"attack" for line in lines), lines
    return [[word.decode() for word in line[1:]] for line in lines]


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rpartition(b")")[2].split()[0].decode()


@functools.cache
def contained_here() -> bool:
    """Whether the kernel gives vendors a PID namespace here (asked once per test process)."""
    vendor = procs.VendorProcess(["true"])
    vendor.wait(timeout=10)
    vendor.kill()
    return vendor.contained


needs_namespace = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not contained_here(),
    reason="the kernel refuses PID namespaces here (root or unprivileged user namespaces)",
)
ATTACK = ["--fork", "--scrub", "--chain", "3"]


@needs_namespace
@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_a_contained_vendor_cannot_kill_or_stop_its_supervisor(sig):
    """The vendor signals every supervisor above it, by pid and by /proc descriptor: its pid 1
    (inside its namespace) ignores it, the supervisor outside cannot be named; both stay running,
    and ``kill`` still takes down the vendor and the daemons it left after the attack."""
    tag = new_tag()
    vendor = procs.VendorProcess(hostile("--attack", sig, *ATTACK, "--tag", tag))
    assert vendor.contained
    assert ask(vendor)
    report = attack_report(vendor, 2)  # the namespace's pid 1 and the supervisor
    init = stat(vendor.vendor_pid)[0]
    assert {int(pid) for _, pid, _ in report} == {init, vendor.pid}
    assert all(outcome != "ok" for how, pid, outcome in report if int(pid) == vendor.pid)
    started(tag, 7)  # supervisor, pid 1, vendor, setsid child, daemon, scrubbed, end of chain
    assert vendor.poll() is None and state(vendor.pid) != "T" and state(init) != "T"
    assert ask(vendor)  # still served
    vendor.kill()
    assert tagged(tag) == []  # at once: the namespace ended with its pid 1


@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_uncontained_an_attacked_supervisor_is_cleaned_up_by_the_reaping_process(sig):
    """Control and fallback: without a namespace the attack works (the supervisor is killed or
    stopped — shown in /proc); inside :func:`procs.reaping` this process adopts the vendor's
    orphans and ``kill`` (resuming a stopped supervisor, sweeping what was adopted) still leaves
    nothing, promptly (well inside the supervisor's ``KILL_WAIT_S``)."""
    tag = new_tag()
    with procs.reaping():
        vendor = procs.VendorProcess(hostile("--attack", sig, *ATTACK, "--tag", tag), contain=False)
        assert not vendor.contained
        assert ask(vendor)
        report = attack_report(vendor, 2)  # the supervisor, found twice (/proc and getppid)
        assert {(how, int(pid), outcome) for how, pid, outcome in report} == {
            ("kill", vendor.pid, "ok"),
            ("pidfd", vendor.pid, "ok"),
        }
        if sig == "KILL":
            assert vendor.wait(timeout=5) == -signal.SIGKILL
        else:
            assert wait_until(lambda: state(vendor.pid) == "T")
        started(tag, 5)  # vendor, setsid child, daemon, scrubbed, end of chain
        start = time.monotonic()
        vendor.kill()
        assert wait_until(lambda: tagged(tag) == [], timeout=2.0), tagged(tag)
        assert time.monotonic() - start < procs.KILL_WAIT_S
    assert tagged(tag) == []


def test_reaping_spares_children_started_before_it_and_on_purpose():
    """The sweep kills adopted orphans only: a child of this process from before the scope, and
    a vendor supervisor open inside it, survive ``sweep_adopted``; an orphan does not."""
    tag = new_tag()
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", tag])
    try:
        with procs.reaping():
            vendor = procs.VendorProcess(hostile("--tag", tag), contain=False)
            assert ask(vendor)
            os.kill(vendor.pid, signal.SIGKILL)  # the vendor is now this process's orphan
            vendor.wait(timeout=5)
            assert wait_until(lambda: orphans.adopted() == [vendor.vendor_pid])
            assert orphans.sweep_adopted() == 1
            assert tagged(tag) == [before.pid]
            vendor.kill()
        assert before.poll() is None and orphans.adopted() == []
    finally:
        before.kill()
        before.wait()


MAPS_REFUSED = """
import builtins, sys
sys.path.insert(0, {folder!r})
import supervisor as s
real_unshare, real_open = s._UNSHARE, builtins.open
s._UNSHARE = lambda flags: -1 if flags == s._CLONE_NEWPID else real_unshare(flags)
def refuse_maps(path, *args, **kwargs):
    if str(path).startswith("/proc/self/") and str(path).endswith(("setgroups", "uid_map")):
        raise PermissionError(1, "Operation not permitted", path)
    return real_open(path, *args, **kwargs)
s.open = refuse_maps
s.main(sys.argv)
"""


def test_a_user_namespace_whose_id_maps_are_refused_falls_back_to_uncontained(
    tmp_path, monkeypatch, caplog
):
    """AppArmor's restriction of unprivileged user namespaces (Ubuntu 24.04, fresh CI machines
    that are not root) grants ``unshare(CLONE_NEWUSER)`` but refuses the id maps: the vendor
    still starts (uncontained, with the warning), and later vendors do not try again."""
    wrapper = tmp_path / "supervisor.py"
    wrapper.write_text(MAPS_REFUSED.format(folder=str(procs.SUPERVISOR.parent)))
    monkeypatch.setattr(procs, "SUPERVISOR", wrapper)
    monkeypatch.setattr(procs, "_MAPS_REFUSED", [])
    monkeypatch.setattr(procs, "_WARNED", [])
    for _ in range(2):
        vendor = procs.VendorProcess([sys.executable, "-c", "print('served')"], contain=True)
        assert not vendor.contained
        assert read(vendor.stdout) == b"served\n" and vendor.wait(timeout=10) == 0
        vendor.kill()
    assert procs._MAPS_REFUSED == [True]
    assert [r.message for r in caplog.records].count(
        "the kernel refused a PID namespace for vendors: a vendor that kills or stops its "
        "supervisor is cleaned up only while this process runs"
    ) == 1


def test_a_fork_of_the_reaping_process_sweeps_none_of_its_own_children():
    """A fork inherits the scope but not the subreaper flag, so every child it has is its own:
    a sweep there (an uncontained vendor closed in a ``fork`` pool worker) kills none of them."""
    with procs.reaping():
        time.sleep(0.02)  # the child below starts in a later clock tick than the scope
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the fork reports through the pipe
            own = subprocess.Popen(["sleep", "30"])
            time.sleep(0.05)
            swept = orphans.sweep_adopted()
            os.write(write_end, f"{swept} {own.poll() is None}".encode())
            own.kill()
            own.wait()
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as report:
            assert read(report) == b"0 True"  # nothing swept, its own child still running
        os.waitpid(pid, 0)
