"""Committed-budget row estimates from closed-loop logs (paper Sec. III-A, Lemma 2).

The budget n0(s,a) is fixed from the model (design constants) before any log is read. For each
stochastic live row only the first n0 successors in file order are counted; the surplus is
discarded: P̂(s'|s,a) = N0(s,a,s') / n0(s,a). A row visited fewer than n0 times is *vacuous* (its
confidence set is every distribution on K(s,a)); this loosens the certificate but never invalidates
it. Rows with |K| = 1 (halt, unsafe self-loops, declared deterministic calls) are exact.

With ``anytime=True`` nothing is committed: every visit of every row is counted (``n0`` then
records the visits used, = ``visits``) and only never-visited stochastic rows are vacuous; the
radii come from the time-uniform sets (:func:`safecert.shield.confidence.anytime_beta`).

Counting streams: steps are gathered in chunks (or taken as the column blocks of the fast log
reader, :meth:`~safecert.shield.logs.StepLog.blocks`) and truncated with a vectorised per-row rank,
so memory is O(chunk + table), not O(log).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from safecert.errors import ConfigError
from safecert.shield.logs import Step, StepLog
from safecert.shield.model import ShieldModel

CHUNK = 1 << 16


@dataclass(frozen=True)
class RowEstimates:
    """Truncated counts per row; arrays are indexed ``[s, a]`` (and ``[s, a, j]`` over K(s,a)).

    ``n0``: committed budgets (anytime: the visits used, = ``visits`` on stochastic live rows);
    ``visits``: all visits N(s,a) (surplus included); ``counts``: the truncated counts N0 aligned
    with ``model.succ``; ``k``: |K(s,a)|; ``steps``/``episodes``: how much log was read;
    ``anytime``: every visit counted, no budget (time-uniform sets).
    """

    n0: np.ndarray
    visits: np.ndarray
    counts: np.ndarray
    k: np.ndarray
    steps: int
    episodes: int
    anytime: bool = False

    @property
    def deterministic(self) -> np.ndarray:
        return self.k == 1

    @property
    def vacuous(self) -> np.ndarray:
        """Stochastic rows that missed their budget (anytime: stochastic live rows never visited)."""
        if self.anytime:
            return (self.k >= 2) & (self.visits == 0)  # unsafe rows have k = 1 (A2)
        return (self.n0 > 0) & (self.visits < self.n0)

    @property
    def p_hat(self) -> np.ndarray:
        """P̂ over K(s,a); exact one-hot on deterministic rows; zeros on vacuous rows."""
        p = np.zeros(self.counts.shape, dtype=np.float64)
        ok = (self.n0 > 0) & ~self.vacuous
        p[ok] = self.counts[ok] / self.n0[ok][:, None]
        p[self.deterministic, 0] = 1.0
        return p

    @property
    def missed_budget(self) -> int:
        return int(self.vacuous.sum())


class RowCounter:
    """Streaming truncated counts: feed (row, position-in-K) pairs in file order."""

    def __init__(
        self, model: ShieldModel, n0: np.ndarray | None = None, *, anytime: bool = False
    ) -> None:
        if anytime and n0 is not None:
            raise ConfigError("anytime estimates take no budget", field="n0")
        self.anytime = anytime
        if not anytime and n0 is None and not model.has_budget:
            raise ConfigError(
                "is required for committed-budget sets",
                field="budget",
                fix="add budget = { per_row = N } to the model, or use anytime sets "
                "(anytime = true in the model, or --anytime)",
            )
        everything = np.iinfo(np.int64).max
        budget = (
            np.full(model.k.shape, everything, np.int64)
            if anytime
            else (model.n0 if n0 is None else np.asarray(n0, dtype=np.int64))
        )
        if budget.shape != model.k.shape:
            raise ConfigError(f"n0 has shape {budget.shape}, expected {model.k.shape}", field="n0")
        self.model = model
        self.n0 = np.where(model.k >= 2, budget, 0)
        self._flat_n0 = self.n0.reshape(-1)
        self.visits = np.zeros(model.k.size, dtype=np.int64)
        self.counts = np.zeros((model.k.size, model.succ.shape[-1]), dtype=np.int64)
        self.steps = 0

    def add(self, rows: np.ndarray, pos: np.ndarray) -> None:
        """Count a block of consecutive steps (``rows = s * m + a``); order within the block is
        file order."""
        size = len(rows)
        if not size:
            return
        order = np.argsort(rows, kind="stable")
        rs = rows[order]
        starts = np.r_[0, np.flatnonzero(np.diff(rs)) + 1]
        group_start = np.repeat(starts, np.diff(np.r_[starts, size]))
        rank = np.arange(size) - group_start + self.visits[rs]  # 0-based visit index in its row
        keep = rank < self._flat_n0[rs]
        np.add.at(self.counts, (rs[keep], pos[order][keep]), 1)
        np.add.at(self.visits, rs, 1)
        self.steps += size

    def result(self, episodes: int) -> RowEstimates:
        shape = self.model.k.shape
        visits = self.visits.reshape(shape)
        return RowEstimates(
            n0=np.where(self.model.k >= 2, visits, 0) if self.anytime else self.n0.copy(),
            visits=self.visits.reshape(shape).copy(),
            counts=self.counts.reshape(self.model.succ.shape).copy(),
            k=self.model.k.copy(),
            steps=self.steps,
            episodes=episodes,
            anytime=self.anytime,
        )


def estimate(
    model: ShieldModel,
    steps: Iterable[Step],
    n0: np.ndarray | None = None,
    *,
    chunk: int = CHUNK,
    anytime: bool = False,
) -> RowEstimates:
    """Stream ``steps`` (file order) into committed-budget counts (``anytime``: every visit).

    ``n0`` defaults to the model's budgets; pass another array only if it too was fixed before the
    logs were read (e.g. a benchmark sweeping M with the rule floor(0.7 M T / R)).
    """
    counter = RowCounter(model, n0, anytime=anytime)
    m = len(model.actions)
    if isinstance(steps, StepLog):  # columns straight from the fast reader
        for block in steps.blocks():
            counter.add(block.state * m + block.action, block.pos)
        return counter.result(steps.episodes)
    episodes: set[str] = set()
    rows, pos = np.empty(chunk, np.int64), np.empty(chunk, np.int64)
    fill = 0
    for st in steps:
        episodes.add(st.episode)
        rows[fill] = st.state * m + st.action
        pos[fill] = st.pos
        fill += 1
        if fill == chunk:
            counter.add(rows, pos)
            fill = 0
    counter.add(rows[:fill], pos[:fill])
    return counter.result(len(episodes))
