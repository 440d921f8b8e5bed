"""No orphan processes: vendors and everything they start are killed and reaped — checked in /proc.

The hostile vendor (tests/blackbox/hostile_vendor.py) leaves a ``setsid`` child and a double-forked
daemon behind at every start (``--fork``), a double-forked ``setsid`` daemon with an empty
environment (``--scrub``), the end of a chain of double forks (``--chain``), and may first SIGKILL
or SIGSTOP its supervisor (``--attack``); every process it makes carries a unique tag on its
command line. Under
safecert's supervisor (tests/test_procs.py) the tag is also on the supervisor's command line."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from safecert.blackbox.backends import LocalBackend, RunContext
from safecert.blackbox.config import RunConfig
from safecert.blackbox.oracles import OracleFailure, parse_oracle_spec
from safecert.blackbox.plan import plan_run
from tests.blackbox.hostile import (
    VENDOR,
    exec_oracle,
    exec_policy,
    http_vendor,
    new_tag,
    scrubbed,
    supervisors,
    tagged,
    wait_until,
)
from tests.conftest import run_cli
from tests.test_procs import contained_here

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
OBS = np.random.default_rng(0).normal(size=(2, 4))


def test_close_kills_setsid_children_and_daemons():
    tag = new_tag()
    oracle = exec_oracle("--fork", "--scrub", "--tag", tag)
    oracle.act(OBS)
    # supervisor, vendor, setsid child, daemon, scrubbed daemon
    assert wait_until(lambda: len(tagged(tag)) >= 5 and len(scrubbed(tag)) == 1)
    oracle.close()
    assert tagged(tag) == []


def test_timeout_and_restart_leave_nothing_behind():
    tag = new_tag()
    args = ("--fork", "--scrub", "--hang", "--drip-after", "1", "--tag", tag)
    with exec_oracle(*args, timeout_s=0.5) as o:
        o.act(OBS)
        assert wait_until(lambda: len(tagged(tag)) >= 5 and len(scrubbed(tag)) == 1)
        first = set(tagged(tag))
        with pytest.raises(OracleFailure, match="no complete reply"):
            o.act(OBS)
        assert not first & set(tagged(tag))  # the hung vendor and all its escapees are gone
        o.act(OBS)  # a fresh vendor (with fresh escapees)
        assert o.restarts == 1
    assert tagged(tag) == []


def test_kill_minus_9_of_the_parent_kills_the_vendor_and_its_children():
    tag = new_tag()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time, numpy as np
                sys.path.insert(0, {str(Path(__file__).parents[2])!r})
                from tests.blackbox.hostile import exec_oracle
                o = exec_oracle("--fork", "--scrub", "--tag", {tag!r})
                o.act(np.zeros((1, 4)))
                print("ready", flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        # the -c script carries the tag too; supervisor, [the namespace's pid 1,] vendor and its
        # three escapees
        expected = 6 if contained_here() else 5
        assert wait_until(
            lambda: len(set(tagged(tag)) - {holder.pid}) == expected and scrubbed(tag), timeout=20
        )
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        # the supervisor's parent-death signal; it clears its subtree
        assert wait_until(lambda: tagged(tag) == [], timeout=5.0), tagged(tag)
    finally:
        holder.kill()
        holder.wait()


CONFIG = """
policy = "{policy}"
env = "CartPole-v1"
episodes = 3
seed = 0
max_steps = 20
timeout_s = 1.0
retries = 0
{extra}
[spec]
budget = 0.0
cost = "0"
p_star = 0.5
confidence = 0.9
[kpis]
return = {{ lower = 0.0, upper = 20.0 }}
"""


#: runs ``argv[1:]`` with SIGINT and SIGQUIT at their default actions, as a shell's foreground job
FOREGROUND = (
    "import os, signal, sys\n"
    "for sig in (signal.SIGINT, signal.SIGQUIT):\n"
    "    signal.signal(sig, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def _certify(
    config: Path, out: Path, *options: str, foreground: bool = False, **popen
) -> subprocess.Popen:
    """``safecert certify CONFIG --out OUT [options]`` as a child process of the test;
    ``foreground``: with Ctrl-C's default action even where this test session ignores it."""
    cmd = [sys.executable, "-m", "safecert.cli.main", "certify", str(config), "--out", str(out)]
    if foreground:
        cmd = [sys.executable, "-c", FOREGROUND, *cmd]
    return subprocess.Popen([*cmd, *options], **popen)


def test_certify_with_a_forking_dripping_exec_vendor_finishes_and_leaves_nothing(tmp_path):
    """A real run: the vendor trickles every reply after its third (each such episode fails at
    its deadline), forks escapees at every (re)start; ``workers = 1`` from the config is obeyed."""
    tag, ppids = new_tag(), tmp_path / "ppids.txt"
    policy = exec_policy("--fork", "--scrub", "--drip", "0.3", "--drip-after", "3", "--tag", tag)
    policy += f" --ppid-file {ppids}"
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(policy=policy, extra="workers = 1"))
    start = time.monotonic()
    proc = _certify(
        config,
        tmp_path / "out",
        "--json",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 1, err  # episodes end at the failed (trickled) calls
    assert "Traceback" not in err
    assert json.loads(out)["verdict"] == "FAIL"
    assert took < 60, took
    assert tagged(tag) == [], "vendor processes survived the run"
    assert set(ppids.read_text().split()) == {str(proc.pid)}  # workers = 1: no pool processes


def test_certify_with_a_dripping_http_vendor_is_bounded(tmp_path):
    with http_vendor("--drip", "0.3", "--drip-after", "2") as url:
        config = tmp_path / "run.toml"
        config.write_text(CONFIG.format(policy=f"{url}/act", extra="workers = 1"))
        start = time.monotonic()
        result = run_cli("certify", str(config), "--out", str(tmp_path / "out"), timeout=120)
        took = time.monotonic() - start
    assert result.code == 1, result.stderr  # every episode ends at a failed call
    assert "Traceback" not in result.stderr
    assert took < 40, took


def test_local_backend_takes_workers_from_the_config_unless_given():
    cfg = RunConfig.model_validate(
        {
            "policy": "exec:python3 x",
            "env": "CartPole-v1",
            "episodes": 1,
            "workers": 3,
            "spec": {"budget": 0.0, "p_star": 0.5},
        }
    )
    spec = parse_oracle_spec(exec_policy(), base_dir=VENDOR.parent)
    ctx = RunContext(cfg, str(VENDOR.parent), ({},), None, spec)
    with LocalBackend() as by_config:
        by_config._open(ctx, True)
        assert by_config.workers == 3
    with LocalBackend(1) as by_option:
        by_option._open(ctx, True)
        assert by_option.workers == 1


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_certify_leaves_no_vendor(tmp_path, signum):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM in the middle
    of a pool run (``workers = 2``): certify ends promptly with 128 + the signal, no traceback, no
    vendor left.

    Certify runs as a terminal's foreground job, with Ctrl-C's default action: a test session
    started in the background (``cmd &`` in a non-interactive shell, as CI may start it) has
    SIGINT ignored, and a Python program keeps an inherited ignored SIGINT (that certify would
    then, rightly, ignore the signal; its 400 episodes cannot end in time by themselves)."""
    tag = new_tag()
    policy = exec_policy("--fork", "--scrub", "--drip", "0.3", "--drip-after", "2", "--tag", tag)
    config = tmp_path / "run.toml"
    config.write_text(
        CONFIG.format(policy=policy, extra="workers = 2").replace("episodes = 3", "episodes = 400")
    )
    proc = _certify(
        config,
        tmp_path / "out",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        foreground=True,
    )
    try:
        # the probe's vendor, then at least one pool worker's vendor with their escapees
        assert wait_until(lambda: len(tagged(tag)) >= 8, timeout=60), tagged(tag)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"certify did not exit within 30 s of the signal:\n{_hung(proc)}")
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + signum and "Traceback" not in err, (proc.returncode, err)
    assert wait_until(lambda: tagged(tag) == [], timeout=5), tagged(tag)


def _hung(proc: subprocess.Popen) -> str:
    """What a hung certify session was doing: its processes (state, kernel wait channel, each
    thread's blocked, ignored, caught and pending signals) and, after ``SIGABRT``
    (``PYTHONFAULTHANDLER``), every Python thread's stack of each of them."""
    table = subprocess.run(
        ["ps", "-ww", "-s", str(proc.pid), "-o", "pid,ppid,pgid,stat,wchan:30,etime,args"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    pids = [int(line.split()[0]) for line in table.splitlines()[1:]]
    masks = []
    for pid in pids:
        for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
            try:
                status = (task / "status").read_text().splitlines()
            except OSError:
                continue
            fields = [ln.replace("\t", " ") for ln in status if ln.startswith(("Sig", "ShdPnd"))]
            masks.append(f"{pid}/{task.name}: {'  '.join(fields)}")
    for pid in pids:  # every process below certify (all Python here)
        if pid != proc.pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGABRT)
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGABRT)
    _, err = proc.communicate(timeout=10)
    return "\n".join([table, *masks, "--- stderr (faulthandler dumps) ---", err[-30000:]])


def test_a_library_pool_run_closes_its_vendors(tmp_path):
    """Without the CLI (no :func:`safecert.procs.reaping`): the pool workers close their vendors —
    escapees included — when the backend closes."""
    tag = new_tag()
    config = tmp_path / "run.toml"
    config.write_text(
        CONFIG.format(policy=exec_policy("--fork", "--scrub", "--tag", tag), extra="workers = 2")
    )
    plan = plan_run(config)
    ctx = RunContext(
        plan.config, str(plan.base_dir), plan.cells, (9.6, 2.0, 0.84, 2.0), plan.oracle
    )
    with LocalBackend(2, chunk_episodes=1) as backend:
        records = list(backend.run(plan.all_jobs(), ctx))
        assert len(records) == 3 and len(tagged(tag)) >= 3
    assert wait_until(lambda: tagged(tag) == [], timeout=5), tagged(tag)


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rpartition(b")")[2].split()[1])
    except OSError:
        return None


@pytest.mark.parametrize("workers", [1, 2])
def test_kill_minus_9_of_certify_leaves_no_hung_vendor(tmp_path, workers):
    """``kill -9`` of ``safecert certify`` while its vendors hang (30 s deadline): the vendors and
    every child they left (``setsid``, daemons, scrubbed environments) die with their supervisors,
    which are told when their parent dies — certify itself (``workers = 1``) or a pool worker,
    which dies with the forkserver, which ends with certify (``workers = 2``)."""
    tag = new_tag()
    # 25 prompt replies per vendor process: certify's own checks (probe, one nominal episode)
    # pass, and the hang comes inside the run
    policy = exec_policy("--fork", "--scrub", "--hang", "--drip-after", "25", "--tag", tag)
    config = tmp_path / "run.toml"
    body = CONFIG.format(policy=policy, extra=f"workers = {workers}")
    config.write_text(body.replace("timeout_s = 1.0", "timeout_s = 30.0"))
    proc = _certify(config, tmp_path / "out", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def hanging_vendor() -> bool:  # a vendor of the pool (workers = 2) or of certify itself
            parents = {_ppid(pid) for pid in supervisors(tag)}
            return any((p == proc.pid) == (workers == 1) for p in parents if p)

        assert wait_until(hanging_vendor, timeout=60)
        assert wait_until(lambda: scrubbed(tag) != [], timeout=20)  # generous: a loaded machine
        time.sleep(0.5)  # the vendor is now hanging inside a call
        proc.kill()
        proc.wait()
        # well inside the vendors' own 30 s deadline: what ends them is the parent-death chain
        assert wait_until(lambda: tagged(tag) == [], timeout=20), tagged(tag)
    finally:
        proc.kill()
        proc.wait()


ATTACK = ("--fork", "--scrub", "--chain", "3")


@pytest.mark.parametrize(
    ("sig", "contain", "workers"),
    [
        ("KILL", True, 1),
        ("STOP", True, 1),
        ("KILL", False, 1),
        ("STOP", False, 1),
        ("KILL", False, 2),
    ],
    ids=["kill-contained", "stop-contained", "kill-uncontained", "stop-uncontained", "kill-pool"],
)
def test_certify_with_a_vendor_that_attacks_its_supervisor_leaves_nothing(
    tmp_path, sig, contain, workers
):
    """The vendor SIGKILLs or SIGSTOPs its supervisor at every start, then leaves a ``setsid``
    child, a daemon, a scrubbed daemon and the end of a 3-link double-fork chain. Contained (a PID
    namespace; skipped where the kernel refuses it) the attack cannot reach the supervisor;
    uncontained (``SAFECERT_PID_NAMESPACE=0``) it does, and certify — a subreaper — sweeps what
    it adopts (from its pool workers' vendors too). Either way: after certify exits, none of the
    vendor's processes is alive."""
    if contain and not contained_here():
        pytest.skip("the kernel refuses PID namespaces here")
    tag, ppids = new_tag(), tmp_path / "ppids.txt"
    policy = exec_policy("--attack", sig, *ATTACK, "--tag", tag) + f" --ppid-file {ppids}"
    config = tmp_path / "run.toml"
    # short episodes: uncontained, a killed supervisor means a fresh vendor (and attack) per call
    body = CONFIG.format(policy=policy, extra=f"workers = {workers}")
    config.write_text(body.replace("max_steps = 20", "max_steps = 2"))
    env = {**os.environ, "SAFECERT_PID_NAMESPACE": str(int(contain))}
    proc = _certify(
        config, tmp_path / "out", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode in (0, 1) and "Traceback" not in err, err
    assert ppids.read_text().split(), "the vendor never started"
    assert wait_until(lambda: tagged(tag) == [], timeout=5), tagged(tag)


@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_kill_minus_9_of_certify_after_the_vendor_attacked_its_supervisor(tmp_path, sig):
    """``kill -9`` of certify while a vendor that attacked its supervisor (and left its daemons)
    hangs inside a call: contained, the supervisor's parent-death signal ends the vendor's PID
    namespace, and with it every process the vendor left — well inside the 30 s call deadline."""
    if not contained_here():
        pytest.skip("the kernel refuses PID namespaces here (uncontained, orphans go to init)")
    tag = new_tag()
    policy = exec_policy("--attack", sig, *ATTACK, "--hang", "--drip-after", "25", "--tag", tag)
    config = tmp_path / "run.toml"
    body = CONFIG.format(policy=policy, extra="workers = 1")
    config.write_text(body.replace("timeout_s = 1.0", "timeout_s = 30.0"))
    proc = _certify(config, tmp_path / "out", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # supervisor, pid 1, vendor and its four escapees (after the attack)
        assert wait_until(lambda: len(tagged(tag)) >= 7 and scrubbed(tag), timeout=60)
        time.sleep(0.5)
        proc.kill()
        proc.wait()
        assert wait_until(lambda: tagged(tag) == [], timeout=20), tagged(tag)
    finally:
        proc.kill()
        proc.wait()
