"""Render a black-box or sequential certificate as ``report.html`` and ``report.md``.

Sections: verdict and its claim; the post-hoc banner of a re-judged certificate; the facts panel
(:mod:`safecert.report.facts`); the ODD views (:mod:`safecert.report.odd`); a sortable table of
every cell (per-axis columns, Table-2 breakdown: task-only, safety-only and unified failure rates
with their Clopper–Pearson upper bounds at δ'); Hoeffding bounds; observation ranges; and the
counterexamples, worst first, each with its seed and the command that replays it against the run
folder that holds the episode store.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safecert.blackbox.jobs import EpisodeRecord
from safecert.certificate import BlackboxCertificate, SequentialCertificate
from safecert.report.facts import claim, digest_of, facts_html, facts_markdown, posthoc_banner
from safecert.report.html import breakable, embed_png, esc, page, table, verdict_badge
from safecert.report.odd import cell_views, odd_html, odd_pngs, sorted_axes
from safecert.report.plots import axis_pngs, distributions_png

Certificate = BlackboxCertificate | SequentialCertificate
MAX_COUNTEREXAMPLES = 25
#: the worst counterexamples replayed step by step for a trajectory plot
MAX_TRAJECTORIES = 3
#: oracle kinds a report replays (in this process); exec and http vendors are never called by it
#: the policy kinds safecert loads itself (in a policy worker unless trusted): a report replays them
LOADED_KINDS = ("python", "onnx", "sb3", "torchscript")


def _fmt(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


@dataclass(frozen=True)
class Section:
    """A titled table, rendered both in HTML and in Markdown."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    sortable: bool = False
    status: list[str] | None = None
    note: str = ""


def store_folder(cert: Certificate, out_dir: Path) -> Path:
    """The run folder that holds ``episodes.sqlite`` (for a re-judged certificate: the folder its
    ``result.rejudged.store`` names, relative to ``out_dir``)."""
    rejudged = getattr(cert.result, "rejudged", None)
    if rejudged is None:
        return Path(out_dir).resolve()
    return (Path(out_dir) / rejudged.store).resolve().parent


def failing_episodes(cert: Certificate, records: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    """Every failing episode (goal not met, cost over budget, or an oracle failure), worst first:
    episodes of failing cells before others, then highest cost, then earliest end (fewest steps),
    then (cell, index) so the order is reproducible."""
    budget = cert.result.budget
    failing_cells = {v.index for v in cell_views(cert.result) if v.status == "fail"}
    bad = [r for r in records if (not r.goal) or r.cost > budget or r.failure_reason]
    return sorted(
        bad, key=lambda r: (r.cell not in failing_cells, -r.cost, r.steps, r.cell, r.index)
    )


def _why(r: EpisodeRecord, budget: float) -> str:
    if r.failure_reason:
        return f"oracle: {r.failure_reason}"
    reasons = []
    if not r.goal:
        reasons.append("goal not met" + (" (terminated)" if r.terminated else ""))
    if r.cost > budget:
        reasons.append(f"cost {r.cost:g} > {budget:g}")
    return ", ".join(reasons)


_STATUS_WORD = {"pass": "PASS", "fail": "FAIL"}

#: a Hoeffding margin wider than this fraction of the declared range gets an explanation
WIDE_FRACTION = 0.1


def episodes_for_margin(margin: float, delta: float, span: float) -> int:
    """The fewest episodes whose Hoeffding margin span·√(ln(1/δ)/2N) is at most ``margin``."""
    import math

    return math.ceil(span**2 * math.log(1.0 / delta) / (2.0 * margin**2))


def bound_note(kpi: Any, episodes: int, delta: float, budget: float | None = None) -> str:
    """Why a Hoeffding bound is vacuous or wide, beside it: "N episodes over a range of R: the
    margin is …; 4N episodes narrow it to …" (empty when the bound is narrow). For a cost UCB
    against the budget it also says what the verdict judges instead (each episode's cost)."""
    from safecert.stats.hoeffding import hoeffding_radius

    if kpi.range is None:
        return ""  # no range, no bound: the table says "—"
    if kpi.bound is None:
        return "a value fell outside the declared range: no bound is claimed"
    lo, hi = kpi.range
    span = hi - lo
    margin = hoeffding_radius(episodes, delta, span)
    vacuous = kpi.bound > hi if kpi.side == "upper" else kpi.bound < lo
    over_budget = budget is not None and kpi.side == "upper" and kpi.bound > budget
    if margin <= WIDE_FRACTION * span and not vacuous and not over_budget:
        return ""
    text = (
        f"{'vacuous' if vacuous else 'wide'}: N = {episodes} episodes over a range of {span:g} "
        f"give a Hoeffding margin of {margin:.4g} at δ' = {delta:.3g}; {4 * episodes} episodes "
        f"would narrow it to {margin / 2:.4g}"
    )
    if over_budget:
        need = max(budget - kpi.mean, 0.0)
        text += (
            f". It bounds the mean cost, which the verdict does not judge: a cell fails when an "
            f"episode's cost exceeds d = {budget:g} too often (failure rate ≤ p*)"
        )
        if need > 0:
            text += (
                f"; a mean-cost bound below d needs N ≥ "
                f"{episodes_for_margin(need, delta, span)} episodes at this mean"
            )
    return text + "."


def _named(what: str, note: str) -> str:
    return f"{what}: {note}" if note else ""


def _every_cell(cert: Certificate, views: list[Any], cells: list[Any], names: list[str]) -> Section:
    """The sortable table of every cell. A sequential cell shows its decision's own counts and
    anytime-valid e-process bounds (the store holds exactly the episodes before the decision, so
    these are also the stored counts). Fixed-N cells show the Table-2 breakdown (Clopper–Pearson)."""
    status = [v.status for v in views]
    if isinstance(cert, SequentialCertificate):
        return Section(
            f"Every cell ({len(views)}; click a column to sort): each decision's own counts and its "
            "anytime-valid e-process bounds at δ' (episodes run past a decision are not stored)",
            [
                "cell",
                *names,
                "episodes at decision",
                "failures at decision",
                "e-process LB",
                "e-process UB",
                "decision",
                "status",
            ],
            [
                [
                    str(v.index),
                    *[str(v.params.get(n, "—")) for n in names],
                    str(c.episodes_used),
                    str(c.failures_used),
                    _fmt(c.lower_bound),
                    _fmt(c.upper_bound),
                    c.decision,
                    _STATUS_WORD.get(v.status, v.word),
                ]
                for v, c in zip(views, cells, strict=True)
            ],
            sortable=True,
            status=status,
        )
    return Section(
        f"Every cell ({len(views)}; click a column to sort; bounds are Clopper–Pearson at δ')",
        [
            "cell",
            *names,
            "N",
            "failures",
            "task UB",
            "safety UB",
            "unified rate",
            "unified UB",
            "decision",
            "status",
        ],
        [
            [
                str(v.index),
                *[str(v.params.get(n, "—")) for n in names],
                str(c.episodes),
                str(c.failures),
                _fmt(c.task_upper_bound),
                _fmt(c.safety_upper_bound),
                _fmt(c.failure_rate),
                _fmt(c.upper_bound),
                c.decision,
                _STATUS_WORD.get(v.status, v.word),
            ]
            for v, c in zip(views, cells, strict=True)
        ],
        sortable=True,
        status=status,
    )


def sections(
    cert: Certificate, records: Sequence[EpisodeRecord], config_path: Path | None, out_dir: Path
) -> list[Section]:
    """Every table of the report, in order."""
    res = cert.result
    cells: list[Any] = list(res.cells)  # Cell or SequentialCell: both carry bound and decision
    views = cell_views(res)
    names = [name for name, _ in sorted_axes(res)]
    every = _every_cell(cert, views, cells, names)
    sequential = isinstance(cert, SequentialCertificate)
    hoeff = Section(
        "Performance and cost (Hoeffding at δ'"
        + (
            ", over every stored episode of a cell: descriptive, not anytime-valid)"
            if sequential
            else ")"
        ),
        ["cell", "params", "return mean", "return LCB", "cost mean", "cost UCB", "why so wide"],
        [
            [
                str(i),
                ", ".join(f"{k}={v}" for k, v in c.params.items())
                + (" (nominal)" if i == "stage 1" else "")
                or "nominal",
                _fmt(c.return_kpi.mean),
                _fmt(c.return_kpi.bound),
                _fmt(c.cost_kpi.mean),
                _fmt(c.cost_kpi.bound),
                " ".join(
                    note
                    for note in (
                        _named("return", bound_note(c.return_kpi, c.episodes, res.delta_cell)),
                        _named(
                            "cost",
                            bound_note(c.cost_kpi, c.episodes, res.delta_cell, res.budget),
                        ),
                    )
                    if note
                )
                or "—",
            ]
            for i, c in [("stage 1", res.stage1), *enumerate(res.cells)]
        ],
        sortable=True,
    )
    failing = failing_episodes(cert, records)
    config = shlex.quote(str(config_path)) if config_path else "CONFIG.toml"
    run = shlex.quote(str(store_folder(cert, out_dir)))
    counter = Section(
        f"Counterexamples ({min(len(failing), MAX_COUNTEREXAMPLES)} of {len(failing)} failing "
        "episodes, worst first)",
        ["cell:index", "cell", "seed", "why", "return", "cost", "steps", "replay"],
        [
            [
                f"{r.cell}:{r.index}",
                ", ".join(f"{k}={v}" for k, v in res.cells[r.cell].params.items())
                if r.cell < len(res.cells)
                else "nominal (stage 1)",
                str(r.seed),
                _why(r, res.budget),
                _fmt(r.ret),
                _fmt(r.cost),
                str(r.steps),
                f"safecert certify {config} --replay {r.cell}:{r.index} --out {run}",
            ]
            for r in failing[:MAX_COUNTEREXAMPLES]
        ],
        note="Order: episodes of failing cells first, then highest cost, then earliest end. "
        "The replay command reruns the episode with its seed and compares it with the stored one.",
    )
    out = [every, hoeff, counter]
    ranges = res.obs_ranges
    if ranges:
        source = {"declared": "declared in the config", "space": "the space's bounds"}.get(
            ranges.source, ranges.source
        )
        out.append(
            Section(
                "Observation ranges Δ_s ("
                + (
                    f"{ranges.episodes} nominal rollouts for estimated dims"
                    if any(ranges.estimated)
                    else source
                )
                + ")",
                ["dim", "low", "high", "range", "source"],
                [
                    [str(d), _fmt(lo), _fmt(hi), _fmt(span), "estimated" if est else source]
                    for d, (lo, hi, span, est) in enumerate(
                        zip(ranges.low, ranges.high, ranges.range, ranges.estimated, strict=True)
                    )
                ],
            )
        )
    return out


def _section_html(s: Section) -> str:
    note = f"<p class='note'>{s.note}</p>" if s.note else ""
    return (
        table(
            s.columns,
            s.rows,
            title=s.title,
            sortable=s.sortable,
            row_status=s.status,
        )
        + note
    )


def _section_md(s: Section) -> list[str]:
    lines = [
        f"## {s.title}",
        "",
        "| " + " | ".join(s.columns) + " |",
        "|" + "---|" * len(s.columns),
    ]
    lines += [
        "| "
        + " | ".join(
            f"`{v}`" if c == "replay" else v.replace("|", "\\|")
            for c, v in zip(s.columns, row, strict=True)
        )
        + " |"
        for row in s.rows
    ]
    return lines + ([s.note] if s.note else []) + [""]


def trajectories(
    cert: Certificate,
    records: Sequence[EpisodeRecord],
    config_path: Path | None,
    out_dir: Path,
    limit: int = MAX_TRAJECTORIES,
) -> tuple[str, list[str], dict[str, Path]]:
    """(HTML, Markdown lines, PNG paths) of the ``limit`` worst counterexamples replayed step by
    step (:mod:`safecert.report.trajectory`); a replay that cannot run is stated, with its cause."""
    worst = failing_episodes(cert, records)[:limit]
    if not worst:
        return "", [], {}
    from safecert.report.trajectory import clip_unavailable

    title = f"Trajectories of the {len(worst)} worst counterexamples (replayed with their seeds)"
    html_parts, md = [f"<h2>{title}</h2><div class='heatmaps'>"], [f"## {title}", ""]
    pngs: dict[str, Path] = {}
    if config_path is None or not Path(config_path).is_file():
        why = "the run's config is not at hand, so the episodes cannot be replayed"
        return f"<h2>{title}</h2><p class='note'>Not shown: {why}.</p>", [why, ""], {}
    ranges = cert.result.obs_ranges.range if cert.result.obs_ranges else None
    from safecert.blackbox.plan import plan_run

    try:
        plan = plan_run(Path(config_path), Path(cert.inputs.root))
        no_clip = clip_unavailable(plan)
    except Exception as exc:  # noqa: BLE001 - stated in the report, never fatal to it
        why = f"the run cannot be replayed ({type(exc).__name__}: {exc})"
        return f"<h2>{title}</h2><p class='note'>Not shown: {esc(why)}.</p>", [why, ""], {}
    if plan.oracle.kind not in LOADED_KINDS:
        why = (
            f"the policy is an external {plan.oracle.kind} service, which a report does not call; "
            "run a replay command above to see an episode"
        )
        return f"<h2>{title}</h2><p class='note'>Not shown: {esc(why)}.</p>", [why, ""], {}
    from safecert.blackbox.oracles import make_oracle

    oracle = make_oracle(plan.oracle)  # one policy (worker) for every replay
    try:
        _replay_all(cert, worst, plan, ranges, no_clip, oracle, out_dir, html_parts, md, pngs)
    finally:
        oracle.close()
    html_parts.append("</div>")
    if no_clip is not None:
        html_parts.append(f"<p class='note' id='no-clip'>No rendered clip: {esc(no_clip)}.</p>")
        md += [f"No rendered clip: {no_clip}.", ""]
    return "".join(html_parts), md, pngs


def _replay_all(
    cert: Certificate,
    worst: Sequence[EpisodeRecord],
    plan: Any,
    ranges: list[float] | None,
    no_clip: str | None,
    oracle: Any,
    out_dir: Path,
    html_parts: list[str],
    md: list[str],
    pngs: dict[str, Path],
) -> None:
    """Replay each of ``worst`` with ``oracle``; its plot (or why it failed) is appended."""
    from safecert.report.trajectory import clip_gif, data_uri, replay_trajectory, trajectory_png

    for k, r in enumerate(worst):
        name = f"episode {r.cell}:{r.index} (seed {r.seed})"
        try:
            t = replay_trajectory(plan, r, ranges, clip=k == 0 and no_clip is None, oracle=oracle)
        except Exception as exc:  # noqa: BLE001 - stated in the report, never fatal to it
            note = f"{name}: replay failed ({type(exc).__name__}: {exc})"
            html_parts.append(f"<p class='note' data-trajectory='failed'>{esc(note)}</p>")
            md += [note, ""]
            continue
        same = "matches the stored episode" if t.matches else "DIFFERS from the stored episode"
        data = trajectory_png(t, cert.result.budget)  # the figcaption names it, once
        path = out_dir / f"trajectory_{r.cell}_{r.index}.png"
        path.write_bytes(data)
        pngs[path.stem] = path
        html_parts.append(
            f"<figure data-trajectory='{r.cell}:{r.index}' data-matches='{str(t.matches).lower()}'>"
            f"<img alt='trajectory of {esc(name)}' src='{data_uri(data)}'>"
            f"<figcaption>{breakable(name + ': ' + same)}</figcaption></figure>"
        )
        md += [f"![{name}: {same}]({path.name})", ""]
        if t.frames:
            gif = out_dir / f"clip_{r.cell}_{r.index}.gif"
            gif.write_bytes(clip_gif(t.frames))
            pngs[gif.stem] = gif
            html_parts.append(
                f"<figure data-clip='{r.cell}:{r.index}'><img alt='clip of {esc(name)}' "
                f"src='{data_uri(gif.read_bytes(), 'image/gif')}'><figcaption>{esc(name)}, "
                f"rendered ({len(t.frames)} frames)</figcaption></figure>"
            )
            md += [f"![clip of {name}]({gif.name})", ""]


def _plots_html(plots: list[tuple[str, Path]]) -> str:
    if not plots:
        return ""
    figures = "".join(
        f"<figure data-plot='{esc(path.stem)}'>{embed_png(path, caption)}"
        f"<figcaption>{breakable(caption)}</figcaption></figure>"
        for caption, path in plots
    )
    return f"<h2>Failure rate by axis, cost and return by cell</h2><div class='heatmaps'>{figures}</div>"


def write_report(
    cert: Certificate,
    records: Sequence[EpisodeRecord],
    out_dir: Path,
    *,
    config_path: Path | None = None,
    max_trajectories: int = MAX_TRAJECTORIES,
) -> dict[str, Path]:
    """Write report.html, report.md, the ODD projection PNGs and the trajectory PNGs of the
    ``max_trajectories`` worst counterexamples; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = out_dir / "certificate.json"
    cert_path = written if written.is_file() else None
    maps = odd_pngs(cert.result, out_dir)
    plots = axis_pngs(cert.result, out_dir)
    dist = distributions_png(cert.result, records, out_dir)
    if dist is not None:
        plots.append(dist)
    tabs = sections(cert, records, config_path, out_dir)
    traj_html, traj_md, traj_pngs = trajectories(
        cert, records, config_path, out_dir, max_trajectories
    )
    rejudged = getattr(cert.result, "rejudged", None)
    suffix = " (re-judged post hoc)" if rejudged is not None else ""
    body = [
        f"<h1>safecert {cert.kind} certificate</h1>",
        verdict_badge(cert.verdict, suffix),
        f"<p class='claim' id='claim'>{esc(claim(cert))}</p>",
        posthoc_banner(cert),
        odd_html(cert.result),
        _plots_html(plots),
        facts_html(cert, cert_path),
        *[_section_html(s) for s in tabs],
        traj_html,
    ]
    if maps:
        body.append("<h2>Worst-case ODD maps (PNG, as in report.md)</h2>")
        body += [embed_png(path, title) for title, path in maps]
    (out_dir / "report.html").write_text(
        page(f"safecert: {cert.verdict}{suffix}", "".join(body), digest=digest_of(cert_path)),
        encoding="utf-8",
    )
    md = [f"# safecert {cert.kind} certificate", "", f"**Verdict: {cert.verdict}{suffix}**", ""]
    md += [claim(cert), ""]
    if rejudged is not None:
        md += [
            f"> **Re-judged post hoc**: run under budget {rejudged.budget:g}, "
            f"p* {rejudged.p_star:g}; judged "
            f"here at budget {cert.result.budget:g}, p* {cert.result.p_star:g}.",
            "",
        ]
    md += facts_markdown(cert, cert_path) + [""]
    if plots:
        md += ["## Failure rate by axis, cost and return by cell", ""]
        md += [f"![{caption}]({path.name})" for caption, path in plots] + [""]
    if maps:
        md += ["## Operational design domain (worst-case projections)", ""]
        md += [f"![{title}]({path.name})" for title, path in maps] + [""]
    for s in tabs:
        md += _section_md(s)
    md += traj_md
    (out_dir / "report.md").write_text("\n".join(md), encoding="utf-8")
    return {
        "html": out_dir / "report.html",
        "md": out_dir / "report.md",
        **{p.stem: p for _, p in maps},
        **{p.stem: p for _, p in plots},
        **traj_pngs,
    }
