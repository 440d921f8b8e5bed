"""Render a black-box certificate as HTML and Markdown (the same tables, two formats).

Sections: verdict and setup; the Table-2 breakdown per cell (task-only, safety-only and unified
failure rates with their Bonferroni Clopper–Pearson upper bounds, PASS/FAIL); Hoeffding bounds
(return LCB, cost UCB); ODD heatmaps; observation ranges (estimated ones marked); and a
counterexample table of failing episodes, each with its seed and the command that replays it.
"""

from __future__ import annotations

import base64
import html
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from safecert.blackbox.grid import cell_label
from safecert.blackbox.jobs import EpisodeRecord
from safecert.certificate import BlackboxCertificate, SequentialCertificate
from safecert.report.odd import odd_maps

Certificate = BlackboxCertificate | SequentialCertificate
MAX_COUNTEREXAMPLES = 25


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def tables(
    cert: Certificate, records: Sequence[EpisodeRecord], config_path: Path | None, out_dir: Path
) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of every table in the report."""
    res = cert.result.model_dump(mode="json")
    cells = res["cells"]
    breakdown = [
        [
            str(i),
            cell_label(c["params"]),
            str(c["episodes"]),
            _fmt(c["task_failure_rate"]),
            _fmt(c["task_upper_bound"]),
            _fmt(c["safety_failure_rate"]),
            _fmt(c["safety_upper_bound"]),
            _fmt(c["failure_rate"]),
            _fmt(c["upper_bound"]),
            c["decision"],
        ]
        for i, c in enumerate(cells)
    ]
    hoeff = [
        [
            str(i),
            cell_label(c["params"]),
            _fmt(c["return_kpi"]["mean"]),
            _fmt(c["return_kpi"]["bound"]),
            _fmt(c["cost_kpi"]["mean"]),
            _fmt(c["cost_kpi"]["bound"]),
        ]
        for i, c in enumerate(cells)
    ]
    budget = res["budget"]
    failing = [r for r in records if (not r.goal) or r.cost > budget]
    config = shlex.quote(str(config_path)) if config_path else "CONFIG.toml"
    counter = []
    for r in failing[:MAX_COUNTEREXAMPLES]:
        why = r.failure_reason or ", ".join(
            w
            for w, bad in (("task", not r.goal), (f"cost {r.cost:g} > {budget:g}", r.cost > budget))
            if bad
        )
        counter.append(
            [
                f"{r.cell}:{r.index}",
                str(r.seed),
                why,
                _fmt(r.ret),
                _fmt(r.cost),
                str(r.steps),
                f"safecert certify {config} --replay {r.cell}:{r.index} --out {shlex.quote(str(out_dir))}",
            ]
        )
    out = [
        (
            "Reliability per cell (Table-2 breakdown; bounds are Clopper–Pearson at δ/M)",
            [
                "cell",
                "params",
                "N",
                "task rate",
                "task UB",
                "safety rate",
                "safety UB",
                "unified rate",
                "unified UB",
                "decision",
            ],
            breakdown,
        ),
        (
            "Performance and cost (Hoeffding at δ/M)",
            ["cell", "params", "return mean", "return LCB", "cost mean", "cost UCB"],
            hoeff,
        ),
        (
            f"Counterexamples (first {min(len(failing), MAX_COUNTEREXAMPLES)} of {len(failing)} failing episodes)",
            ["cell:index", "seed", "why", "return", "cost", "steps", "replay"],
            counter,
        ),
    ]
    ranges = res.get("obs_ranges")
    if ranges:
        rows = [
            [str(d), _fmt(lo), _fmt(hi), _fmt(span), "estimated" if est else "space bounds"]
            for d, (lo, hi, span, est) in enumerate(
                zip(
                    ranges["low"], ranges["high"], ranges["range"], ranges["estimated"], strict=True
                )
            )
        ]
        out.append(
            (
                f"Observation ranges Δ_s ({ranges['episodes']} nominal rollouts for estimated dims)",
                ["dim", "low", "high", "range", "source"],
                rows,
            )
        )
    return out


def _summary(cert: Certificate) -> list[tuple[str, str]]:
    res, p = cert.result.model_dump(mode="json"), cert.parameters
    s1 = res["stage1"]
    return [
        ("verdict", cert.verdict),
        ("policy", p["policy"]),
        ("environment", p["env"]),
        ("episodes per cell", str(p["episodes"])),
        ("seed", str(cert.seed)),
        (
            "spec",
            f"budget d = {res['budget']}, p* = {res['p_star']}, confidence {res['confidence']} "
            f"family-wise over M = {res['family_size']} cells (δ' = {res['delta_cell']:.5g})",
        ),
        ("goal", res["goal"]),
        (
            "stage 1 (nominal)",
            f"{s1['decision']}: {s1['failures']}/{s1['episodes']} failures, "
            f"upper bound {s1['upper_bound']:.4f}",
        ),
        ("ODD", f"{len(res['odd'])} of {len(res['cells'])} cells pass"),
        ("oracle failures", str(res["oracle_failures"]["total"])),
        ("rule", res["verdict_rule"]),
    ]


def _html_table(title: str, cols: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{v.lower() if v in ("PASS", "FAIL") else ""}">'
            f"{'<code>' + html.escape(v) + '</code>' if c == 'replay' else html.escape(v)}</td>"
            for c, v in zip(cols, row, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return f"<h2>{html.escape(title)}</h2><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;background:#fff}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;font-size:.9em}
th{background:#f0f0f0}td.pass{background:#2e9d57;color:#fff;font-weight:bold}td.fail{background:#d6453d;color:#fff;font-weight:bold}
.verdict{font-size:2em;font-weight:bold;padding:.2em .6em;display:inline-block;color:#fff}
code{font-size:.85em}img{border:1px solid #ddd;margin:.5em}"""


def write_report(
    cert: Certificate,
    records: Sequence[EpisodeRecord],
    out_dir: Path,
    *,
    config_path: Path | None = None,
) -> dict[str, Path]:
    """Write report.html, report.md and the ODD PNGs; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    maps = odd_maps(cert.result.model_dump(mode="json"), out_dir)
    tabs = tables(cert, records, config_path, out_dir)
    summary = _summary(cert)
    colour = "#2e9d57" if cert.verdict == "PASS" else "#d6453d"
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>safecert: {cert.verdict}</title>"
        f"<style>{_CSS}</style></head><body><h1>safecert black-box certificate</h1>",
        f"<div class='verdict' style='background:{colour}'>{cert.verdict}</div><table>",
        *[f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in summary],
        "</table>",
    ]
    md = ["# safecert black-box certificate", "", f"**Verdict: {cert.verdict}**", ""]
    md += [f"- **{k}**: {v}" for k, v in summary] + [""]
    if maps:
        parts.append("<h2>Operational design domain</h2>")
        md += ["## Operational design domain", ""]
    for title, path in maps:
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(f"<img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>")
        md += [f"![{title}]({path.name})", ""]
    for title, cols, rows in tabs:
        parts.append(_html_table(title, cols, rows))
        md += [f"## {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        md += [
            "| "
            + " | ".join(
                f"`{v}`" if c == "replay" else v.replace("|", "\\|")
                for c, v in zip(cols, row, strict=True)
            )
            + " |"
            for row in rows
        ] + [""]
    parts.append("</body></html>")
    (out_dir / "report.html").write_text("".join(parts), encoding="utf-8")
    (out_dir / "report.md").write_text("\n".join(md), encoding="utf-8")
    return {
        "html": out_dir / "report.html",
        "md": out_dir / "report.md",
        **{p.stem: p for _, p in maps},
    }
