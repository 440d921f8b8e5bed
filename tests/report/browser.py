"""Real headless Chromium for the report tests: the DOM after the page's scripts ran, and
screenshots. Tests skip with a reason when ``/usr/bin/chromium`` is absent."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install -y chromium)"
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


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    parent: Node | None = None
    text_parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.text_parts) + "".join(c.text for c in self.children)

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


def parse(text: str) -> Node:
    b = _Builder()
    b.feed(text)
    return b.root
