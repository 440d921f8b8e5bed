"""The plots a signer looks at beside the ODD maps.

* **Failure rate against each perturbation axis** (``rate_<axis>.png``): x is the axis' levels
  (sorted by value), y the cell's failure rate with its confidence interval, one line per
  combination of the other axes' levels, and the threshold p* as a dashed line. Fixed-N cells
  show failures/episodes and the one-sided Clopper–Pearson bounds at δ' on each side (the upper
  one is the verdict's); sequential cells show their decision's counts and e-process bounds.
* **Per-cell distributions of cost and return** (``distributions.png``): every episode's cost per
  cell against the budget d (an episode above the line fails the spec), and its return; drawn
  with Pillow, so a run without rate plots or ODD maps never imports matplotlib.

Lines are told apart by marker and dash as well as by colour (Okabe–Ito), so a grey-scale print
or a colour-blind reader loses nothing.
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
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
    returns (one box and the points per cell); ``None`` when there are no grid episodes.

    Drawn with Pillow (a few tens of milliseconds to import) rather than matplotlib (about half a
    second, more than a cheap run's episodes): boxes are the quartiles with whiskers to the
    furthest point within 1.5 IQR of them (matplotlib's rule), every episode is a point."""
    n = len(result.cells)
    costs: list[list[float]] = [[] for _ in range(n)]
    returns: list[list[float]] = [[] for _ in range(n)]
    for r in records:
        if 0 <= r.cell < n:
            costs[r.cell].append(r.cost)
            returns[r.cell].append(r.ret)
    if not any(costs):
        return None
    path = Path(out_dir) / "distributions.png"
    # zlib level 1: a few kB larger than the default level 6 and ~15 ms less per run (mostly white)
    path.write_bytes(png_bytes(_draw_distributions(costs, returns, result.budget), 1))
    caption = (
        "Every episode's cost per cell against the budget d (above the dashed line: the episode "
        "fails the spec), and its return; boxes: quartiles."
    )
    return caption, path


def png_bytes(image: Any, compress_level: int) -> bytes:
    """The PNG file ``image.save(path, compress_level=compress_level)`` writes for an RGB image
    made here (no palette, transparency, text or other metadata), byte for byte, without
    :meth:`PIL.Image.Image.save`: Pillow's own ``zip`` encoder (its adaptive row filters and
    zlib stream, the same arguments), cut into IDAT chunks where its PNG writer cuts them (one
    per encoder buffer: ``max(ImageFile.MAXBLOCK, width * 4)`` bytes), between the IHDR and
    IEND chunks it writes. ``save`` first imports Pillow's PNG plugin (``PngImagePlugin``:
    ≈ 20 M instructions, a quarter of what encoding this picture costs, 85 M);
    ``tests/cli/test_startup_png.py`` compares the two on many images."""
    from PIL import ImageFile

    if image.mode != "RGB":
        raise ValueError(f"png_bytes writes RGB images, not {image.mode}")
    width, height = image.size
    data = image.tobytes("zip", "RGB", False, compress_level)
    step = max(ImageFile.MAXBLOCK, width * 4)
    # colour type 2 (RGB), 8 bits a sample, deflate, adaptive filtering, no interlace
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunks = [(b"IHDR", header)]
    chunks += [(b"IDAT", data[i : i + step]) for i in range(0, len(data), step)]
    chunks.append((b"IEND", b""))
    out = [b"\x89PNG\r\n\x1a\n"]
    for kind, body in chunks:
        crc = zlib.crc32(body, zlib.crc32(kind))
        out.append(struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc))
    return b"".join(out)


#: the distributions picture's layout, in pixels
_LEFT, _RIGHT, _TOP, _GAP, _BOTTOM, _PANEL = 78, 16, 14, 18, 48, 200


def _draw_distributions(costs: list[list[float]], returns: list[list[float]], budget: float) -> Any:
    """The two panels (cost with the budget line above, return below), cells along x."""
    from PIL import Image, ImageDraw, ImageFont

    n = len(costs)
    width = max(640, int(55 * n + 200))
    height = _TOP + 2 * _PANEL + _GAP + _BOTTOM
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image, "RGBA")
    font = ImageFont.load_default(12)
    span = (width - _LEFT - _RIGHT) / n  # x pixels per cell
    panels = ((costs, "episode cost", _TOP), (returns, "episode return", _TOP + _PANEL + _GAP))
    for values, label, top in panels:
        box = (_LEFT, top, width - _RIGHT, top + _PANEL)
        extra = [budget] if values is costs else []
        to_y = _axis(draw, font, box, [v for vs in values for v in vs] + extra)
        _vertical_text(image, font, label, 6, top + _PANEL // 2)
        for i, vs in enumerate(values):
            finite = [v for v in vs if math.isfinite(v)]
            if finite:
                _box(draw, _LEFT + span * (i + 0.5), min(span * 0.3, 24.0), finite, to_y)
        if values is costs:
            y = to_y(budget)
            for dash in range(_LEFT, width - _RIGHT, 9):
                end = min(dash + 5, width - _RIGHT)
                draw.line([(dash, y), (end, y)], fill="#d55e00", width=2)
            text = f"budget d = {budget:g}"
            legend_right = _LEFT + 36 + font.getlength(text)
            draw.rectangle(
                [(_LEFT + 4, top + 4), (legend_right, top + 20)], fill="white", outline="#999"
            )
            draw.line([(_LEFT + 8, top + 12), (_LEFT + 28, top + 12)], fill="#d55e00", width=2)
            draw.text((_LEFT + 32, top + 12), text, fill="black", font=font, anchor="lm")
    bottom = _TOP + 2 * _PANEL + _GAP
    for i in range(n):
        x = _LEFT + span * (i + 0.5)
        draw.line([(x, bottom), (x, bottom + 4)], fill="black")
        draw.text((x, bottom + 6), str(i), fill="black", font=font, anchor="mt")
    draw.text(
        ((_LEFT + width - _RIGHT) / 2, height - 6),
        "cell (see the every-cell table)",
        fill="black",
        font=font,
        anchor="mb",
    )
    return image


def _axis(draw: Any, font: Any, box: tuple[int, int, int, int], values: list[float]) -> Any:
    """Frame ``box``, label y ticks spanning ``values``; returns value → y pixel."""
    left, top, right, bottom = box
    finite = [v for v in values if math.isfinite(v)] or [0.0]
    low, high = min(finite), max(finite)
    if high - low < 1e-12 * max(1.0, abs(high)):
        low, high = low - 0.5, high + 0.5
    pad = 0.05 * (high - low)
    low, high = low - pad, high + pad

    def to_y(v: float) -> float:
        return bottom - (v - low) / (high - low) * (bottom - top)

    draw.rectangle(box, outline="black")
    for tick in _ticks(low, high):
        y = to_y(tick)
        draw.line([(left - 4, y), (left, y)], fill="black")
        draw.text((left - 6, y), f"{tick:g}", fill="black", font=font, anchor="rm")
    return to_y


def _ticks(low: float, high: float) -> list[float]:
    """About five round ticks (steps of 1, 2 or 5 × 10^k) inside [low, high]."""
    raw = (high - low) / 5
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step)
    ticks = [k * step for k in range(first, int(math.floor(high / step)) + 1)]
    return [round(t, 12) + 0.0 for t in ticks]


def _box(draw: Any, x: float, half: float, values: list[float], to_y: Any) -> None:
    """One cell: quartile box with median, whiskers (1.5 IQR rule), every value as a point."""
    data = sorted(values)
    q1, median, q3 = (_percentile(data, q) for q in (0.25, 0.5, 0.75))
    iqr = q3 - q1
    low = min(v for v in data if v >= q1 - 1.5 * iqr)
    high = max(v for v in data if v <= q3 + 1.5 * iqr)
    for a, b in ((low, q1), (q3, high)):
        draw.line([(x, to_y(a)), (x, to_y(b))], fill="black")
    for v in (low, high):
        draw.line([(x - half / 2, to_y(v)), (x + half / 2, to_y(v))], fill="black")
    draw.rectangle([(x - half, to_y(q3)), (x + half, to_y(q1))], outline="black")
    draw.line([(x - half, to_y(median)), (x + half, to_y(median))], fill="#e69f00", width=2)
    for v in values:
        y = to_y(v)
        draw.ellipse([(x - 2, y - 2), (x + 2, y + 2)], fill=(0, 114, 178, 128))


def _percentile(data: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``data``, interpolated linearly between the closest ranks
    (numpy's default method; :func:`numpy.percentile` itself would import ``numpy.ma``, about
    15 ms of a cheap run's fixed cost, for one picture)."""
    position = (len(data) - 1) * q
    below = math.floor(position)
    above = min(below + 1, len(data) - 1)
    return data[below] + (data[above] - data[below]) * (position - below)


def _vertical_text(image: Any, font: Any, text: str, x: int, y_centre: int) -> None:
    """``text`` rotated a quarter turn, its left edge at ``x``, centred on ``y_centre``."""
    from PIL import Image, ImageDraw

    left, top, right, bottom = font.getbbox(text)
    label = Image.new("RGB", (right - left + 2, bottom - top + 2), "white")
    ImageDraw.Draw(label).text((1 - left, 1 - top), text, fill="black", font=font)
    turned = label.rotate(90, expand=True)
    image.paste(turned, (x, int(y_centre - turned.height / 2)))
