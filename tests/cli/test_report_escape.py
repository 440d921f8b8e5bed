"""The reports' HTML escaping (:func:`safecert.report.html.esc`) is the standard library's
``html.escape(quote=True)``, character for character, without importing its entity table."""

from __future__ import annotations

import html
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from safecert.report.html import esc


@given(st.text() | st.sampled_from(["&amp;", "<a href='x'>\"&\"</a>", "&&<<>>''\"\"", ""]))
def test_esc_is_html_escape(text):
    assert esc(text) == html.escape(text, quote=True)


def test_esc_takes_any_object():
    assert esc(3.5) == "3.5" and esc(None) == "None"


def test_the_report_page_module_does_not_import_the_entity_table():
    code = "import sys, safecert.report.html; print('html.entities' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
