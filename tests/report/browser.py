"""Real headless Chromium for the report tests: the DOM after the page's scripts ran, text boxes
measured at a given width (screen or print media), screenshots and PDFs.

Without ``/usr/bin/chromium`` the tests skip with a reason — except under ``CI=true``, where they
fail: a CI run that renders nothing must not pass as a green one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ABSENT = "/usr/bin/chromium is absent (apt-get install -y chromium)"
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists() and not IN_CI, reason=ABSENT)
PDFTOTEXT = shutil.which("pdftotext")
needs_pdftotext = pytest.mark.skipif(
    PDFTOTEXT is None and not IN_CI, reason="pdftotext is absent (apt-get install -y poppler-utils)"
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium(args: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run Chromium with a fresh profile (removed afterwards) and a deadline."""
    assert CHROMIUM.exists(), ABSENT  # reached only under CI=true (needs_chromium skips otherwise)
    profile = Path(tempfile.mkdtemp(prefix="safecert-chromium-"))
    try:
        return subprocess.run(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            timeout=timeout_s,
            env={**os.environ, "HOME": str(profile)},
            check=False,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def dump_dom(page: Path) -> Node:
    """The page's DOM as Chromium built it (after scripts), parsed into a :class:`Node` tree."""
    done = chromium(["--dump-dom", Path(page).resolve().as_uri()])
    text = done.stdout.decode("utf-8")
    assert "<body" in text, done.stderr.decode()[-2000:]
    return parse(text)


def screenshot(page: Path, out: Path, size: str = "1280,1800") -> Path:
    chromium([f"--window-size={size}", f"--screenshot={out}", Path(page).resolve().as_uri()])
    assert out.is_file(), f"no screenshot of {page}"
    return out


#: A4 at 96 px/in less the report's @page margins (12 mm each side): the printed line width
PRINT_WIDTH_PX = round((210 - 24) / 25.4 * 96)

_MEASURE_JS = """
(function(){
  function run(){
    var broken=[], skip=/^(SCRIPT|STYLE|TITLE)$/;
    var walk=document.createTreeWalker(document.body,NodeFilter.SHOW_TEXT);
    var n, re=/\\S+/g, m;
    while((n=walk.nextNode())){
      var el=n.parentElement;
      if(!el||skip.test(el.tagName)||el.closest('.brk')) continue;
      if(el.getClientRects().length===0) continue;
      while((m=re.exec(n.data))){
        var r=document.createRange(); r.setStart(n,m.index); r.setEnd(n,m.index+m[0].length);
        var tops={}; Array.from(r.getClientRects()).forEach(function(b){
          if(b.width>0) tops[Math.round(b.top)]=1;});
        if(Object.keys(tops).length>1) broken.push({token:m[0],tag:el.tagName,
          cls:el.className,where:(el.closest('td,th,p,h1,h2,h3,figcaption,li,div')||el).tagName});
      }
    }
    var brk=Array.from(document.querySelectorAll('.brk')).map(function(e){return e.textContent;});
    var wide=Array.from(document.querySelectorAll('body *')).filter(function(t){
      var up=t.parentElement;
      return !(up&&up.closest('.scroll')) && t.getBoundingClientRect().right>innerWidth+1;}).map(
      function(t){return t.tagName+'.'+t.className+' '+(t.textContent||'').slice(0,60);});
    var tables=Array.from(document.querySelectorAll('table')).filter(function(t){
      return t.getBoundingClientRect().right>innerWidth+1;}).map(function(t){
      return (t.id||t.className||'table')+' '+Math.round(t.getBoundingClientRect().right);});
    parent.postMessage(JSON.stringify({width:innerWidth,tables:tables,scroll_width:
      document.documentElement.scrollWidth,broken:broken,brk:brk,wide:wide}),'*');
  }
  if(document.readyState==='complete') run(); else addEventListener('load',run);
})();
"""


@dataclass(frozen=True)
class Layout:
    """What a reader at ``width`` px sees of a page's text boxes."""

    width: int
    scroll_width: int
    broken: list[dict]  # tokens laid out on more than one line (outside ``.brk`` spans)
    brk: list[str]  # the text of the spans allowed to break anywhere
    overflowing: list[str]  # elements past the viewport's right edge, not in a scrolling box
    wide_tables: list[str]  # tables past the right edge even in a scrolling box (clipped on paper)


def measure(page: Path, width: int, *, print_media: bool = False) -> Layout:
    """Lay ``page`` out in real Chromium at ``width`` CSS px (an iframe of that width, since a
    headless window is at least 500 px wide) and measure every word's text boxes. With
    ``print_media`` the page's ``@media print`` rules apply, as when printed at that width."""
    tmp = Path(tempfile.mkdtemp(prefix="safecert-measure-"))
    try:
        text = Path(page).read_text(encoding="utf-8")
        if print_media:
            text = text.replace("@media print", "@media all")
        text = text.replace("</body>", f"<script>{_MEASURE_JS}</script></body>")
        (tmp / "page.html").write_text(text, encoding="utf-8")
        (tmp / "host.html").write_text(
            "<!DOCTYPE html><html><body style='margin:0'>"
            f"<iframe src='page.html' style='border:0;width:{width}px;height:3000px'></iframe>"
            "<script>addEventListener('message',function(e){"
            "document.body.setAttribute('data-layout',e.data);});</script></body></html>",
            encoding="utf-8",
        )
        done = chromium(
            [
                "--allow-file-access-from-files",
                "--virtual-time-budget=15000",
                "--window-size=1200,3000",
                "--dump-dom",
                (tmp / "host.html").as_uri(),
            ]
        )
        dom = parse(done.stdout.decode("utf-8"))
        body = dom.find_all("body")[0]
        assert "data-layout" in body.attrs, done.stderr.decode()[-2000:]
        got = json.loads(body.attrs["data-layout"])
        return Layout(
            got["width"], got["scroll_width"], got["broken"], got["brk"], got["wide"], got["tables"]
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def screenshot_at(page: Path, out: Path, width: int, height: int = 2400) -> Path:
    """A screenshot of ``page`` laid out ``width`` px wide (in an iframe, cropped to it)."""
    import matplotlib.image as mpimg

    tmp = Path(tempfile.mkdtemp(prefix="safecert-shot-"))
    try:
        shutil.copyfile(page, tmp / "page.html")
        (tmp / "host.html").write_text(
            "<!DOCTYPE html><html><body style='margin:0'><iframe src='page.html' "
            f"style='border:0;width:{width}px;height:{height}px'></iframe></body></html>",
            encoding="utf-8",
        )
        full = tmp / "full.png"
        chromium(
            [
                "--allow-file-access-from-files",
                "--virtual-time-budget=5000",
                "--hide-scrollbars",
                f"--window-size={max(width, 600)},{height}",
                f"--screenshot={full}",
                (tmp / "host.html").as_uri(),
            ]
        )
        assert full.is_file(), f"no screenshot of {page}"
        img = mpimg.imread(full)
        mpimg.imsave(out, img[:height, :width])
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def print_pdf(page: Path, out: Path) -> Path:
    """``page`` printed to PDF by Chromium (its own header and footer off: the page's apply)."""
    done = chromium(
        ["--no-pdf-header-footer", f"--print-to-pdf={out}", Path(page).resolve().as_uri()]
    )
    assert out.is_file() and out.read_bytes().startswith(b"%PDF"), done.stderr.decode()[-2000:]
    return out


def pdf_text(pdf: Path) -> str:
    """The PDF's text, laid out (poppler's pdftotext), pages separated by form feeds."""
    assert PDFTOTEXT, "pdftotext is absent (apt-get install -y poppler-utils)"
    done = subprocess.run(
        [PDFTOTEXT, "-layout", str(pdf), "-"], capture_output=True, timeout=60, check=True
    )
    return done.stdout.decode("utf-8")


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    parent: Node | None = None
    text_parts: list[str] = field(default_factory=list)
    content: list[str | Node] = field(default_factory=list, repr=False)  # in document order

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.content)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag: str | None = None, **attrs: str | bool) -> list[Node]:
        """Descendants with ``tag`` whose attributes match (``True``: present; ``_`` for ``-``)."""
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            ok = True
            for key, want in attrs.items():
                have = n.attrs.get(key.replace("_", "-"))
                ok = ok and (have is not None if want is True else have == want)
            if ok:
                out.append(n)
        return out

    def ancestor(self, tag: str) -> Node | None:
        n = self.parent
        while n is not None and n.tag != tag:
            n = n.parent
        return n


_VOID = {"meta", "img", "br", "hr", "input", "link"}


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#root", {})
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, parent=self.cur)
        self.cur.children.append(node)
        self.cur.content.append(node)
        if tag not in _VOID:
            self.cur = node

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text_parts.append(data)
        self.cur.content.append(data)


def parse(text: str) -> Node:
    b = _Builder()
    b.feed(text)
    return b.root
