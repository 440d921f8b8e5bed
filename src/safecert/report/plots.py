"""The plots a signer looks at beside the ODD maps.

* **Failure rate against each perturbation axis** (``rate_<axis>.png``): x is the axis' levels
  (sorted by value), y the cell's failure rate with its confidence interval, one line per
  combination of the other axes' levels, and the threshold p* as a dashed line. Fixed-N cells
  show failures/episodes and the one-sided Clopper–Pearson bounds at δ' on each side (the upper
  one is the verdict's); sequential cells show their decision's counts and e-process bounds.
* **Per-cell distributions of cost and return** (``distributions.png``): every episode's cost per
  cell against the budget d (an episode above the line fails the spec), and its return.

Lines are told apart by marker and dash as well as by colour (Okabe–Ito), so a grey-scale print
or a colour-blind reader loses nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safecert.blackbox.jobs import EpisodeRecord
from safecert.report.odd import cell_views, sorted_axes
from safecert.stats.binomial import cp_lower

#: Okabe–Ito, without yellow (too light for a line on white)
LINE_COLOURS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
DASHES = ["-", "--", "-.", ":"]


@dataclass(frozen=True)
class RatePoint:
    level: Any
    cell: int
    rate: float  # failures / episodes (a sequential cell: at its decision)
    low: float
    high: float
    status: str


@dataclass(frozen=True)
class AxisPlot:
    """The failure rate of every cell against one axis: ``lines[label]`` runs over its levels."""

    axis: str
    levels: list[Any]
    lines: dict[str, list[RatePoint]]
    bound: str  # which interval the bars are


def axis_plots(result: Any) -> list[AxisPlot]:
    """One :class:`AxisPlot` per axis with several levels (module docstring); every cell is on
    exactly one line of each plot."""
    sequential = hasattr(result, "sequential")
    views = cell_views(result)
    axes = sorted_axes(result)
    out = []
    for name, levels in axes:
        if len(levels) < 2:
            continue
        others = [(n, lv) for n, lv in axes if n != name and len(lv) > 1]
        lines: dict[str, list[RatePoint]] = {}
        for combo in itertools.product(*[lv for _, lv in others]):
            fixed = dict(zip([n for n, _ in others], combo, strict=True))
            label = ", ".join(f"{k} = {v}" for k, v in fixed.items()) or "all cells"
            points = []
            for level in levels:
                for v in views:
                    if v.params[name] != level or any(v.params[k] != x for k, x in fixed.items()):
                        continue
                    rate = v.failures / v.episodes if v.episodes else 0.0
                    low = (
                        v.lower_bound
                        if sequential and v.lower_bound is not None
                        else cp_lower(v.failures, v.episodes, result.delta_cell).value
                    )
                    points.append(RatePoint(level, v.index, rate, low, v.upper_bound, v.status))
            lines[label] = points
        bound = (
            "anytime-valid e-process bounds at δ' (at each cell's decision)"
            if sequential
            else "one-sided Clopper–Pearson bounds at δ' on each side"
        )
        out.append(AxisPlot(name, levels, lines, bound))
    return out


def _numeric(levels: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in levels)


def axis_pngs(result: Any, out_dir: Path) -> list[tuple[str, Path]]:
    """Write ``rate_<axis>.png`` for every multi-level axis; returns (caption, path) pairs."""
    plots = axis_plots(result)
    if not plots:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for p in plots:
        fig, ax = plt.subplots(figsize=(8.4, 3.8), dpi=100)
        xs = {lv: (float(lv) if _numeric(p.levels) else i) for i, lv in enumerate(p.levels)}
        for k, (label, points) in enumerate(p.lines.items()):
            x = [xs[pt.level] for pt in points]
            y = [pt.rate for pt in points]
            err = [[pt.rate - pt.low for pt in points], [pt.high - pt.rate for pt in points]]
            ax.errorbar(
                x,
                y,
                yerr=err,
                color=LINE_COLOURS[k % len(LINE_COLOURS)],
                marker=MARKERS[k % len(MARKERS)],
                ls=DASHES[k % len(DASHES)],
                capsize=3,
                lw=1.3,
                label=label,
            )
        ax.axhline(result.p_star, color="#000", ls="--", lw=1, label=f"p* = {result.p_star:g}")
        ax.set_xticks(list(xs.values()), [str(v) for v in p.levels])
        ax.set_xlabel(p.axis)
        ax.set_ylabel("failure rate")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        fig.tight_layout()
        path = Path(out_dir) / f"rate_{p.axis}.png"
        fig.savefig(path)
        plt.close(fig)
        caption = (
            f"Failure rate against {p.axis}, one line per level of the other axes; bars: "
            f"{p.bound}; dashed: p*."
        )
        written.append((caption, path))
    return written


def distributions_png(
    result: Any, records: Sequence[EpisodeRecord], out_dir: Path
) -> tuple[str, Path] | None:
    """Write ``distributions.png``: each grid cell's episode costs against the budget and its
    returns (one box and the points per cell); ``None`` when there are no grid episodes."""
    n = len(result.cells)
    costs: list[list[float]] = [[] for _ in range(n)]
    returns: list[list[float]] = [[] for _ in range(n)]
    for r in records:
        if 0 <= r.cell < n:
            costs[r.cell].append(r.cost)
            returns[r.cell].append(r.ret)
    if not any(costs):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.4, 0.55 * n + 2), 5.2), sharex=True)
    positions = list(range(n))
    for ax, values, label in ((top, costs, "episode cost"), (bottom, returns, "episode return")):
        ax.boxplot(
            [v or [float("nan")] for v in values],
            positions=positions,
            widths=0.6,
            showfliers=False,
        )
        for i, v in enumerate(values):
            ax.plot([i] * len(v), v, ".", color="#0072b2", alpha=0.5, ms=4)
        ax.set_ylabel(label)
    top.axhline(
        result.budget, color="#d55e00", ls="--", lw=1.3, label=f"budget d = {result.budget:g}"
    )
    top.legend(fontsize=7, loc="upper left")
    bottom.set_xticks(positions, [str(i) for i in positions])
    bottom.set_xlabel("cell (see the every-cell table)")
    fig.tight_layout()
    path = Path(out_dir) / "distributions.png"
    fig.savefig(path)
    plt.close(fig)
    caption = (
        "Every episode's cost per cell against the budget d (above the dashed line: the episode "
        "fails the spec), and its return; boxes: quartiles."
    )
    return caption, path
