"""``index.html`` over a folder of certificates: a team's certification history, no server.

Every ``certificate.json`` below the folder is read with the strict parser; each row states its
kind, verdict, date, signer (from ``CERT.sig``; the signature is not checked here) and links to the
certificate and, when present, its ``report.html``, by relative path so the folder can be moved
or archived. A file that does not parse is listed with the reason instead of being skipped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from safecert.certificate import read_certificate
from safecert.errors import ConfigError, DataError
from safecert.report.facts import claim, signature_status
from safecert.report.html import breakable, esc, page, status_of

CERTIFICATE = "certificate.json"


@dataclass(frozen=True)
class IndexEntry:
    """One certificate found (``error`` set, and the rest empty, when it does not parse)."""

    path: str
    kind: str
    verdict: str
    created_utc: str
    signature: str
    claim: str
    report: str | None
    error: str | None
    #: judged post hoc (``rejudge``): listed as such, never as a plain verdict
    posthoc: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def build_index(runs_dir: Path) -> list[IndexEntry]:
    """Every certificate under ``runs_dir``, newest first (unreadable ones last)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise ConfigError(
            f"{runs_dir} is not a folder", field="RUNS_DIR", fix="pass a folder of runs"
        )
    entries = []
    for path in sorted(runs_dir.rglob(CERTIFICATE)):
        rel = path.relative_to(runs_dir).as_posix()
        report = path.parent / "report.html"
        report_rel = report.relative_to(runs_dir).as_posix() if report.is_file() else None
        try:
            cert = read_certificate(path)
        except DataError as exc:
            entries.append(IndexEntry(rel, "", "", "", "", "", report_rel, str(exc)))
            continue
        entries.append(
            IndexEntry(
                rel,
                cert.kind,
                cert.verdict,
                cert.created_utc,
                signature_status(path),
                claim(cert),
                report_rel,
                None,
                getattr(cert.result, "rejudged", None) is not None,
            )
        )
    return sorted(entries, key=lambda e: (e.error is None, e.created_utc), reverse=True)


def _run(path: str) -> str:
    """The run's folder, relative to the index (``.`` for a certificate at the top)."""
    return str(Path(path).parent)


def index_html(entries: list[IndexEntry], title: str) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("date (UTC)", "run", "kind", "verdict", "claim", "signature", "links")
    )
    rows = []
    for e in entries:
        links = f"<a href='{esc(e.path)}'>certificate</a>"
        if e.report:
            links += f" · <a href='{esc(e.report)}'>report</a>"
        if e.error:
            rows.append(
                f"<tr data-status='warn' data-path='{esc(e.path)}'><td>—</td>"
                f"<td>{breakable(_run(e.path))}</td><td>—</td>"
                f"<td class='warn'>UNREADABLE</td><td>{breakable(e.error)}</td><td>—</td><td>{links}</td></tr>"
            )
            continue
        cls = status_of(e.verdict) or "warn"
        posthoc = " <span class='nw'>(re-judged post hoc)</span>" if e.posthoc else ""
        cls = "warn" if e.posthoc and cls == "pass" else cls  # a post-hoc PASS certifies nothing
        rows.append(
            f"<tr data-status='{cls}' data-path='{esc(e.path)}'><td>{breakable(e.created_utc)}</td>"
            f"<td>{breakable(_run(e.path))}</td>"
            f"<td>{esc(e.kind)}</td><td class='{cls}'>{esc(e.verdict)}{posthoc}</td><td>{breakable(e.claim)}</td>"
            f"<td>{breakable(e.signature)}</td><td>{links}</td></tr>"
        )
    body = (
        f"<h1>safecert certificates in {breakable(title)}</h1><p>{len(entries)} certificates, newest "
        "first; click a column to sort. Signatures are named, not checked: run "
        "<code class='nw'>safecert verify CERT --pubkey PUB</code>.</p>"
        f"<div class='scroll'><table class='sortable' id='index'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    return page(f"safecert: {title}", body)


def write_index(entries: list[IndexEntry], runs_dir: Path, out: Path | None = None) -> Path:
    """Write the index page (default ``runs_dir/index.html``); links are relative to it."""
    runs_dir = Path(runs_dir)
    out = Path(out) if out is not None else runs_dir / "index.html"
    if out.resolve().parent != runs_dir.resolve():
        raise ConfigError(
            f"{out} is outside {runs_dir}",
            field="--out",
            fix="write the index into RUNS_DIR so that its relative links resolve",
        )
    out.write_text(index_html(entries, str(runs_dir)), encoding="utf-8")
    return out
