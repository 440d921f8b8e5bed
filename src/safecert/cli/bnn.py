"""``safecert bnn verify``: infinite-horizon safety of a BNN policy by a learned invariant."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from safecert.cli.output import (
    EventsOpt,
    JunitOpt,
    command_events,
    console,
    emit_json,
    err_console,
    table,
    write_junit_for,
)
from safecert.errors import ConfigError

app = typer.Typer(
    help="Infinite-horizon safety of Bayesian neural-network policies (positive invariants).",
    no_args_is_help=True,
)

BENCHMARK_NAMES = (
    "lds|lds_all|pend|pend_all|car|car_all (lds_x04|lds_all_x04: X0 = 0.4), "
    "lane (3-D lane keeping), cartpole (4-D cart-pole), lane4 (4-D lane keeping, steering lag), "
    "reactor (4-D cooled reactor, valve lag)"
)


@app.command()
def verify(
    out: Annotated[
        Path,
        typer.Option(help="Output folder (certificate.json, the policy copy, invariant.png)."),
    ],
    config: Annotated[
        Path | None, typer.Argument(help="Run config (TOML); see docs/bnn.md.")
    ] = None,
    benchmark: Annotated[
        str | None, typer.Option(help=f"A published policy instead of a config: {BENCHMARK_NAMES}.")
    ] = None,
    epsilon: Annotated[
        str | None, typer.Option(help='Weight-box half-width: absolute ("0.1") or "1.5sigma".')
    ] = None,
    search: Annotated[
        bool, typer.Option("--search", help="Search the largest ε on the ladder.")
    ] = False,
    time_limit: Annotated[
        float | None,
        typer.Option(
            "--time-limit",
            help="Wall-clock guard per ε in seconds (overrides limits.per_epsilon_s). Budgets "
            "are work (limits.max_iterations, limits.solver_nodes): a run the guard cuts is "
            "UNKNOWN and marked machine-dependent.",
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed (overrides the config).")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Solver processes for the closure pieces of [verifier] closure_splits "
            "(default: the cores available). Execution only: the certificate is the same.",
        ),
    ] = None,
    sign_key: Annotated[
        Path | None,
        typer.Option("--sign-key", help="Ed25519 private key: also write certificate.json.sig."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log CEGIS progress.")] = False,
    junit: JunitOpt = None,
    events: EventsOpt = None,
) -> None:
    """Learn and verify a positive invariant; exit 0 when SAFE, 1 when UNKNOWN.

    Budgets are counted in work (CEGIS iterations, MILP nodes, epochs, rollouts), so a config and
    seed give the same certificate on any machine at any load; seconds are wall-clock guards only.

    Example: safecert bnn verify --benchmark lds --epsilon 0.5sigma --out runs/lds
    """
    from safecert.bnn.certify import certify_run
    from safecert.bnn.setup import benchmark_config, load_config, with_options

    if (config is None) == (benchmark is None):
        raise ConfigError(
            "give exactly one of CONFIG.toml and --benchmark",
            field="config",
            fix=f"e.g. safecert bnn verify --benchmark lds --out DIR ({BENCHMARK_NAMES})",
        )
    if search and epsilon is not None:
        raise ConfigError(
            "--epsilon and --search exclude each other", field="epsilon", fix="use one"
        )
    cfg = load_config(config) if config is not None else benchmark_config(str(benchmark))
    cfg = with_options(cfg, epsilon=epsilon, seed=seed, time_limit=time_limit, search=search)
    if workers is not None and workers < 1:
        raise ConfigError(f"must be >= 1, got {workers}", field="--workers", fix="e.g. 2")
    if sign_key is not None:  # a bad key fails now, not after the search
        from safecert.signing import load_private_key

        load_private_key(sign_key)
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    with command_events(events, _Spinner, quiet=json_out) as progress:
        from safecert.bnn.pool import default_workers

        n = workers if workers is not None else default_workers()
        run = certify_run(cfg, config, out, sign_key=sign_key, events=progress, workers=n)
    from safecert.report import write_run_report

    write_run_report(run.path)
    write_junit_for(junit, f"safecert bnn verify {config or benchmark}", run.certificate, "bnn")
    summary = run.summary()
    if json_out:
        emit_json(summary)
    else:
        _print(summary)
    if summary["verdict"] != "SAFE":
        raise typer.Exit(1)


@app.command()
def export(
    certificate: Annotated[Path, typer.Argument(help="A bnn certificate.json.")],
    out: Annotated[Path, typer.Option(help="Output folder (closed_loop.onnx, *.vnnlib).")],
    data: Annotated[
        Path | None, typer.Option(help="Folder holding the policy copy (default: beside it).")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Export a certificate whose verdict is not SAFE (its files then say so; it "
            "claims nothing and its queries may be satisfiable).",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Write the certificate's closed-loop step as ONNX and its three conditions as VNN-LIB 1.0.

    Only a SAFE certificate is exported unless --force; every file states the verdict.

    Example: safecert bnn export runs/lds/certificate.json --out runs/lds/vnnlib
    """
    from safecert.bnn.export import certificate_claim
    from safecert.bnn.export import export as write_export

    claim = certificate_claim(certificate, data)
    paths = write_export(claim, out, force=force)
    verdict = claim.header.verdict
    if json_out:
        emit_json({"verdict": verdict, "files": [str(p) for p in paths]})
    else:
        if verdict != "SAFE":
            err_console.print(
                f"[bold yellow]warning:[/] the certificate's verdict is {verdict}: exported "
                "with --force; it claims nothing and its queries may be satisfiable"
            )
        for p in paths:
            console.print(str(p))


class _Spinner:
    """A rich spinner on stderr showing the current ε and the latest CEGIS event."""

    def __init__(self) -> None:
        self.status: Any = None
        self.epsilon = ""

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "run_started":
            self.status = err_console.status("CEGIS: starting")
            self.status.__enter__()
        elif self.status is None:
            return
        elif kind == "epsilon_started":
            self.epsilon = event["epsilon"]
            self.status.update(f"ε = {self.epsilon}: CEGIS starting")
        elif kind == "cegis_iteration":
            self.status.update(
                f"ε = {self.epsilon}: CEGIS iteration {event['iteration']}: {event['text']}"
            )
        elif kind == "run_finished":
            self.close()

    def close(self) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)
            self.status = None


def _print(summary: dict[str, Any]) -> None:
    rows = [
        [a["epsilon"], a["verdict"], a["reason"], a["iterations"], round(a["runtime_s"], 1)]
        for a in summary["search"]
    ]
    console.print(
        table("ε attempts", ["epsilon", "verdict", "reason", "iterations", "cpu_s"], rows)
    )
    colour = "green" if summary["verdict"] == "SAFE" else "yellow"
    console.print(
        f"[bold {colour}]{summary['verdict']}[/] ε = {summary['epsilon']} "
        f"→ {summary['certificate']}" + (f", {summary['plot']}" if summary.get("plot") else "")
    )
    if summary["machine_dependent"]:
        console.print(
            "[bold yellow]machine-dependent:[/] a wall-clock guard cut the run, so another "
            f"machine or load may give another result ({summary['reason']})"
        )
