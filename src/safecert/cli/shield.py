"""``safecert shield …``: certificates and least-restrictive shields from agent logs.

Commands: ``certify`` (the bound V̄_T(s0) of a given shield, default the full one),
``synthesize`` (the least-restrictive shield meeting ε, plus its certificate), ``plan`` (visits
to collect per row for V̄_T(s0) ≤ ε; :mod:`safecert.shield.plan`) and ``count`` (logs → a
mergeable count table; :mod:`safecert.shield.counts`). Both are built by
:mod:`safecert.shield.certify` and write into ``--out``: ``certificate.json`` (kind "shield"),
``shield.json`` (every live state → permitted actions, the input format of ``certify --shield``),
``shield.md`` (readable table), ``model.toml`` (a copy, for ``safecert verify``) and, for models
with a ``[layout]``, ``shield.png``. This module only parses options and prints.

Extension seam — the Markov diagnostic: a module ``safecert.cli.shield_diagnose`` (owned by the
diagnostics work) that defines either ``register(app: typer.Typer) -> None`` or a plain command
function ``diagnose``, registered as ``safecert shield diagnose``. It is imported at the bottom of
this module when it exists; nothing else here needs to change.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from safecert.cli.output import (
    JunitOpt,
    as_flags,
    console,
    emit_json,
    err_console,
    table,
    write_junit_for,
)

if TYPE_CHECKING:
    from safecert.shield.certify import ShieldRun

app = typer.Typer(
    help="Certified runtime shields for tool-using agents, from ordinary logs.",
    no_args_is_help=True,
    add_completion=False,
)

ModelOpt = Annotated[Path, typer.Option("--model", help="Model TOML (predicates, actions, ...).")]
LogsOpt = Annotated[Path, typer.Option("--logs", help="Step log, JSON Lines.")]
MaybeLogsOpt = Annotated[
    Path | None, typer.Option("--logs", help="Step log, JSON Lines (or give --counts).")
]
CountsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--counts",
        help="Count table(s) from `safecert shield count` instead of --logs; repeat the option "
        "for several (summed). Anytime sets only.",
    ),
]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
AnytimeOpt = Annotated[
    bool,
    typer.Option(
        "--anytime",
        help="Time-uniform confidence sets on every logged visit (valid at any log size, no "
        "budget needed; also the model's anytime = true).",
    ),
]
SignKeyOpt = Annotated[
    Path | None,
    typer.Option("--sign-key", help="Ed25519 private key: also write certificate.json.sig."),
]


def _show(run: ShieldRun, out: Path, json_out: bool) -> None:
    from safecert.shield.certify import short_of_budget
    from safecert.shield.report import table_rows

    cert = run.certificate
    short = short_of_budget(cert.result)
    if short:
        _say(
            f"warning: {len(short)} of {cert.result.stochastic_rows} rows are "
            + (
                "never visited"
                if cert.result.confidence == "anytime"
                else "short of their budget n0"
            )
            + "; their confidence sets are vacuous (worst case): collect more logs"
        )
    if json_out:
        emit_json(
            {
                "verdict": cert.verdict,
                "out": str(out),
                "halt_only_not_listed": run.missing_states,
                "short_of_budget": short_of_budget(cert.result),
                "notes": {k: v for k, v in run.summary.items() if k == "fallback"},
                **cert.result.model_dump(mode="json"),
            }
        )
        return
    rows = table_rows(run.model, run.allowed, run.values)
    console.print(
        table(f"shield for {run.model.name}", ["state", "V̄_T", "permitted", "forbidden"], rows)
    )
    for k, v in run.summary.items():
        console.print(f"[bold]{k}[/]: {v}")
    console.print(f"wrote {', '.join(str(f) for f in run.written)}")


def _report(out: Path) -> None:
    from safecert.report import write_run_report

    write_run_report(out / "certificate.json")


def _say(line: str) -> None:
    """One unwrapped line on stderr."""
    print(line, file=sys.stderr, flush=True)


def _busy(json_out: bool, what: str):
    return nullcontext() if json_out else err_console.status(what)


@app.command()
def certify(
    model_path: ModelOpt,
    out: OutOpt,
    logs_path: MaybeLogsOpt = None,
    counts: CountsOpt = None,
    shield: Annotated[
        Path | None,
        typer.Option(
            help="shield.json (state → actions; a live state not listed is halt-only) or a shield "
            "certificate.json; default: the full shield."
        ),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(
            help="Budget ε: verdict PASS iff V̄_T(s0) ≤ ε, else FAIL (exit 1); "
            "without it the verdict is BOUND."
        ),
    ] = None,
    anytime: AnytimeOpt = False,
    sign_key: SignKeyOpt = None,
    json_out: JsonOpt = False,
    junit: JunitOpt = None,
) -> None:
    """Certify a shield: with confidence 1−δ every controller it admits reaches an unsafe state
    within T calls with probability at most V̄_T(s0).

    Example: safecert shield certify --model examples/shield/grid.toml --logs examples/shield/grid_logs.jsonl --shield runs/grid/shield.json --epsilon 0.2 --out runs/grid-cert
    """
    from safecert.shield.certify import certify_shield

    with _busy(json_out, "certifying"), as_flags("epsilon", "shield", "logs", "counts"):
        run = certify_shield(
            model_path, logs_path, out, shield_path=shield, epsilon=epsilon, sign_key=sign_key,
            anytime=anytime, counts=counts,
        )  # fmt: skip
    _report(out)
    write_junit_for(junit, f"safecert shield certify {out}", run.certificate, "shield.certify")
    _show(run, out, json_out)
    if run.certificate.verdict == "FAIL":
        raise typer.Exit(1)


@app.command()
def synthesize(
    model_path: ModelOpt,
    epsilon: Annotated[float, typer.Option(help="Risk budget ε for V̄_T(s0).")],
    out: OutOpt,
    logs_path: MaybeLogsOpt = None,
    counts: CountsOpt = None,
    method: Annotated[
        str, typer.Option(help="greedy (Alg. 1), additive, or robust_q (the sandbox variant).")
    ] = "greedy",
    rho_min: Annotated[
        float, typer.Option(help="ρ_min in the removal cost ρ(s,a) + ρ_min.")
    ] = 1e-3,
    allow_goal_unreachable: Annotated[
        bool,
        typer.Option(help="Exit 0 even when the goal is unreachable under the shield."),
    ] = False,
    anytime: AnytimeOpt = False,
    sign_key: SignKeyOpt = None,
    json_out: JsonOpt = False,
    junit: JunitOpt = None,
) -> None:
    """Least-restrictive shield with V̄_T(s0) ≤ ε, and its certificate (Alg. 1; Cor. 2: no sample
    splitting needed).

    Example: safecert shield synthesize --model examples/shield/grid.toml --logs examples/shield/grid_logs.jsonl --epsilon 0.1 --out runs/grid
    """
    from safecert.shield.certify import synthesize_shield

    with (
        _busy(json_out, "synthesizing"),
        as_flags("epsilon", "method", "rho_min", "logs", "counts"),
    ):
        run = synthesize_shield(
            model_path, logs_path, out, epsilon=epsilon, method=method, rho_min=rho_min,
            sign_key=sign_key, anytime=anytime, counts=counts,
        )  # fmt: skip
    _report(out)
    _synthesis_junit(junit, out, run, allow_goal_unreachable)
    _show(run, out, json_out)
    if "fallback" in run.summary:
        _say("note: greedy made the goal unreachable; using the additive shield")
    if run.certificate.result.goal_reachable is False and not allow_goal_unreachable:
        _say(
            "goal unreachable: the shield meets ε but blocks the task (forbidden: "
            f"{100 * run.certificate.result.forbidden_fraction:.0f} % of live pairs); collect more "
            "logs, raise --epsilon, or pass --allow-goal-unreachable"
        )
        raise typer.Exit(1)


def _synthesis_junit(junit: Path | None, out: Path, run: ShieldRun, allow: bool) -> None:
    """The certificate's case, and the goal's reachability as a case when it fails the command."""
    if junit is None:
        return
    from safecert.report.junit import Case, certificate_properties, shield_case, write_junit

    cert = run.certificate
    cases = [shield_case(cert, "shield.synthesize")]
    if cert.result.goal_reachable is not None and not allow:
        cases.append(
            Case(
                "goal reachable under the shield",
                "safecert.shield.synthesize",
                {"goal_reachable": cert.result.goal_reachable},
                None if cert.result.goal_reachable else "the shield blocks the task",
                "GOAL_UNREACHABLE",
            )
        )
    write_junit(junit, f"safecert shield synthesize {out}", cases, certificate_properties(cert))


@app.command()
def plan(
    model_path: ModelOpt,
    epsilon: Annotated[float, typer.Option(help="Risk budget ε the plan aims V̄_T(s0) at.")],
    logs_path: MaybeLogsOpt = None,
    counts: CountsOpt = None,
    shield: Annotated[
        Path | None,
        typer.Option(help="shield.json or a shield certificate.json; default: the full shield."),
    ] = None,
    anytime: AnytimeOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Which rows to log more, and how many more visits each, for V̄_T(s0) ≤ ε (at today's
    empirical frequencies); exit 1 when ε is out of reach for this shield.

    Example: safecert shield plan --model examples/payments/model.toml --logs examples/payments/steps.jsonl --epsilon 0.2 --anytime
    """
    from safecert.shield.plan import plan_shield

    with as_flags("epsilon", "shield", "logs", "counts"):
        result = plan_shield(
            model_path, logs_path, epsilon, shield_path=shield, anytime=anytime, counts=counts
        )
    if json_out:
        emit_json(result.to_json())
    else:
        rows = [
            [r.state if isinstance(r.state, str) else _compact(r.state), r.action, r.have, r.need]
            for r in result.rows
            if r.need > 0
        ]
        console.print(table("rows to log more", ["state", "action", "have", "need"], rows))
        console.print(f"[bold]V̄_T(s0) now[/]: {result.bound_now:.5f} ({result.confidence} sets)")
        console.print(f"[bold]V̄_T(s0) if met[/]: {result.bound_if_met:.5f} (ε = {epsilon:g})")
        untouched = sum(1 for r in result.rows if r.need == 0)
        console.print(f"{untouched} of {len(result.rows)} rows need no more visits")
    if not result.achievable:
        _say(
            f"ε = {epsilon:g} is out of reach for this shield (V̄ with plenty of visits: "
            f"{result.bound_limit:.5f}); "
            + (
                "synthesize a stricter shield or raise --epsilon"
                if result.confidence == "anytime"
                else "raise the model's budget or use --anytime"
            )
        )
        raise typer.Exit(1)


def _compact(state: object) -> str:
    """A predicate state as its true predicates ({a, b}; {} for none)."""
    assert isinstance(state, dict)
    return "{" + ", ".join(k for k, v in state.items() if v) + "}"


@app.command()
def count(
    model_path: ModelOpt,
    logs: Annotated[
        list[Path],
        typer.Argument(
            help="Step logs (JSON Lines, Parquet) and count tables to merge.", show_default=False
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="The count table to write (Parquet).")],
    json_out: JsonOpt = False,
) -> None:
    """Count step logs into a mergeable transition count table (out of core, DuckDB), for
    `certify`/`synthesize`/`plan --counts` with anytime sets.

    Example: safecert shield count --model examples/payments/model.toml examples/payments/steps.jsonl --out runs/counts.parquet
    """
    from safecert.shield.counts import count_files

    with _busy(json_out, f"counting {len(logs)} files"):
        result = count_files(model_path, logs, out)
    summary = {
        "out": str(out),
        "steps": result.steps,
        "episodes": result.episodes,
        "transition_kinds": int((result.counts > 0).sum()),
        "model_digest": result.digest,
    }
    if json_out:
        emit_json(summary)
    else:
        for k, v in summary.items():
            console.print(f"[bold]{k}[/]: {v}")


if importlib.util.find_spec("safecert.cli.shield_diagnose") is not None:
    _diagnose = importlib.import_module("safecert.cli.shield_diagnose")
    if hasattr(_diagnose, "register"):
        _diagnose.register(app)
    else:
        app.command("diagnose")(_diagnose.diagnose)

if importlib.util.find_spec("safecert.cli.shield_agents") is not None:
    importlib.import_module("safecert.cli.shield_agents").register(app)
