"""ODD heatmaps: PASS/FAIL per grid cell over every pair of envelope axes (PNG, matplotlib Agg).

For a pair (x, y) of axes with more than one level, each square is one grid cell, green when it
passes and red when it fails, with its Bonferroni Clopper–Pearson upper bound written inside.
The other axes are held at their nominal level when the grid lists it (no perturbation), else at
their first listed level; the title says which. One axis with several levels gives a 1 × n strip.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from safecert.blackbox.grid import NOMINAL

PASS_COLOUR = "#2e9d57"
FAIL_COLOUR = "#d6453d"


def _fixed_levels(axes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        a["name"]: (NOMINAL[a["name"]] if NOMINAL[a["name"]] in a["levels"] else a["levels"][0])
        for a in axes
    }


def odd_maps(result: dict[str, Any], out_dir: Path) -> list[tuple[str, Path]]:
    """Write one PNG per pair of multi-level axes; returns (title, path) pairs."""
    axes = result["axes"]
    multi = [a for a in axes if len(a["levels"]) > 1]
    pairs: list[tuple[dict, dict | None]] = list(itertools.combinations(multi, 2))
    if len(multi) == 1:
        pairs = [(multi[0], None)]
    if not pairs:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fixed = _fixed_levels(axes)
    by_params = {tuple(sorted(c["params"].items())): c for c in result["cells"]}
    written: list[tuple[str, Path]] = []
    for xa, ya in pairs:
        ylevels = ya["levels"] if ya is not None else [None]
        fig, ax = plt.subplots(figsize=(1.3 * len(xa["levels"]) + 2.2, 1.0 * len(ylevels) + 1.6))
        for (ix, xv), (iy, yv) in itertools.product(enumerate(xa["levels"]), enumerate(ylevels)):
            params = dict(fixed, **{xa["name"]: xv})
            if ya is not None:
                params[ya["name"]] = yv
            cell = by_params.get(tuple(sorted(params.items())))
            if cell is None:
                continue
            colour = PASS_COLOUR if cell["decision"] == "PASS" else FAIL_COLOUR
            ax.add_patch(plt.Rectangle((ix, iy), 1, 1, facecolor=colour, edgecolor="white", lw=2))
            ax.text(
                ix + 0.5,
                iy + 0.5,
                f"{cell['decision']}\n{cell['upper_bound']:.4f}",
                ha="center",
                va="center",
                color="white",
                fontsize=9,
                weight="bold",
            )
        ax.set_xlim(0, len(xa["levels"]))
        ax.set_ylim(0, len(ylevels))
        ax.set_xticks([i + 0.5 for i in range(len(xa["levels"]))], [str(v) for v in xa["levels"]])
        ax.set_xlabel(xa["name"])
        if ya is not None:
            ax.set_yticks([i + 0.5 for i in range(len(ylevels))], [str(v) for v in ylevels])
            ax.set_ylabel(ya["name"])
        else:
            ax.set_yticks([])
        others = {k: v for k, v in fixed.items() if k not in (xa["name"], ya and ya["name"])}
        title = f"ODD: {xa['name']}" + (f" × {ya['name']}" if ya else "")
        sub = ", ".join(f"{k}={v}" for k, v in others.items())
        ax.set_title(
            title + (f"\n({sub})" if sub else "") + f"\nupper bound vs p* = {result['p_star']}",
            fontsize=9,
        )
        fig.tight_layout()
        name = f"odd_{xa['name']}" + (f"_{ya['name']}" if ya else "") + ".png"
        path = Path(out_dir) / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append((title, path))
    return written
