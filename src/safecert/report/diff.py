"""What changed between two certificates (vendor v1 vs v2, a rerun, a re-judgement).

:func:`diff_certificates` compares two parsed certificates field by field and returns a typed
:class:`CertificateDiff`: the verdict; every parameter and every input/evidence digest that was
added, removed or changed; for black-box kinds, every grid cell (matched by its parameters, not
its index) whose counts, rates, bounds or decision changed, and the ODD cells gained and lost;
and every other ``result`` value that changed. Long numeric lists (a network's weights) are
compared by digest and reported as one change. Nothing is judged here: the diff states
differences, each certificate keeps its own guarantee.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from safecert.certificate import BlackboxCertificate, Certificate, SequentialCertificate
from safecert.report.facts import flatten
from safecert.report.html import esc, page, table, verdict_badge

#: lists longer than this are compared by digest (weights, long value tables)
LONG_LIST = 24
#: per-cell quantities compared
CELL_FIELDS = (
    "episodes",
    "failures",
    "failure_rate",
    "upper_bound",
    "decision",
    "return_kpi",
    "cost_kpi",
)


@dataclass(frozen=True)
class Change:
    """``path`` went from ``before`` to ``after`` (``None`` with ``added``/``removed``)."""

    path: str
    before: Any
    after: Any
    status: str  # "changed" | "added" | "removed" | "moved, same sha256"


@dataclass(frozen=True)
class CellChange:
    """A grid cell (by its parameters) whose judged values differ between A and B."""

    cell: str
    changes: list[Change]


@dataclass(frozen=True)
class CertificateDiff:
    a: str
    b: str
    kind: tuple[str, str]
    verdict: tuple[str, str]
    parameters: list[Change] = field(default_factory=list)
    digests: list[Change] = field(default_factory=list)
    cells: list[CellChange] = field(default_factory=list)
    odd_gained: list[str] = field(default_factory=list)
    odd_lost: list[str] = field(default_factory=list)
    result: list[Change] = field(default_factory=list)
    #: the sides ("A", "B") judged post hoc (``rejudge``): their ODD carries no guarantee
    posthoc: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return (
            self.kind[0] == self.kind[1]
            and self.verdict[0] == self.verdict[1]
            and not (self.parameters or self.digests or self.cells or self.result)
            and not (self.odd_gained or self.odd_lost)
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "identical": self.identical}


def _leaf(value: Any) -> Any:
    if isinstance(value, list) and len(value) > LONG_LIST:
        digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
        return f"<{len(value)} values, sha256 {digest}…>"
    return value


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    """Every leaf path (:func:`~safecert.report.facts.flatten`) that differs between ``a``, ``b``."""
    fa = {k: _leaf(v) for k, v in flatten(a)}
    fb = {k: _leaf(v) for k, v in flatten(b)}
    out = []
    for key in sorted(set(fa) | set(fb)):
        if key not in fb:
            out.append(Change(key, fa[key], None, "removed"))
        elif key not in fa:
            out.append(Change(key, None, fb[key], "added"))
        elif fa[key] != fb[key] or type(fa[key]) is not type(fb[key]):
            out.append(Change(key, fa[key], fb[key], "changed"))
    return out


def cell_key(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={params[k]}" for k in sorted(params)) or "nominal"


def _digests(cert: Certificate) -> dict[str, Any]:
    """Every input and evidence file keyed by its role (``input policy``), numbered when a role
    repeats, so that a renamed vendor file shows as one changed entry, not a removal and an
    addition."""
    out: dict[str, Any] = {}
    for kind, entries in (("input", cert.inputs.files), ("evidence", cert.inputs.evidence)):
        seen: dict[str, int] = {}
        for e in entries:
            n = seen[e.role] = seen.get(e.role, 0) + 1
            key = f"{kind} {e.role}" + (f" #{n}" if n > 1 else "")
            out[key] = (e.path, f"sha256 {e.sha256} ({e.digest_of})")
    return out


def compare_digests(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    """Files whose bytes changed, were added or removed; a file whose path moved but whose
    digest is equal is ``moved, same sha256`` (its contents did not change)."""
    out = []
    for key in list(a) + [k for k in b if k not in a]:
        if key not in b:
            out.append(Change(key, " ".join(a[key]), None, "removed"))
        elif key not in a:
            out.append(Change(key, None, " ".join(b[key]), "added"))
        elif a[key][1] != b[key][1]:
            out.append(Change(key, " ".join(a[key]), " ".join(b[key]), "changed"))
        elif a[key][0] != b[key][0]:
            out.append(Change(key, a[key][0], b[key][0], "moved, same sha256"))
    return out


def diff_certificates(
    a: Certificate, b: Certificate, a_name: str = "A", b_name: str = "B"
) -> CertificateDiff:
    """Compare certificate ``a`` (before) with ``b`` (after) — module docstring."""
    ra, rb = a.result.model_dump(mode="json"), b.result.model_dump(mode="json")
    cells: list[CellChange] = []
    gained: list[str] = []
    lost: list[str] = []
    blackbox = (BlackboxCertificate, SequentialCertificate)
    if isinstance(a, blackbox) and isinstance(b, blackbox):
        ca = {cell_key(c["params"]): c for c in ra.pop("cells")}
        cb = {cell_key(c["params"]): c for c in rb.pop("cells")}
        for key in list(ca) + [k for k in cb if k not in ca]:
            before = {f: ca[key][f] for f in CELL_FIELDS} if key in ca else {}
            after = {f: cb[key][f] for f in CELL_FIELDS} if key in cb else {}
            changes = compare(before, after)
            if changes:
                cells.append(CellChange(key, changes))
        odd_a = {cell_key(p) for p in ra.pop("odd")}
        odd_b = {cell_key(p) for p in rb.pop("odd")}
        gained, lost = sorted(odd_b - odd_a), sorted(odd_a - odd_b)
    return CertificateDiff(
        a=a_name,
        b=b_name,
        kind=(a.kind, b.kind),
        verdict=(a.verdict, b.verdict),
        parameters=compare(a.parameters, b.parameters),
        digests=compare_digests(_digests(a), _digests(b)),
        cells=cells,
        odd_gained=gained,
        odd_lost=lost,
        result=compare(ra, rb),
        posthoc=[
            name
            for name, cert in (("A", a), ("B", b))
            if getattr(cert.result, "rejudged", None) is not None
        ],
    )


def posthoc_warning(d: CertificateDiff) -> str:
    """Why cells gained by a re-judged side prove nothing (empty when no side is post hoc)."""
    if not d.posthoc:
        return ""
    sides = " and ".join(d.posthoc)
    return (
        f"{sides} {'is' if len(d.posthoc) == 1 else 'are'} re-judged post hoc: a threshold "
        "chosen after seeing the outcomes carries no guarantee, so ODD cells gained here are "
        "not certified unless that threshold was fixed in advance."
    )


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.6g}"
    return value if isinstance(value, str) else json.dumps(value)


def _sides(c: Change) -> tuple[str, str]:
    """Both sides of a change as text; a side where the path does not exist reads (absent)."""
    before = "(absent)" if c.status == "added" else _show(c.before)
    after = "(absent)" if c.status == "removed" else _show(c.after)
    return before, after


def diff_text(d: CertificateDiff) -> str:
    """The diff for people (one line per change)."""
    lines = [f"A: {d.a}", f"B: {d.b}"]
    if d.kind[0] != d.kind[1]:
        lines.append(f"kind: {d.kind[0]} -> {d.kind[1]}")
    verdict = "unchanged" if d.verdict[0] == d.verdict[1] else "changed"
    lines.append(f"verdict: {d.verdict[0]} -> {d.verdict[1]} ({verdict})")
    if d.identical:
        return "\n".join([*lines, "no differences"]) + "\n"
    for title, changes in (("parameters", d.parameters), ("digests", d.digests)):
        if changes:
            lines.append(f"{title}:")
            lines += [f"  {c.path}: {' -> '.join(_sides(c))} ({c.status})" for c in changes]
    if d.posthoc:
        lines.append(f"warning: {posthoc_warning(d)}")
    if d.odd_gained or d.odd_lost:
        lines.append(f"ODD cells gained ({len(d.odd_gained)}): " + "; ".join(d.odd_gained))
        lines.append(f"ODD cells lost ({len(d.odd_lost)}): " + "; ".join(d.odd_lost))
    if d.cells:
        lines.append("cells:")
        for cell in d.cells:
            what = ", ".join(f"{c.path} {' -> '.join(_sides(c))}" for c in cell.changes)
            lines.append(f"  [{cell.cell}] {what}")
    if d.result:
        lines.append("result:")
        lines += [f"  {c.path}: {' -> '.join(_sides(c))}" for c in d.result]
    return "\n".join(lines) + "\n"


def diff_html(d: CertificateDiff) -> str:
    """The diff as a self-contained HTML page."""
    body = [
        "<h1>safecert diff</h1>",
        table(
            ["", "certificate", "kind", "verdict"],
            [
                ["A (before)", d.a, d.kind[0], d.verdict[0]],
                ["B (after)", d.b, d.kind[1], d.verdict[1]],
            ],
            attrs="id='sides'",
        ),
        "<p>Verdict: </p>" + verdict_badge(d.verdict[0]) + " → " + verdict_badge(d.verdict[1]),
    ]
    if d.identical:
        body.append("<p id='identical'>No differences.</p>")
    cols = ["path", "A", "B", "change"]

    def rows(changes: list[Change]) -> list[list[str]]:
        return [[c.path, *_sides(c), c.status] for c in changes]

    for title, changes, key in (
        ("Parameters", d.parameters, "parameters"),
        ("Input and evidence digests", d.digests, "digests"),
    ):
        if changes:
            body.append(table(cols, rows(changes), title=title, sortable=True, attrs=f"id='{key}'"))
    if d.posthoc:
        body.append(
            f"<div class='banner' id='posthoc' data-posthoc='{esc(','.join(d.posthoc))}'>"
            f"<strong>Post hoc.</strong> {esc(posthoc_warning(d))}</div>"
        )
    if d.odd_gained or d.odd_lost:
        odd = [[c, "gained"] for c in d.odd_gained] + [[c, "lost"] for c in d.odd_lost]
        status = ["pass"] * len(d.odd_gained) + ["fail"] * len(d.odd_lost)
        body.append(
            table(
                ["cell", "ODD"],
                odd,
                title="ODD cells gained and lost",
                row_status=status,
                attrs="id='odd'",
            )
        )
    if d.cells:
        cell_rows = [[cell.cell, *r] for cell in d.cells for r in rows(cell.changes)]
        body.append(
            table(
                ["cell", *cols],
                cell_rows,
                title="Cells whose judgement changed",
                sortable=True,
                attrs="id='cells'",
            )
        )
    if d.result:
        body.append(
            table(
                cols,
                rows(d.result),
                title="Other result values",
                sortable=True,
                attrs="id='result'",
            )
        )
    return page(f"safecert diff: {esc(d.verdict[0])} → {esc(d.verdict[1])}", "".join(body))


def write_diff_html(d: CertificateDiff, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(diff_html(d), encoding="utf-8")
    return path
