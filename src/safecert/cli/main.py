"""Entry point of the ``safecert`` command.

Exit codes: 0 success; 1 a certificate does not hold or verification failed; 2 bad input, reported
as one line on stderr (never a traceback).
"""

from __future__ import annotations

import sys

import typer

from safecert import __version__
from safecert.cli import blackbox as blackbox_cli
from safecert.cli import bnn as bnn_cli
from safecert.cli import diff as diff_cli
from safecert.cli import keys as keys_cli
from safecert.cli import report as report_cli
from safecert.cli import shield as shield_cli
from safecert.cli import stats as stats_cli
from safecert.cli import verify as verify_cli
from safecert.errors import SafecertError

app = typer.Typer(
    name="safecert",
    help="Certify learned controllers: black-box certificates, certified shields, BNN invariants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"safecert {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """safecert — certificates people can sign."""


app.command()(stats_cli.bound)
app.command()(stats_cli.plan)
app.command()(verify_cli.verify)
app.command()(keys_cli.keygen)
app.command()(keys_cli.sign)
app.command()(blackbox_cli.certify)
app.command()(blackbox_cli.rejudge)
app.command()(diff_cli.diff)
app.command()(report_cli.report)
app.add_typer(shield_cli.app, name="shield")
app.add_typer(bnn_cli.app, name="bnn")


def main(argv: list[str] | None = None) -> int:
    """Run the command; map errors to exit codes (see module docstring)."""
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="safecert", standalone_mode=False)
    except SafecertError as exc:
        print(f"safecert: error: {exc}", file=sys.stderr)
        return 2
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        print("safecert: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # usage errors: bad or missing option
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"safecert: error: {exc.format_message()}{hint}", file=sys.stderr)
        return 2
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
