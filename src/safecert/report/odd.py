"""ODD views that cannot hide a failing cell, for any number of envelope axes.

A black-box grid is the product of its axes' levels. Every view here is built from
:func:`cell_views`, which gives each judged cell one status:

* ``pass`` (green) — the cell passes *and* the verdict's precondition holds (the stage-1 nominal
  cell passes; without it no cell is certified, see the verdict rule);
* ``fail`` (red) — the cell fails;
* ``warn`` (amber) — anything else: a passing cell while the nominal cell fails ("NOT
  CERTIFIED"), or a sequential cell left inconclusive/undecided (its own word, as the terminal
  says it).

A sequential cell is shown with the counts and bounds of its decision (``failures_used`` of
``episodes_used``, the e-process bounds), never with the episodes run after it.

Views (levels always sorted by value, axes in the grid's canonical order):

* **slices** — with axes ``x``, ``y`` (the first two with several levels) and extra axes
  ``z…``: one heatmap per combination of the extra axes' levels (small multiples). Together the
  slices show every cell exactly once.
* **worst-case projections** — for every pair of multi-level axes, one heatmap whose square is
  the worst status over all cells behind it (any ``fail`` → fail; else any ``warn`` → warn), with
  the largest upper bound and the number of failing cells written inside. Labelled as such.

With two multi-level axes the one slice *is* the grid and no projection is drawn in HTML; the PNG
maps (``odd_<x>_<y>.png``, embedded in ``report.md``) are the projections, one per pair.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from safecert.report.html import FAIL_COLOUR, INK, PASS_COLOUR, WARN_COLOUR, breakable, esc

Status = Literal["pass", "fail", "warn"]
_RANK = {"pass": 0, "warn": 1, "fail": 2}
_COLOURS = {"pass": PASS_COLOUR, "fail": FAIL_COLOUR, "warn": WARN_COLOUR}


@dataclass(frozen=True)
class CellView:
    """One judged grid cell as the views show it (``index`` into ``result.cells``)."""

    index: int
    params: dict[str, Any]
    decision: str
    failures: int
    episodes: int
    upper_bound: float
    status: Status
    note: str
    #: the status in words: PASS, FAIL, NOT CERTIFIED, or a sequential INCONCLUSIVE / UNDECIDED
    word: str = ""
    #: a sequential cell's e-process lower bound at its decision (``None`` for fixed-N)
    lower_bound: float | None = None


def cell_views(result: Any) -> list[CellView]:
    """The status of every cell of a black-box or sequential ``result`` (module docstring)."""
    nominal_ok = result.stage1.decision == "PASS"
    out = []
    for i, c in enumerate(result.cells):
        if c.decision == "FAIL":
            status: Status = "fail"
            note, word = "fails", "FAIL"
        elif c.decision == "PASS" and nominal_ok:
            status, note, word = "pass", "passes", "PASS"
        elif c.decision == "PASS":
            status, note = "warn", "passes, but the nominal cell fails: not certified"
            word = "NOT CERTIFIED"
        else:
            status, note, word = "warn", f"{c.decision.lower()}: not certified", c.decision
        sequential = hasattr(c, "episodes_used")
        failures, episodes = (
            (c.failures_used, c.episodes_used) if sequential else (c.failures, c.episodes)
        )
        out.append(
            CellView(
                i,
                dict(c.params),
                c.decision,
                failures,
                episodes,
                c.upper_bound,
                status,
                note,
                word,
                c.lower_bound if sequential else None,
            )
        )
    return out


def level_key(value: Any) -> tuple[int, Any]:
    """Sort key of an axis level: numbers (and booleans) by value, anything else after, by text."""
    if isinstance(value, bool | int | float):
        return (0, float(value))
    return (1, str(value))


def sorted_axes(result: Any) -> list[tuple[str, list[Any]]]:
    """``(name, levels sorted by value)`` of every axis, in the grid's canonical order."""
    return [(a.name, sorted(a.levels, key=level_key)) for a in result.axes]


@dataclass(frozen=True)
class Square:
    status: Status
    text: str
    cells: tuple[int, ...]


@dataclass(frozen=True)
class Heatmap:
    """One 2-D (or 1 × n) map; ``squares[(ix, iy)]`` (``iy`` is 0 for a strip)."""

    view: Literal["slice", "worst-case"]
    title: str
    caption: str
    x: tuple[str, list[Any]]
    y: tuple[str, list[Any]] | None
    squares: dict[tuple[int, int], Square]

    @property
    def name(self) -> str:
        return f"odd_{self.x[0]}" + (f"_{self.y[0]}" if self.y else "")


def _square(views: list[CellView]) -> Square:
    worst = max(views, key=lambda v: (_RANK[v.status], v.upper_bound))
    failing = sum(v.status == "fail" for v in views)
    word = worst.word
    if len(views) == 1:
        # a no-break space keeps each bound's name with its value on a narrow map
        lb = "" if worst.lower_bound is None else f" LB\u00a0{worst.lower_bound:.3f}"
        text = f"{word} {worst.failures}/{worst.episodes}{lb} UB\u00a0{worst.upper_bound:.3f}"
    else:
        text = f"{word} {failing}/{len(views)} cells fail, max UB\u00a0{worst.upper_bound:.3f}"
    return Square(worst.status, text, tuple(v.index for v in views))


def _heatmap(
    views: list[CellView],
    x: tuple[str, list[Any]],
    y: tuple[str, list[Any]] | None,
    fixed: dict[str, Any],
    view: Literal["slice", "worst-case"],
    title: str,
    caption: str,
) -> Heatmap:
    squares: dict[tuple[int, int], Square] = {}
    ylevels = y[1] if y else [None]
    for (ix, xv), (iy, yv) in itertools.product(enumerate(x[1]), enumerate(ylevels)):
        behind = [
            v
            for v in views
            if v.params[x[0]] == xv
            and (y is None or v.params[y[0]] == yv)
            and all(v.params[k] == val for k, val in fixed.items())
        ]
        if behind:
            squares[(ix, iy)] = _square(behind)
    return Heatmap(view, title, caption, x, y, squares)


def odd_views(result: Any) -> tuple[list[Heatmap], list[Heatmap]]:
    """(slices, worst-case projections) of a black-box result (module docstring)."""
    views = cell_views(result)
    axes = sorted_axes(result)
    multi = [a for a in axes if len(a[1]) > 1]
    single = {name: levels[0] for name, levels in axes if len(levels) == 1}
    fixed_note = ", ".join(f"{k} = {v}" for k, v in single.items())
    if not multi:
        return [], []
    x, y, extra = multi[0], (multi[1] if len(multi) > 1 else None), multi[2:]
    slices = []
    for combo in itertools.product(*[levels for _, levels in extra]):
        fixed = dict(zip([name for name, _ in extra], combo, strict=True))
        where = ", ".join(f"{k} = {v}" for k, v in fixed.items())
        title = f"{x[0]} × {y[0]}" if y else x[0]
        slices.append(
            _heatmap(
                views,
                x,
                y,
                fixed,
                "slice",
                f"Slice: {title}" + (f" at {where}" if where else ""),
                "every cell of this slice" + (f"; fixed: {fixed_note}" if fixed_note else ""),
            )
        )
    projections = []
    pairs = list(itertools.combinations(multi, 2)) if len(multi) > 1 else [(multi[0], None)]
    for px, py in pairs:
        others = [name for name, _ in multi if name not in (px[0], py[0] if py else None)]
        title = f"{px[0]} × {py[0]}" if py else px[0]
        caption = (
            f"worst case over {', '.join(others)}: a square is green only when every cell "
            "behind it passes"
            if others
            else "every cell"
        )
        projections.append(
            _heatmap(views, px, py, {}, "worst-case", f"Worst-case projection: {title}", caption)
        )
    return slices, projections


def heatmap_html(m: Heatmap) -> str:
    """One heatmap as an HTML table; every square states its status as text and ``data-*``."""
    xname, xlevels = m.x
    ylevels = m.y[1] if m.y else [None]
    head = f"<th>{esc(m.y[0]) + ' ↓ / ' if m.y else ''}{esc(xname)} →</th>" + "".join(
        f"<th>{esc(v)}</th>" for v in xlevels
    )
    rows = []
    for iy, yv in enumerate(ylevels):
        tds = []
        for ix in range(len(xlevels)):
            sq = m.squares.get((ix, iy))
            if sq is None:
                tds.append("<td>—</td>")
                continue
            cells = ",".join(str(c) for c in sq.cells)
            tds.append(
                f"<td class='{sq.status}' data-status='{sq.status}' data-cells='{cells}'>"
                f"{esc(sq.text)}</td>"
            )
        label = esc(yv) if m.y else ""
        rows.append(f"<tr><th>{label}</th>{''.join(tds)}</tr>")
    return (
        f"<div class='scroll'><table class='heatmap' data-view='{m.view}'><caption><strong>{esc(m.title)}</strong>"
        f"<br>{esc(m.caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def legend(result: Any) -> str:
    """What the colours and the numbers of a square mean, naming the bound each square shows."""
    if hasattr(result, "sequential"):
        what = (
            "failures/episodes at the cell's decision (episodes run after it are not counted) "
            "and the anytime-valid e-process bounds at δ' (LB, UB)"
        )
        undecided = (
            "<span class='warn'>NOT CERTIFIED</span>passes while the nominal cell fails "
            "<span class='warn'>INCONCLUSIVE</span>reached its cap undecided"
        )
    else:
        what = "failures/episodes and the Clopper–Pearson upper bound at δ' (UB)"
        undecided = "<span class='warn'>NOT CERTIFIED</span>passes while the nominal cell fails"
    return (
        "<p class='legend'><span class='pass'>PASS</span>passes and the nominal cell passes "
        f"<span class='fail'>FAIL</span>fails {undecided}. Each square: {breakable(what)}.</p>"
    )


def odd_html(result: Any) -> str:
    """The ODD section: legend, slices (small multiples), worst-case projections."""
    slices, projections = odd_views(result)
    if not slices:
        return ""
    parts = ["<h2>Operational design domain</h2>", legend(result)]
    parts.append(
        f"<h3>Slices ({len(slices)}: every cell appears in exactly one)</h3><div class='heatmaps'>"
        + "".join(heatmap_html(m) for m in slices)
        + "</div>"
    )
    if len(slices) > 1:
        parts.append(
            "<h3>Worst-case projections (each square: the worst cell behind it)</h3>"
            "<div class='heatmaps'>" + "".join(heatmap_html(m) for m in projections) + "</div>"
        )
    return "".join(parts)


def projection_figure(m: Heatmap, p_star: float) -> Any:
    """One worst-case projection as a matplotlib figure, laid out as the HTML map: x levels
    left to right, y levels top to bottom (smallest on top)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ylevels = m.y[1] if m.y else [None]
    fig, ax = plt.subplots(figsize=(1.6 * len(m.x[1]) + 2.2, 1.0 * len(ylevels) + 1.8))
    for (ix, iy), sq in m.squares.items():
        ax.add_patch(
            plt.Rectangle((ix, iy), 1, 1, facecolor=_COLOURS[sq.status], edgecolor="white", lw=2)
        )
        word, _, rest = sq.text.partition(" ")
        ax.text(
            ix + 0.5,
            iy + 0.5,
            f"{word}\n{rest}".replace(", ", "\n"),
            ha="center",
            va="center",
            color=INK[sq.status],
            fontsize=7,
            weight="bold",
        )
    ax.set_xlim(0, len(m.x[1]))
    ax.set_ylim(0, len(ylevels))
    ax.set_xticks([i + 0.5 for i in range(len(m.x[1]))], [str(v) for v in m.x[1]])
    ax.set_xlabel(m.x[0])
    if m.y:
        ax.set_yticks([i + 0.5 for i in range(len(ylevels))], [str(v) for v in ylevels])
        ax.set_ylabel(m.y[0])
        ax.invert_yaxis()  # smallest level on top, as in the HTML map
    else:
        ax.set_yticks([])
    ax.set_title(f"{m.title}\n({m.caption})\np* = {p_star}", fontsize=8)
    fig.tight_layout()
    return fig


def odd_pngs(result: Any, out_dir: Path) -> list[tuple[str, Path]]:
    """Write each worst-case projection as ``odd_<x>[_<y>].png``; returns (title, path) pairs."""
    _, projections = odd_views(result)
    if not projections:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for m in projections:
        fig = projection_figure(m, result.p_star)
        path = Path(out_dir) / f"{m.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append((m.title, path))
    return written
