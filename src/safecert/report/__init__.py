"""Reports of a black-box run: ``report.html`` (self-contained, PNGs embedded as base64, no
network), ``report.md`` and the ODD heatmap PNGs, written next to ``certificate.json``."""

from __future__ import annotations

from safecert.report.render import write_report

__all__ = ["write_report"]
