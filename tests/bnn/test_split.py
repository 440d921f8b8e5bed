"""The closure question split over pieces of the step box (``[verifier] closure_splits``) and
solved on a pool of processes (issue 25, item 5): the pieces cover the box, the split question
agrees with the unsplit one (proof / replayed counterexample), and the certificate's outcome is the
same with 1 and 2 solver processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from safecert.bnn.certify import certify_run
from safecert.bnn.networks import forward
from safecert.bnn.pool import SolvePool
from safecert.bnn.sets import Box
from safecert.bnn.setup import benchmark_config
from safecert.bnn.solvers import solve
from safecert.bnn.verifier import Counterexample, Proof, Unknown, Verifier, combine, split_box
from safecert.errors import ConfigError
from tests.bnn._toy import l1_ball_invariant, toy
from tests.bnn.test_budgets import _small, reproducible
from tests.bnn.test_verifier import _lds_box


@pytest.mark.parametrize("splits", [0, 1, 2, 3, 5])
def test_pieces_cover_the_box_and_overlap_only_on_faces(splits: int) -> None:
    box = Box([-1.0, -2.0, 0.0], [1.0, 2.0, 0.5])
    pieces = split_box(box, splits)
    assert len(pieces) == 2**splits
    assert all(p.inside(box) for p in pieces)
    vol = float(np.prod(box.hi - box.lo))
    assert sum(float(np.prod(p.hi - p.lo)) for p in pieces) == pytest.approx(vol)
    x = box.sample(np.random.default_rng(0), 5000)
    inside = np.stack([p.contains(x) for p in pieces])
    assert inside.any(axis=0).all()  # every state in some piece
    assert (inside.sum(axis=0) == 1).mean() > 0.99  # faces have measure zero


def test_integer_pieces_keep_every_integer_point_once() -> None:
    box = Box([0.0, 0.0], [4.0, 1.0])
    pieces = split_box(box, 3, integer=True)
    pts = np.array([[a, b] for a in range(5) for b in range(2)], dtype=float)
    counts = np.stack([p.contains(pts) for p in pieces]).sum(axis=0)
    assert (counts == 1).all()


def test_negative_splits_name_the_key() -> None:
    with pytest.raises(ConfigError, match="closure_splits"):
        split_box(Box([0.0], [1.0]), -1)


@pytest.mark.parametrize("gain", [0.1, 0.4])
@pytest.mark.parametrize("strict", [False, True])
def test_split_closure_agrees_with_the_unsplit_one(gain: float, strict: bool) -> None:
    """Closed (gain 0.1) and leaky (0.4) toy systems: the same verdict for 1, 2 pieces (in this
    process) and 4 (on a 2-process pool); every counterexample replays and is recomputed here."""
    bench, box, g = toy(gain=gain), _lds_box(), l1_ball_invariant()
    kw = {"first_feasible": False, "strict_closure": strict}
    plain = Verifier(bench, box, **kw).check_closure(g)
    with SolvePool(2) as pool:
        for splits, p in ((1, None), (2, pool)):
            v = Verifier(bench, box, closure_splits=splits, pool=p, **kw).check_closure(g)
            assert type(v) is type(plain)
            assert len(v.checks) >= 2**splits  # every piece was asked
            if isinstance(v, Counterexample):
                for rep in (v.replay, *v.more):
                    assert rep.ok and rep.weights is not None and box.contains(rep.weights)
                    x1 = bench.step(rep.x, forward(rep.weights, rep.x))
                    np.testing.assert_array_equal(x1, rep.x_next)
                    gx, g1 = float(g.forward(rep.x)[0]), float(g.forward(x1)[0])
                    assert gx >= 0 and (g1 < 0 or not bench.in_box(x1.reshape(1, -1))[0])
            else:
                assert isinstance(v, Proof) and gain == 0.1


def test_pool_and_in_process_give_the_same_answers() -> None:
    """A MILP solved in a worker process gives the in-process answer, bit for bit."""
    bench, box, g = toy(gain=0.4), _lds_box(), l1_ball_invariant()
    q = Verifier(bench, box).closure_query(g, -1e-5)
    here = solve(q.milp, "highs", node_limit=1000)
    with SolvePool(2) as pool:
        there = [pool.submit(q.milp, "highs", node_limit=1000).result(60)[0] for _ in range(2)]
    for r in there:
        assert r.status == here.status == "feasible"
        np.testing.assert_array_equal(r.values, here.values)


def test_combine_takes_the_lowest_piece_and_a_timeout_wins() -> None:
    """Pieces in order: a proved piece then a violated one give that counterexample with every
    check; a piece the wall-clock guard cut makes the whole answer Unknown (machine-dependent)."""
    bench, box, g = toy(gain=0.4), _lds_box(), l1_ball_invariant()
    cex = Verifier(bench, box, incumbents=True).check_closure(g)
    proof = Verifier(toy(gain=0.1), box).check_closure(g)
    assert isinstance(cex, Counterexample) and isinstance(proof, Proof)
    both = combine([proof, cex])
    assert isinstance(both, Counterexample) and both.x is cex.x and both.more == cex.more
    assert both.checks == proof.checks + cex.checks
    twice = combine([cex, cex])  # the same states again: nothing new in ``more``
    assert isinstance(twice, Counterexample) and twice.more == cex.more
    late = Unknown("closure: timeout", (replace(cex.checks[0], status="timeout"),))
    assert isinstance(combine([cex, late]), Unknown)
    assert isinstance(combine([proof, proof]), Proof)


@pytest.mark.slow  # two whole runs, 25–35 s on 2 shared cores
def test_certificate_is_the_same_with_one_and_two_workers(tmp_path: Path) -> None:
    """The whole loop (witness search, learner, falsifier, counterexamples, proof) with the
    closure split in two: the certificate's outcome is the same on 1 and 2 solver processes."""
    cfg = _small().model_copy(
        update={"verifier": _small().verifier.model_copy(update={"closure_splits": 1})}
    )
    one = certify_run(cfg, None, tmp_path / "one", workers=1).certificate
    two = certify_run(cfg, None, tmp_path / "two", workers=2).certificate
    assert one.verdict == "SAFE" and one.result.verifier_calls >= 2
    assert one.parameters["verifier"] == {"closure_splits": 1}
    assert reproducible(two) == reproducible(one)


def test_lane_and_cartpole_split_their_closure_question() -> None:
    assert benchmark_config("lane").verifier.closure_splits >= 1
    assert benchmark_config("cartpole").verifier.closure_splits >= 1
    assert benchmark_config("lds").verifier.closure_splits == 0  # the 2-D systems as before


CHILD = """
import os, sys, time
from safecert.bnn.pool import SolvePool
from safecert.bnn.solvers import Milp

def main():
    pool = SolvePool(2)
    m = Milp()
    m.add_vars([0.0], [1.0], integer=True)
    m.set_objective([0], [1.0])
    pool.submit(m, "highs").result(60)
    pids = sorted(p.pid for p in pool._pool._processes.values())
    print(" ".join(map(str, pids)), flush=True)
    time.sleep(600)

if __name__ == "__main__":
    main()
"""


def test_workers_end_with_a_run_killed_by_sigkill(tmp_path: Path) -> None:
    """``kill -9`` of the process that owns the pool: its solver processes end too (they watch
    the owner's pid; the forkserver is their parent, not the run)."""
    script = tmp_path / "owner.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) >= 1 and all(_alive(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 20.0
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False
