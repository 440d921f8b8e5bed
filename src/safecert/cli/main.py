"""Entry point of the ``safecert`` command.

Exit codes: 0 success; 1 a certificate does not hold or verification failed; 2 bad input or a
missing optional dependency, reported as one line on stderr (never a traceback). ``shield serve``
also exits 3 when its upstream died more often than ``--upstream-restarts``, and 128 + the signal
(130 SIGINT, 143 SIGTERM) after a graceful stop (docs/agents.md).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

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
from safecert.extras import COMMANDS, missing_extra, require_command

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


def _check_extras(group: Any, path: tuple[str, ...] = ()) -> None:
    """Make every command of :data:`safecert.extras.COMMANDS` check its extra once its options are
    parsed and before it runs, so a missing package is one line and nothing is written."""
    for name, command in getattr(group, "commands", {}).items():
        here = " ".join((*path, name))
        _check_extras(command, (*path, name))
        if here in COMMANDS and command.callback is not None:
            command.callback = _requiring(here, command.callback)


def _requiring(name: str, callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        require_command(name)
        return callback(*args, **kwargs)

    return checked


def main(argv: list[str] | None = None) -> int:
    """Run the command; map errors to exit codes (see module docstring)."""
    command = typer.main.get_command(app)
    _check_extras(command)
    try:
        rv = command.main(args=argv, prog_name="safecert", standalone_mode=False)
    except SafecertError as exc:
        print(f"safecert: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # a lazy import of an optional package, not checked up front
        missing = missing_extra(exc)
        if missing is None:  # user code, an unknown module: a traceback, as for any bug
            raise
        print(f"safecert: error: {missing}", file=sys.stderr)
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
