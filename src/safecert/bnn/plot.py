"""The paper's Fig. 2 for 2-D systems: the invariant's boundary over the closed-loop vector field.

One PNG: the verification box ``B``; the region ``g ≥ 0`` filled bluish green when it is a proved
invariant and neutral sand when it is only the last candidate (an UNKNOWN run proves nothing);
the boundary ``g = 0`` (black, dashed for a candidate); the vector field ``f(x, π_μ(x)) − x`` of
the mean policy (grey arrows); ``X0`` (blue outline); ``X_u ∩ B`` (vermillion hatching); every
counterexample the CEGIS loop met (black crosses; for closure, a thin line to its successor); and,
where the run met one, a replayed unsafe trajectory from ``X0`` (reddish-purple path: no invariant
exists at its ε). Colours are Okabe–Ito's (distinguishable with the common colour-vision
deficiencies); every mark is in the legend. Systems
with more than two state variables have no such picture (:func:`can_plot`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from safecert.bnn.dynamics import System
from safecert.bnn.networks import ReluNetwork
from safecert.document import durable_write


def can_plot(bench: System) -> bool:
    return bench.state_dim == 2 and not bench.integer


def plot_invariant(
    path: Path,
    bench: System,
    policy: ReluNetwork,
    g: ReluNetwork | None,
    counterexamples: Sequence[tuple[np.ndarray, np.ndarray | None]] = (),
    *,
    trajectory: Sequence[np.ndarray] = (),
    trajectory_label: str = "unsafe trajectory",
    title: str = "",
    grid: int = 300,
    proved: bool = False,
) -> Path:
    """Write the picture to ``path`` (PNG) and return it; ``counterexamples`` are ``(x, x')``
    pairs (``x'`` None for initial/unsafe witnesses); ``trajectory`` the states of a replayed
    unsafe trajectory (drawn when given); ``g`` None draws no invariant (an attempt that ended on
    such a trajectory trained none); ``proved``: ``g`` is the certified invariant (else it is drawn
    as an unproved candidate). Raises ``ValueError`` for non-2-D systems."""
    if not can_plot(bench):
        raise ValueError(f"{bench.name} is not a 2-D continuous system")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    lo, hi = bench.box.lo, bench.box.hi
    xs = np.linspace(lo[0], hi[0], grid)
    ys = np.linspace(lo[1], hi[1], grid)
    xx, yy = np.meshgrid(xs, ys)
    pts = np.stack([xx.ravel(), yy.ravel()], axis=1)
    unsafe = bench.in_unsafe(pts).reshape(xx.shape)

    fig, ax = plt.subplots(figsize=(6.4, 5.6), dpi=120)
    fills: list[Patch] = []
    if g is not None:
        gz = g.forward(pts)[:, 0].reshape(xx.shape)
        inside = "#8fd9c0" if proved else "#ddd5c7"  # Okabe–Ito bluish green, or neutral sand
        ax.contourf(xx, yy, gz, levels=[-np.inf, 0.0, np.inf], colors=["#ffffff", inside])
        ax.contour(
            xx, yy, gz, levels=[0.0], colors="black", linewidths=1.5,
            linestyles="solid" if proved else "dashed",
        )  # fmt: skip
        what = "Inv = {g ≥ 0}, proved" if proved else "g ≥ 0: last candidate, NOT proved"
        fills.append(Patch(facecolor=inside, edgecolor="black", label=what))
    ax.contourf(xx, yy, unsafe.astype(float), levels=[0.5, 1.5], colors="none", hatches=["///"])
    ax.contour(xx, yy, unsafe.astype(float), levels=[0.5], colors="#D55E00", linewidths=1.0)
    fills.append(Patch(facecolor="none", edgecolor="#D55E00", hatch="///", label="X_u"))

    qx = np.linspace(lo[0], hi[0], 21)
    qy = np.linspace(lo[1], hi[1], 21)
    qxx, qyy = np.meshgrid(qx, qy)
    q = np.stack([qxx.ravel(), qyy.ravel()], axis=1)
    d = bench.step(q, policy.forward(q)) - q
    ax.quiver(
        q[:, 0], q[:, 1], d[:, 0], d[:, 1], color="#555555", angles="xy", width=0.0025,
        label="f(x, π_μ(x)) − x",
    )  # fmt: skip

    for k, piece in enumerate(bench.initial.pieces):
        i0 = piece.box  # a polytope piece is drawn by its bounding box
        ax.add_patch(
            Rectangle(
                (i0.lo[0], i0.lo[1]),
                i0.hi[0] - i0.lo[0],
                i0.hi[1] - i0.lo[1],
                fill=False,
                edgecolor="#0072B2",
                linewidth=1.8,
                label="X0" if k == 0 else None,
            )
        )
    for k, (x, x_next) in enumerate(counterexamples):
        ax.plot(
            x[0],
            x[1],
            "x",
            color="black",
            markersize=6,
            label="counterexample" if k == 0 else None,
        )
        if x_next is not None:
            ax.plot([x[0], x_next[0]], [x[1], x_next[1]], "-", color="black", linewidth=0.6)
    if len(trajectory):
        path_xy = np.asarray(trajectory, dtype=float)
        ax.plot(
            path_xy[:, 0],
            path_xy[:, 1],
            "o-",
            color="#CC79A7",
            linewidth=1.6,
            markersize=3.5,
            label=trajectory_label,
        )
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    names = bench.dynamics.state
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    ax.set_title(title or f"{bench.name}: g = 0, X0 (blue), X_u (hatched)")
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=fills + handles, loc="upper right", fontsize=7, framealpha=0.9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return durable_write(Path(path), buf.getvalue())
