"""``report.html`` of a shield certificate, from the certificate and the evidence beside it
(``model.toml`` copy; the shield itself is ``result.allowed``).

Sections: verdict and claim; facts panel; for grid-shaped models (a ``[layout]`` table) a map
with a legend — unsafe cells, start S and goal G, every state reachable from the start under the
shield marked, every forbidden move drawn as a red fence on the side it would leave by, V̄_T in
each live cell; the rows short of their committed budget (vacuous confidence sets); and the
per-state table (V̄_T, reachable, permitted, forbidden), sortable.

*Reachable* is graph reachability over the declared successor sets K(s, a) of the permitted
actions within the model's horizon T: a state not marked cannot be visited by any controller the
shield admits, whatever the true probabilities; a marked one may be.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from safecert.certificate import ShieldCertificate
from safecert.report.facts import claim, digest_of, facts_html
from safecert.report.html import esc, page, table, verdict_badge

if TYPE_CHECKING:
    from safecert.shield.model import ShieldModel

MODEL_COPY = "model.toml"
_SIDES = {(-1, 0): "top", (1, 0): "bottom", (0, -1): "left", (0, 1): "right"}


def reachable_states(model: ShieldModel, allowed: np.ndarray, horizon: int) -> np.ndarray:
    """Bool array over states: reachable from ``model.initial`` in at most ``horizon`` calls of
    permitted actions, following every declared successor (unsafe states are absorbing)."""
    seen = np.zeros(model.n_states, dtype=bool)
    seen[model.initial] = True
    frontier = [model.initial]
    for _ in range(horizon):
        nxt = []
        for s in frontier:
            if model.unsafe[s]:
                continue
            for a in np.flatnonzero(allowed[s]):
                for s2 in model.successors(s, int(a)):
                    if 0 <= s2 < model.n_states and not seen[s2]:
                        seen[s2] = True
                        nxt.append(int(s2))
        if not nxt:
            break
        frontier = nxt
    return seen


def _map_html(
    model: ShieldModel, allowed: np.ndarray, values: dict[str, float], reach: np.ndarray
) -> str:
    layout = model.spec.layout
    if layout is None or not layout.moves:
        return "<p class='note'>The model has no [layout] table: no map (see the table below).</p>"
    index = {lab: i for i, lab in enumerate(model.labels)}
    rows = []
    for r in range(layout.rows):
        tds = []
        for c in range(layout.cols):
            label = layout.cell_format.format(row=r, col=c)
            s = index.get(label)
            if s is None:
                tds.append("<td class='void'></td>")
                continue
            fences = [
                _SIDES[(move[0], move[1])]
                for name, move in layout.moves.items()
                if name in model.actions
                and (move[0], move[1]) in _SIDES
                and not allowed[s, model.actions.index(name)]
            ]
            kind = "unsafe" if model.unsafe[s] else "live"
            mark = "S" if s == model.initial else ""
            if model.goal is not None and model.goal[s]:
                mark += "G"
            style = "".join(f"border-{side}:4px solid #c9302c;" for side in fences)
            dot = "●" if reach[s] else ""
            value = "" if model.unsafe[s] else f"{values.get(label, 1.0):.2f}"
            tds.append(
                f"<td class='sq {kind}{' reach' if reach[s] else ''}' style='{style}' "
                f"data-state='{esc(label)}' data-kind='{kind}' "
                f"data-reachable='{str(bool(reach[s])).lower()}' "
                f"data-fences='{','.join(fences)}' title='{esc(label)}'>"
                f"<b>{mark}</b>{dot}<br><small>{value}</small></td>"
            )
        rows.append(f"<tr>{''.join(tds)}</tr>")
    legend = (
        "<p class='legend' id='shield-legend'><span class='sq unsafe'>&nbsp;&nbsp;</span>unsafe "
        "<b>S</b> start <b>G</b> goal ● reachable under the shield within T "
        "<span style='border-bottom:4px solid #c9302c'>red edge</span> forbidden move "
        "(drawn on the side it would leave by); number: V̄_T of the state</p>"
    )
    css = (
        "<style>table.shieldmap td.sq{width:3.2em;height:3.2em;text-align:center;"
        "border:1px solid #bbb;padding:0}td.unsafe,span.unsafe{background:repeating-linear-"
        "gradient(45deg,#f3c3c0,#f3c3c0 4px,#fff 4px,#fff 8px)}td.reach{background:#e6f2ff}"
        "td.void{background:#eee}</style>"
    )
    return (
        f"{css}<h2>Shield map</h2>{legend}<div class='scroll'><table class='shieldmap' "
        f"id='shield-map'>{''.join(rows)}</table></div>"
    )


def render_shield_report(cert: ShieldCertificate, cert_path: Path) -> str:
    """The HTML page of a shield certificate (module docstring)."""
    from safecert.shield.model import load_model
    from safecert.shield.report import allowed_from_json

    folder = Path(cert_path).parent
    r = cert.result
    model = load_model(folder / MODEL_COPY)
    allowed = allowed_from_json(model, r.allowed, field="result.allowed")
    reach = reachable_states(model, allowed, r.horizon)
    short = [row for row in r.rows if row.vacuous]
    per_state = []
    status = []
    for s in np.flatnonzero(model.live):
        label = model.labels[s]
        ok = [model.actions[a] for a in np.flatnonzero(allowed[s])]
        no = [model.actions[a] for a in np.flatnonzero(~allowed[s])]
        per_state.append(
            [
                label,
                f"{r.values.get(label, 1.0):.5f}",
                "yes" if reach[s] else "no",
                " ".join(ok),
                " ".join(no) or "—",
            ]
        )
        status.append("reachable" if reach[s] else "unreachable")
    reached_unsafe = [model.labels[s] for s in np.flatnonzero(reach & model.unsafe)]
    body = [
        f"<h1>safecert shield certificate: {esc(model.name)}</h1>",
        verdict_badge(cert.verdict),
        f"<p class='claim' id='claim'>{esc(claim(cert))}</p>",
        _map_html(model, allowed, r.values, reach),
        "<p id='reach-note'>"
        + (
            f"Unsafe states reachable under the shield: {esc(', '.join(reached_unsafe))} "
            "(their probability is what V̄_T bounds)."
            if reached_unsafe
            else "No unsafe state is reachable under the shield within T."
        )
        + "</p>",
        table(
            ["state", "action", "n0 (budget)", "visits", "β"],
            [[row.state, row.action, str(row.n0), str(row.visits), "vacuous"] for row in short],
            title=f"Rows short of budget ({len(short)} of {r.stochastic_rows} stochastic rows; "
            "their confidence sets are every distribution on K(s,a))",
            sortable=True,
            attrs="id='short-rows'",
        ),
        table(
            ["state", "V̄_T", "reachable", "permitted", "forbidden"],
            per_state,
            title="Per-state V̄_T and shield",
            sortable=True,
            row_status=status,
            attrs="id='per-state'",
        ),
        facts_html(cert, cert_path),
    ]
    return page(f"safecert shield: {cert.verdict}", "".join(body), digest=digest_of(cert_path))
