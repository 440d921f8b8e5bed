"""``safecert shield serve`` and ``safecert shield ingest``: the certified shield in front of real
agents. Parsing and printing only; the work is in :mod:`safecert.shield.serve`,
:mod:`safecert.shield.ingest` and :mod:`safecert.shield.session`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer

from safecert.cli.output import console, emit_json, err_console
from safecert.errors import ConfigError

AbstractionOpt = Annotated[
    str,
    typer.Option(
        "--abstraction",
        help="MODULE:FUNC, phi(history) -> state (label or dict of predicate values); resolved "
        "from the working directory or PYTHONPATH.",
    ),
]
ActionMapOpt = Annotated[
    str | None,
    typer.Option(
        "--action-map",
        help="MODULE:FUNC, (tool, arguments) -> action, or a rules file (*.toml, "
        "safecert.shield.action_rules.load_action_rules); default: the tool's name.",
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--abstraction-timeout", help="Deadline (s) for each phi / action-map call; fail closed."
    ),
]


def _action_map(spec: str | None):
    from safecert.shield.abstraction import load_callable
    from safecert.shield.action_rules import load_action_rules

    if spec is None:
        return None
    if spec.endswith(".toml"):
        return load_action_rules(Path(spec))
    return load_callable(spec, "--action-map")


def _abstraction(model, abstraction: str, action_map: str | None, timeout_s: float):
    from safecert.shield.abstraction import Abstraction, check_timeout, load_callable

    return Abstraction(
        model,
        load_callable(abstraction, "--abstraction"),
        _action_map(action_map),
        check_timeout(timeout_s, "--abstraction-timeout"),
    )


def serve(
    certificate: Annotated[
        Path,
        typer.Option(help="Shield certificate.json; its model.toml and shield.json beside it."),
    ],
    upstream: Annotated[
        str,
        typer.Option(help='Upstream MCP server command (stdio), e.g. "python tools_server.py".'),
    ],
    abstraction: AbstractionOpt,
    action_map: ActionMapOpt = None,
    on_block: Annotated[
        str, typer.Option(help="ask_again (the 4th consecutive refusal halts) or halt.")
    ] = "ask_again",
    transport: Annotated[str, typer.Option(help="stdio or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP host (http transport).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port (http transport).")] = 8765,
    steps_log: Annotated[
        Path | None,
        typer.Option(
            help="Append one step per executed call (the --logs format; episode = session)."
        ),
    ] = None,
    audit_log: Annotated[
        Path | None, typer.Option(help="Append every decision (allowed or blocked, and why).")
    ] = None,
    abstraction_timeout: TimeoutOpt = 2.0,
    upstream_timeout: Annotated[
        float, typer.Option(help="Deadline (s) for each upstream call; a miss ends the session.")
    ] = 30.0,
    upstream_start_timeout: Annotated[
        float,
        typer.Option(
            help="Deadline (s) for the upstream to start and list its tools (each start)."
        ),
    ] = 30.0,
    upstream_restarts: Annotated[
        int,
        typer.Option(
            help="Restarts (with backoff) of an upstream that died; past them, exit 3.", min=0
        ),
    ] = 3,
    shutdown_grace: Annotated[
        float,
        typer.Option(
            help="On SIGTERM/SIGINT: wait (s) for calls in flight, then stop (exit 128+sig)."
        ),
    ] = 2.0,
) -> None:
    """Serve MCP in front of an upstream MCP server, enforcing a certified shield per session.

    Exit codes: 0 the stdio client left; 2 bad input or the upstream did not start; 3 the upstream
    died more often than --upstream-restarts; 128+signal after SIGTERM (143) or SIGINT (130).

    Example: safecert shield serve --certificate runs/pay/certificate.json --upstream "python tools_server.py" --abstraction phi:phi --action-map phi:action --steps-log steps.jsonl
    """
    from safecert.shield.abstraction import check_timeout
    from safecert.shield.audit import ON_BLOCK, OnBlock
    from safecert.shield.certified import load_certified_shield
    from safecert.shield.serve import EXIT_UPSTREAM, ServeOptions
    from safecert.shield.serve import run as run_gateway
    from safecert.shield.upstream import UpstreamFailed

    if on_block not in ON_BLOCK:
        raise ConfigError(f"unknown policy {on_block!r}", field="--on-block", fix=f"use {ON_BLOCK}")
    if transport not in ("stdio", "http"):
        raise ConfigError(f"unknown transport {transport!r}", field="--transport", fix="stdio|http")
    if not 0 < port < 65536:
        raise ConfigError(f"must be in 1..65535, got {port}", field="--port")
    opts = ServeOptions(
        upstream=upstream,
        transport="stdio" if transport == "stdio" else "http",
        host=host,
        port=port,
        on_block=cast(OnBlock, on_block),
        steps_log=steps_log,
        audit_log=audit_log,
        upstream_timeout_s=check_timeout(upstream_timeout, "--upstream-timeout"),
        upstream_start_timeout_s=check_timeout(upstream_start_timeout, "--upstream-start-timeout"),
        upstream_restarts=upstream_restarts,
        grace_s=check_timeout(shutdown_grace, "--shutdown-grace"),
    )
    shield = load_certified_shield(certificate)
    abstr = _abstraction(shield.model, abstraction, action_map, abstraction_timeout)
    try:
        code = run_gateway(shield, abstr, opts)
    except UpstreamFailed as exc:
        err_console.print(f"safecert: error: {exc}", markup=False, highlight=False)
        raise typer.Exit(EXIT_UPSTREAM) from None
    if code:
        err_console.print(f"stopped (exit {code})", markup=False, highlight=False)
        raise typer.Exit(code)


def ingest(
    model: Annotated[Path, typer.Option(help="Model TOML (the states phi returns).")],
    transcripts: Annotated[
        Path, typer.Option(help="OpenAI chat-completions transcripts, one conversation per line.")
    ],
    out: Annotated[Path, typer.Option(help="Step log to write (JSON Lines).")],
    abstraction: AbstractionOpt,
    action_map: ActionMapOpt = None,
    abstraction_timeout: TimeoutOpt = 2.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Turn tool-calling transcripts into the step logs certificates are built from.

    Example: safecert shield ingest --model model.toml --abstraction phi:phi --action-map phi:action --transcripts chats.jsonl --out steps.jsonl
    """
    from safecert.shield.ingest import ingest as run_ingest
    from safecert.shield.model import load_model

    summary = run_ingest(
        transcripts,
        out,
        _abstraction(load_model(model), abstraction, action_map, abstraction_timeout),
    )
    if json_out:
        emit_json(summary.__dict__)
    else:
        console.print(
            f"{summary.conversations} conversations → {summary.steps} steps in {summary.out}"
        )


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``ingest`` to ``safecert shield``."""
    app.command("serve")(serve)
    app.command("ingest")(ingest)
