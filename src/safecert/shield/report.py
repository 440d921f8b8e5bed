"""Views of a shield: the ``shield.json`` table (to and from the array), a Markdown table and, for
grid-shaped models (a ``[layout]`` table in the model), a PNG map like the paper's Fig. 1b —
hazards shaded, start and goal marked, every forbidden move drawn as a red fence on the side of
the cell it would leave by, V̄_T printed in each live cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from safecert.errors import DataError
from safecert.shield.guard import permitted_actions
from safecert.shield.model import ShieldModel


def allowed_to_json(model: ShieldModel, allowed: np.ndarray) -> dict[str, list[str]]:
    """Every live state label → its permitted actions, in model order (unsafe states are
    absorbing and omitted). This is the content of ``shield.json`` and of ``result.allowed``."""
    return {
        model.labels[s]: [model.actions[a] for a in np.flatnonzero(allowed[s])]
        for s in np.flatnonzero(model.live)
    }


def allowed_from_json(model: ShieldModel, data: Any, field: str = "shield") -> np.ndarray:
    """The shield array of a table ``{state label: [actions]}`` (inverse of
    :func:`allowed_to_json`), with the runtime guard's meaning
    (:func:`safecert.shield.guard.permitted_actions`): halt is always permitted and a state the
    table does not list is **halt-only**. Unknown labels or actions are a DataError naming
    ``field``."""
    if not isinstance(data, dict):
        raise DataError("must map state labels to lists of actions", field=field)
    labels = set(model.labels)
    table: dict[str, list[str]] = {}
    for label, acts in data.items():
        if label not in labels:
            raise DataError(
                f"unknown state {label!r}", field=field, fix="use the model's state labels"
            )
        if not isinstance(acts, list):
            raise DataError(f"{label!r} must map to a list of actions", field=field)
        for a in acts:
            model.action_index(a, field=f"{field}.{label}")
        table[label] = acts
    halt = model.actions[model.halt]
    allowed = np.zeros(model.k.shape, dtype=bool)
    for s, label in enumerate(model.labels):
        for name in permitted_actions(table, label, halt):
            allowed[s, model.action_index(name)] = True
    return allowed


def missing_live_states(model: ShieldModel, data: dict[str, Any]) -> list[str]:
    """Live states a shield table does not list (each of them is halt-only)."""
    return [model.labels[s] for s in np.flatnonzero(model.live) if model.labels[s] not in data]


def table_rows(model: ShieldModel, allowed: np.ndarray, values: np.ndarray) -> list[list[Any]]:
    """One row per live state: label, V̄_T, permitted, forbidden."""
    out = []
    for s in np.flatnonzero(model.live):
        ok = [model.actions[a] for a in np.flatnonzero(allowed[s])]
        no = [model.actions[a] for a in np.flatnonzero(~allowed[s])]
        out.append([model.labels[s], float(values[s]), " ".join(ok), " ".join(no) or "-"])
    return out


def write_markdown(path: Path, title: str, summary: dict[str, Any], rows: list[list[Any]]) -> None:
    lines = [f"# {title}", ""]
    lines += [f"- **{k}**: {v}" for k, v in summary.items()]
    lines += ["", "| state | V̄_T | permitted | forbidden |", "|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]:.5f} | {r[2]} | {r[3]} |" for r in rows]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def plot_grid(
    model: ShieldModel, allowed: np.ndarray, values: np.ndarray, path: Path, title: str = ""
) -> Path | None:
    """PNG map of a grid-shaped model's shield; None when the model has no ``[layout]``."""
    layout = model.spec.layout
    if layout is None or not layout.moves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(0.8 * layout.cols + 1, 0.8 * layout.rows + 1))
    index = {lab: i for i, lab in enumerate(model.labels)}
    for r in range(layout.rows):
        for c in range(layout.cols):
            s = index.get(layout.cell_format.format(row=r, col=c))
            if s is None:
                continue
            x, y = c, layout.rows - 1 - r
            colour = "#d9534f55" if model.unsafe[s] else "white"
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="#999999", lw=0.5))
            if model.unsafe[s]:
                continue
            mark = (
                "S"
                if s == model.initial
                else ("G" if model.goal is not None and model.goal[s] else "")
            )
            ax.text(x + 0.5, y + 0.55, mark, ha="center", va="center", fontsize=11, weight="bold")
            ax.text(x + 0.5, y + 0.2, f"{values[s]:.2f}", ha="center", va="center", fontsize=6)
            for name, (dr, dc) in layout.moves.items():
                if name in model.actions and not allowed[s, model.actions.index(name)]:
                    cx, cy = x + 0.5 + 0.42 * dc, y + 0.5 - 0.42 * dr
                    half_x, half_y = 0.35 * abs(dr), 0.35 * abs(dc)
                    ax.plot(
                        [cx - half_x, cx + half_x],
                        [cy - half_y, cy + half_y],
                        color="#c9302c",
                        lw=2.5,
                    )
    ax.set_xlim(0, layout.cols)
    ax.set_ylim(0, layout.rows)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or "shield: red bars = forbidden moves, shaded = unsafe", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
