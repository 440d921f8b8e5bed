"""The one HTML page shell every report uses: self-contained (inline CSS and script, images as
``data:`` URIs, nothing fetched), a print stylesheet, and click-to-sort tables.

Status colours carry meaning and nothing else: green only for a statement that holds, red for a
failure, amber for anything undecided or unsupported (a passing cell whose preconditions fail).
Every coloured element also carries its status as text and as ``data-status``, so neither a
grey-scale print nor a colour-blind reader loses it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from pathlib import Path

# Okabe–Ito: distinguishable under deuteranopia and protanopia (tested with a simulated
# deuteranopia transform); each status also carries its word and ``data-status``.
PASS_COLOUR = "#009e73"  # bluish green
FAIL_COLOUR = "#d55e00"  # vermillion
WARN_COLOUR = "#f0e442"  # yellow
#: text on each status colour (contrast ≥ 4.5 against each)
INK = {"pass": "#000000", "fail": "#000000", "warn": "#000000"}

#: a token that is (or starts with) a number never breaks; longer non-numeric tokens (digests,
#: paths, commands) may break anywhere, inside a ``.brk`` span
_NUMBER = re.compile(r"[(\[]?[-+−]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?[)\],;:%]*")
BREAKABLE_LEN = 24
_BREAKS_AT = re.compile(r"[-–—/‐]")

#: the printed page: A4 with room for the running footer (page numbers, certificate digest)
PAGE_CSS = "size:A4;margin:14mm 12mm 18mm"

_CSS = f"""
body{{font-family:system-ui,sans-serif;margin:2em;color:#222;background:#fff;max-width:80em}}
table{{border-collapse:collapse;margin:.5em 0 1.5em}}
.scroll{{overflow-x:auto;max-width:100%;min-width:0}} .scroll>table{{margin-top:0}}
td,th{{border:1px solid #ccc;padding:.25em .6em;font-size:.9em;vertical-align:top;
  overflow-wrap:normal;word-break:normal;hyphens:manual}}
th{{background:#f0f0f0;text-align:left}}
.brk{{overflow-wrap:anywhere}} .nw{{white-space:nowrap}}
table.sortable th{{cursor:pointer}} table.sortable th:after{{content:" ⇅";color:#999}}
.pass{{background:{PASS_COLOUR};color:{INK["pass"]};font-weight:bold}}
.fail{{background:{FAIL_COLOUR};color:{INK["fail"]};font-weight:bold}}
.warn{{background:{WARN_COLOUR};color:{INK["warn"]};font-weight:bold}}
.verdict{{font-size:2em;font-weight:bold;padding:.2em .6em;display:inline-block;white-space:nowrap}}
.claim{{font-size:1.1em;margin:.6em 0 1em}}
.banner{{border:3px solid {FAIL_COLOUR};background:#fdecea;padding:.8em 1em;margin:1em 0}}
.banner table{{margin:.4em 0}}
.facts th{{width:16em}} .facts td{{font-family:ui-monospace,monospace;font-size:.82em}}
.heatmaps{{display:flex;flex-wrap:wrap;gap:1.2em}}
.heatmap td{{text-align:center;min-width:4.5em}} .heatmap caption{{font-size:.85em;text-align:left}}
.legend .pass,.legend .fail,.legend .warn,.legend .sq{{display:inline-block;padding:.1em .5em;margin-right:.5em}}
code{{font-size:.85em}} img{{border:1px solid #ddd;margin:.5em 0;max-width:100%;height:auto;box-sizing:border-box}}
.note{{color:#555;font-size:.9em}}
footer.digest{{margin-top:2em;color:#555;font-size:.8em}}
@media (max-width:40em){{
  body{{margin:.6em}}
  .facts th{{width:auto}}
  .facts,.facts tbody{{display:block}} .facts tr{{display:block;border-bottom:1px solid #ccc}}
  .facts th,.facts td{{display:block;border:0}}
  .verdict{{font-size:1.5em}}
}}
@page{{{PAGE_CSS}}}
@media print{{
  body{{margin:0;max-width:none;font-size:9pt}}
  .pass,.fail,.warn,.verdict,.banner{{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
  table.sortable th:after{{content:""}}
  .scroll{{overflow:visible}}
  td,th{{padding:.1em .25em;font-size:.8em}}
  .heatmap,img,figure,tr{{break-inside:avoid}} h2,h3{{break-after:avoid}}
  a{{color:#000;text-decoration:none}}
  footer.digest{{display:none}}
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


#: what :func:`html.escape` (``quote=True``) replaces, in its order; the stdlib module itself is not
#: imported: it loads the table of every named character reference (8 M instructions, about 0.5 %
#: of a one-episode ``safecert certify``), which escaping never reads
_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#x27;"))


def esc(value: object) -> str:
    """``str(value)`` as HTML text or a quoted attribute: the same characters as
    ``html.escape(text, quote=True)`` (tests/cli/test_report_escape.py)."""
    text = str(value)
    for char, entity in _ESCAPES:
        text = text.replace(char, entity)
    return text


def page(title: str, body: str, *, digest: str | None = None) -> str:
    """A complete, self-contained HTML document.

    Printed, every page carries a running footer: the certificate's SHA-256 (``digest``, when the
    report is of a written certificate) and "page i of n" (CSS ``@page`` margin boxes)."""
    stamp = f"certificate sha256 {digest}" if digest else "safecert report"
    if not re.fullmatch(r"[0-9a-f]{64}", digest or "0" * 64):
        raise ValueError(f"digest must be 64 hex digits, got {digest!r}")
    footer = (
        f"@page{{@bottom-left{{content:'{stamp}';font:7pt ui-monospace,monospace;color:#444}}"
        "@bottom-right{content:'page ' counter(page) ' of ' counter(pages);"
        "font:8pt system-ui,sans-serif;color:#444}}"
    )
    shown = f"<footer class='digest' id='digest'>{esc(stamp)}</footer>" if digest else ""
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{_CSS}{footer}</style></head><body>{body}{shown}"
        f"<script>{_SORT_JS}</script></body></html>"
    )


def breakable(value: object) -> str:
    """``value`` escaped, with every long non-numeric token (a digest, a path, a command) in a
    ``.brk`` span that may break anywhere; numbers and words never break inside (a short token
    with a hyphen, dash or slash, where a browser would break, is kept whole by a ``.nw`` span)."""
    parts = re.split(r"(\s+)", str(value))
    out = []
    for part in parts:
        if len(part) > BREAKABLE_LEN and not part.isspace() and not _NUMBER.fullmatch(part):
            out.append(f"<span class='brk'>{esc(part)}</span>")
        elif _BREAKS_AT.search(part):
            out.append(f"<span class='nw'>{esc(part)}</span>")
        else:
            out.append(esc(part))
    return "".join(out)


def scroll(inner: str) -> str:
    """``inner`` (a table) in a box that scrolls sideways on a narrow screen instead of squeezing
    the table to a character per line."""
    return f"<div class='scroll'>{inner}</div>"


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
    head = "".join(f"<th>{breakable(c)}</th>" for c in columns)
    body = []
    for k, row in enumerate(rows):
        status = row_status[k] if row_status is not None else None
        cells = []
        for _col, value in zip(
            columns, row, strict=True
        ):  # strict: a row of the wrong width is a bug
            text = breakable(value)
            cls = status_of(value)
            cells.append(f"<td class='{cls}'>{text}</td>" if cls else f"<td>{text}</td>")
        data = f" data-status='{status}'" if status else ""
        body.append(f"<tr{data}>{''.join(cells)}</tr>")
    heading = f"<h2>{breakable(title)}</h2>" if title else ""
    return (
        f"{heading}<div class='scroll'><table class='{classes}' {attrs}><thead><tr>{head}</tr>"
        f"</thead><tbody>{''.join(body)}</tbody></table></div>"
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
