"""The one HTML page shell every report uses: self-contained (inline CSS and script, images as
``data:`` URIs, nothing fetched), a print stylesheet, and click-to-sort tables.

Status colours carry meaning and nothing else: green only for a statement that holds, red for a
failure, amber for anything undecided or unsupported (a passing cell whose preconditions fail).
Every coloured element also carries its status as text and as ``data-status``, so neither a
grey-scale print nor a colour-blind reader loses it.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

PASS_COLOUR = "#2e9d57"
FAIL_COLOUR = "#d6453d"
WARN_COLOUR = "#e0a526"

_CSS = f"""
body{{font-family:system-ui,sans-serif;margin:2em;color:#222;background:#fff;max-width:80em}}
table{{border-collapse:collapse;margin:.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:.25em .6em;font-size:.9em;vertical-align:top;overflow-wrap:anywhere}}
th{{background:#f0f0f0;text-align:left}}
table.sortable th{{cursor:pointer}} table.sortable th:after{{content:" ⇅";color:#999}}
.pass{{background:{PASS_COLOUR};color:#fff;font-weight:bold}}
.fail{{background:{FAIL_COLOUR};color:#fff;font-weight:bold}}
.warn{{background:{WARN_COLOUR};color:#222;font-weight:bold}}
.verdict{{font-size:2em;font-weight:bold;padding:.2em .6em;display:inline-block}}
.claim{{font-size:1.1em;margin:.6em 0 1em}}
.banner{{border:3px solid {FAIL_COLOUR};background:#fdecea;padding:.8em 1em;margin:1em 0}}
.banner table{{margin:.4em 0}}
.facts th{{width:16em}} .facts td{{font-family:ui-monospace,monospace;font-size:.82em;word-break:break-all}}
.heatmaps{{display:flex;flex-wrap:wrap;gap:1.2em}}
.heatmap td{{text-align:center;min-width:4.5em}} .heatmap caption{{font-size:.85em;text-align:left}}
.legend span{{display:inline-block;padding:.1em .5em;margin-right:.5em}}
code{{font-size:.85em}} img{{border:1px solid #ddd;margin:.5em;max-width:100%}}
.note{{color:#555;font-size:.9em}}
@media print{{
  body{{margin:0;max-width:none;font-size:10pt}}
  .pass,.fail,.warn,.verdict,.banner{{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
  table.sortable th:after{{content:""}}
  table,img,.heatmap{{page-break-inside:avoid}} h2{{page-break-after:avoid}}
  a{{color:#000;text-decoration:none}}
}}
"""

_SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var b=t.tBodies[0],rows=Array.from(b.rows),asc=th.dataset.dir!=='asc';
      t.querySelectorAll('th').forEach(function(h){delete h.dataset.dir;});
      th.dataset.dir=asc?'asc':'desc';
      function key(r){var c=r.cells[i],v=c.dataset.sort!==undefined?c.dataset.sort:c.textContent;
        var n=parseFloat(v);return isNaN(n)||!/^\\s*-?[0-9.]/.test(v)?v:n;}
      rows.sort(function(x,y){var a=key(x),c=key(y);
        var r=(typeof a===typeof c)?(a<c?-1:a>c?1:0):(typeof a==='number'?-1:1);return asc?r:-r;});
      rows.forEach(function(r){b.appendChild(r);});
    });
  });
});
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def page(title: str, body: str) -> str:
    """A complete, self-contained HTML document."""
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>{body}"
        f"<script>{_SORT_JS}</script></body></html>"
    )


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    sortable: bool = False,
    css: str = "",
    row_status: Sequence[str | None] | None = None,
    attrs: str = "",
) -> str:
    """An HTML table of text cells (every value escaped).

    A cell whose text is a verdict word (PASS/FAIL/…) is coloured by :func:`status_of`;
    ``row_status`` puts ``data-status`` on each row for machine readers.
    """
    classes = " ".join(c for c in (css, "sortable" if sortable else "") if c)
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for k, row in enumerate(rows):
        status = row_status[k] if row_status is not None else None
        cells = []
        for _col, value in zip(
            columns, row, strict=True
        ):  # strict: a row of the wrong width is a bug
            text = esc(value)
            cls = status_of(value)
            cells.append(f"<td class='{cls}'>{text}</td>" if cls else f"<td>{text}</td>")
        data = f" data-status='{status}'" if status else ""
        body.append(f"<tr{data}>{''.join(cells)}</tr>")
    heading = f"<h2>{esc(title)}</h2>" if title else ""
    return (
        f"{heading}<table class='{classes}' {attrs}><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def status_of(word: object) -> str:
    """CSS status of a verdict word: green only for words that claim something holds."""
    if not isinstance(word, str):
        return ""
    if word in ("PASS", "SAFE"):
        return "pass"
    if word == "FAIL":
        return "fail"
    if word in ("INCONCLUSIVE", "UNDECIDED", "UNKNOWN", "BOUND"):
        return "warn"
    return ""


def verdict_badge(verdict: str, suffix: str = "") -> str:
    cls = status_of(verdict) or "warn"
    return f"<div class='verdict {cls}' data-verdict='{esc(verdict)}'>{esc(verdict)}{esc(suffix)}</div>"


def embed_png(path: Path, alt: str) -> str:
    """An ``<img>`` holding the PNG at ``path`` as a ``data:`` URI (nothing is fetched)."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"<img alt='{esc(alt)}' src='data:image/png;base64,{data}'>"
