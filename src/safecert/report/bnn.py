"""``report.html`` of a BNN certificate, from the certificate and the evidence beside it.

Sections: verdict and claim; the invariant figure (``invariant.png``, the engine's picture of
``g = 0`` over the closed-loop field with X0 and Xu drawn, embedded; for systems with more than two
state variables, or no invariant, the reason there is none); the three conditions of the last
verifier answer; the ε search history (every ε tried, in order, with its verdict); the
counterexamples CEGIS met; runtimes; facts panel.
"""

from __future__ import annotations

import json
from pathlib import Path

from safecert.bnn.result import CounterexampleOutcome
from safecert.certificate import BnnCertificate
from safecert.report.facts import claim, digest_of, facts_html
from safecert.report.html import embed_png, esc, page, table, verdict_badge

PLOT_FILE = "invariant.png"


def _outcome(value: str | CounterexampleOutcome) -> tuple[str, str]:
    """(text, status word) of one condition's outcome."""
    if isinstance(value, str):
        return value, "PASS" if value == "infeasible" else "UNKNOWN"
    return f"counterexample {value.counterexample.model_dump(mode='json')}", "FAIL"


def _sets(cert: BnnCertificate) -> str:
    """X0, Xu and the box B as the parameters declare them (Xu may lie outside the drawn box)."""
    sets = cert.parameters.get("sets")
    if not isinstance(sets, dict):
        return "<p class='note' id='sets'>The parameters state no [sets] table.</p>"

    def shown(value: object) -> str:
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if v is not None}
        return esc(json.dumps(value, sort_keys=True))

    items = "".join(
        f"<li><b>{name}</b>: <code>{shown(sets.get(key))}</code></li>"
        for name, key in (("B (verification box)", "domain"), ("X0", "initial"), ("Xu", "unsafe"))
    )
    return (
        f"<ul id='sets'>{items}</ul><p class='note'>An Xu given as <code>outside</code> B lies "
        "beyond the drawn box: its edge is the picture's frame.</p>"
    )


def figure_legend(cert: BnnCertificate) -> str:
    """What every mark of ``invariant.png`` means, and whether its filled region is proved."""
    proved = cert.verdict == "SAFE"
    fill = (
        "the proved invariant Inv (g ≥ 0)"
        if proved
        else "the last candidate g ≥ 0, NOT an invariant: the verifier did not prove it"
    )
    items = [
        ("light green fill", fill),
        ("orange fill", "g < 0 (outside the candidate)"),
        ("black line", "g = 0"),
        ("blue outline", "X0, the initial set (each polytope piece by its bounding box)"),
        ("red outline, hatched", "Xu, the unsafe set"),
        (
            "red × and line",
            "a counterexample x met during CEGIS and, for closure, its successor x'",
        ),
        ("purple dots", "a sampled closed-loop trajectory, when one is drawn"),
        ("grey arrows", "the closed-loop field at the mean weights"),
    ]
    rows = "".join(f"<li><b>{esc(mark)}</b>: {esc(text)}</li>" for mark, text in items)
    return f"<ul class='legend' id='figure-legend' data-proved='{str(proved).lower()}'>{rows}</ul>"


def _figure(cert: BnnCertificate, folder: Path) -> str:
    path = folder / PLOT_FILE
    if path.is_file():
        warning = (
            ""
            if cert.verdict == "SAFE"
            else "<div class='banner' id='candidate-warning'><strong>Not certified.</strong> "
            f"The verdict is {esc(cert.verdict)}: the filled region below is the last candidate "
            "the learner proposed, not an invariant; nothing is claimed about it.</div>"
        )
        alt = (
            "invariant g = 0 (Inv filled), X0, Xu and counterexamples"
            if cert.verdict == "SAFE"
            else "last candidate g = 0 (not proved), X0, Xu and counterexamples"
        )
        return (
            "<h2>"
            + ("Invariant" if cert.verdict == "SAFE" else "Last candidate (not proved)")
            + "</h2>"
            + warning
            + embed_png(path, alt)
            + figure_legend(cert)
            + _sets(cert)
        )
    reason = (
        "no invariant was found (nothing to draw)"
        if cert.result.invariant is None
        else "the system is not a 2-D continuous one: no planar picture"
    )
    return (
        f"<h2>Invariant</h2><p class='note' id='no-figure'>No figure: {esc(reason)}.</p>"
        + _sets(cert)
    )


def reason_note(cert: BnnCertificate) -> str:
    """When the run's reason names a condition whose last completed answer the table shows
    differently (``closure: timeout`` beside a closure counterexample), say which is which."""
    r = cert.result
    if cert.verdict == "SAFE":
        return ""
    named = [
        name
        for name in ("closure", "initial", "unsafe")
        if f"{name}:" in r.reason and not isinstance(getattr(r.checks, name), str)
    ]
    if not named:
        return ""
    return (
        f"<p class='note' id='reason-note'>The run stopped because {esc(r.reason)}: that is its "
        f"last attempt. The table shows the last answer the verifier completed, where "
        f"{esc(', '.join(named))} had a counterexample (found against an earlier candidate).</p>"
    )


def render_bnn_report(cert: BnnCertificate, cert_path: Path) -> str:
    """The HTML page of a BNN certificate (module docstring)."""
    r = cert.result
    checks = [
        [name, *_outcome(getattr(r.checks, name))] for name in ("closure", "initial", "unsafe")
    ]
    search = [
        [
            str(i),
            f"{row.epsilon:g}",
            row.unit,
            row.verdict,
            row.reason,
            str(row.iterations),
            f"{row.runtime_s:.2f}",
        ]
        for i, row in enumerate(r.search)
    ]
    counter = [
        [c.condition, str(c.x), "—" if c.x_next is None else str(c.x_next)]
        for c in r.counterexamples
    ]
    runtimes = (
        [[k, f"{v:.3f}"] for k, v in r.runtimes_s.model_dump().items()] if r.runtimes_s else []
    )
    body = [
        f"<h1>safecert BNN certificate: {esc(r.system)}</h1>",
        verdict_badge(cert.verdict),
        f"<p class='claim' id='claim'>{esc(claim(cert))}</p>",
        _figure(cert, Path(cert_path).parent),
        table(
            ["condition", "outcome", "status"],
            checks,
            title="Conditions of the last verifier answer (SAFE needs all three infeasible)",
            attrs="id='checks'",
        ),
        reason_note(cert),
        table(
            ["#", "ε", "unit", "verdict", "reason", "iterations", "runtime s"],
            search,
            title=f"ε search history ({len(search)} tried, in order)",
            sortable=True,
            attrs="id='search'",
        ),
        table(
            ["condition", "x", "x'"],
            counter,
            title=f"Counterexamples met during CEGIS ({len(counter)}; each was fed back to the "
            "learner"
            + (
                ")"
                if cert.verdict == "SAFE"
                else "; the last one may refute the final candidate, which is not certified)"
            ),
            attrs="id='counterexamples'",
        ),
        table(["clock", "seconds"], runtimes, title="Runtimes (descriptive, not re-derived)"),
        facts_html(cert, cert_path),
    ]
    return page(f"safecert bnn: {cert.verdict}", "".join(body), digest=digest_of(cert_path))
