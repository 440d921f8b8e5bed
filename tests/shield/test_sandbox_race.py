"""Real-folder swap races (issue 27): a second process exchanges a folder of the sandbox tree
with a real folder outside the root (``renameat2(RENAME_EXCHANGE)``, no link anywhere) while the
sandbox reads, mails, writes, deletes, chmods and resets. The outside folder must keep its
content, modes and names, and its secret must reach neither a reply nor the outbox.

The same run measures the pre-issue-27 walk (``O_NOFOLLOW`` per component) against the same
attacker: it must land in the outside folder, or the race did not really run. The full-size
version (10^4 operations of each kind): benchmarks/sandbox_race.py.
"""

from __future__ import annotations

import pytest

from benchmarks.sandbox_race import OPS, SWAPS, race
from safecert.shield import descriptors

N_OPS = 200
#: the second attacker rests this long each time the outside folder is back, so that the sandbox's
#: own operations can be seen to succeed between swaps (against the full-speed attacker, on a fast
#: machine, every one of 200 writes once met a swap and was refused)
PAUSE_S = 0.0005


@pytest.mark.parametrize("swap", SWAPS)
@pytest.mark.parametrize("op", OPS)
def test_real_folder_swap_never_escapes(tmp_path, op, swap):
    """``swap="file"`` exchanges the file itself: it races delete's and reset's check-then-remove."""
    r = race(op, N_OPS, tmp_path, swap=swap, baseline_walks=300)
    assert r.swaps > 0 and r.baseline_escapes > 0  # the attack ran and is a real one
    assert r.escapes == 0 and r.fingerprint_unchanged, r
    if op in ("chmod", "reset"):
        assert r.succeeded == r.ops  # they act on the rest of the tree and skip the foreign folder
    else:  # the sandbox still works on its own folder between swaps, with rests between them
        (tmp_path / "rested").mkdir()
        rested = race(op, N_OPS, tmp_path / "rested", swap=swap, baseline_walks=0, pause_s=PAUSE_S)
        assert rested.swaps > 0 and rested.succeeded > 0, rested
        assert rested.escapes == 0 and rested.fingerprint_unchanged, rested


@pytest.mark.parametrize("op", ["read", "write", "reset"])
def test_the_onofollow_fallback_never_escapes_either(tmp_path, monkeypatch, op):
    """Where openat2 is missing (old kernel, seccomp) the per-component O_NOFOLLOW walk serves;
    the identity checks, not openat2, are what refuse a swapped-in real folder."""
    monkeypatch.setattr(descriptors, "_OPENAT2", None)
    r = race(op, N_OPS, tmp_path, baseline_walks=300)
    assert r.swaps > 0 and r.baseline_escapes > 0
    assert r.escapes == 0 and r.fingerprint_unchanged, r
