"""Entry point of the ``safecert`` command.

Exit codes: 0 success; 1 a certificate does not hold or verification failed; 2 bad input or a
missing optional dependency, reported as one line on stderr (never a traceback). ``shield serve``
also exits 3 when its upstream died more often than ``--upstream-restarts``, and 128 + the signal
(130 SIGINT, 143 SIGTERM) after a graceful stop (docs/agents.md).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperGroup

from safecert import __version__
from safecert.cli.blas import let_idle_threads_sleep
from safecert.cli.collector import command_process
from safecert.errors import SafecertError
from safecert.extras import COMMANDS, missing_extra, require_command

#: every command: name → (module, attribute, the summary ``safecert --help`` lists). A command's
#: module is imported only when that command runs or shows its own help, so ``safecert bound``
#: never imports the engines' command modules (tests/cli/test_main.py keeps each summary equal to
#: the start of its command's own help).
TABLE: dict[str, tuple[str, str, str]] = {
    "bound": (
        "safecert.cli.stats",
        "bound",
        "One-sided Clopper–Pearson lower and upper bounds for one cell, each at δ/M.",
    ),
    "plan": (
        "safecert.cli.stats",
        "plan",
        "Minimum episodes N with upper(k, N, δ/M) ≤ p* for each planned failure count k.",
    ),
    "verify": (
        "safecert.cli.verify",
        "verify",
        "Re-derive a certificate's claim from its parameters and evidence; exit 1 on any mismatch.",
    ),
    "keygen": (
        "safecert.cli.keys",
        "keygen",
        "Create an Ed25519 key pair for signing certificates; never overwrites a key.",
    ),
    "sign": (
        "safecert.cli.keys",
        "sign",
        "Sign a certificate's exact bytes with Ed25519; writes CERT.sig next to it.",
    ),
    "certify": (
        "safecert.cli.blackbox",
        "certify",
        "Certify a black-box policy over its envelope grid; exit 1 when the verdict is not PASS.",
    ),
    "rejudge": (
        "safecert.cli.blackbox",
        "rejudge",
        "Re-judge stored episodes at another budget and p* (no new episodes); exit 1 on FAIL.",
    ),
    "diff": (
        "safecert.cli.diff",
        "diff",
        "Show what changed from certificate A to certificate B.",
    ),
    "report": (
        "safecert.cli.report",
        "report",
        "Write a static index.html over all certificate.json files under RUNS_DIR.",
    ),
    "shield": (
        "safecert.cli.shield",
        "app",
        "Certified runtime shields for tool-using agents, from ordinary logs.",
    ),
    "bnn": (
        "safecert.cli.bnn",
        "app",
        "Infinite-horizon safety of Bayesian neural-network policies (positive invariants).",
    ),
}


def build_command(name: str) -> Any:
    """The click command ``name`` of :data:`TABLE`, built from its module (imported now), with
    the extra checks of :func:`_check_extras`."""
    module, attribute, _ = TABLE[name]
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):  # a command group (shield, bnn)
        command = typer.main.get_command(target)
    else:
        one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        one.command(name=name)(target)
        command = typer.main.get_command(one)
    command.name = name
    _check_extras(command, (name,))
    return command


class _Commands(MutableMapping[str, Any]):
    """The root group's commands by name, each built on its first lookup."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in TABLE:
            raise KeyError(name)
        if name not in self._built:
            self._built[name] = build_command(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        raise TypeError("the commands of safecert are listed in safecert.cli.main.TABLE")

    def __delitem__(self, name: str) -> None:
        raise TypeError("the commands of safecert are listed in safecert.cli.main.TABLE")

    def __iter__(self) -> Iterator[str]:
        return iter(TABLE)

    def __len__(self) -> int:
        return len(TABLE)


class LazyGroup(TyperGroup):
    """The root ``safecert`` group: commands are built when used (:class:`_Commands`), and the
    root ``--help`` lists :data:`TABLE`'s summaries without building any."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            typer.echo(ctx.get_help())  # the help on stdout and exit code 2, as a usage error
            raise typer.Exit(2)
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        limit = formatter.width - 6 - max(map(len, TABLE))
        rows = [(name, _short(summary, limit)) for name, (_, _, summary) in TABLE.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."


app = typer.Typer(
    name="safecert",
    cls=LazyGroup,
    help="Certify learned controllers: black-box certificates, certified shields, BNN invariants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain root help: listing the commands imports no help renderer
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


def _check_extras(command: Any, path: tuple[str, ...]) -> None:
    """Make ``command`` (at ``path``) and each of its subcommands that :data:`safecert.extras.COMMANDS`
    names check its extra once its options are parsed and before it runs, so a missing package
    is one line and nothing is written."""
    here = " ".join(path)
    if here in COMMANDS and command.callback is not None:
        command.callback = _requiring(here, command.callback)
    for name, sub in getattr(command, "commands", {}).items():
        _check_extras(sub, (*path, name))


def _requiring(name: str, callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        require_command(name)
        return callback(*args, **kwargs)

    return checked


def main(argv: list[str] | None = None) -> int:
    """Run the command; map errors to exit codes (see module docstring). Without ``argv`` the
    command line is this process's own, which ends with it: the garbage collector is then set
    for a short process (:mod:`safecert.cli.collector`) and idle BLAS threads sleep at once
    (:mod:`safecert.cli.blas`)."""
    if argv is None:
        let_idle_threads_sleep()
    with command_process(argv is None):
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    command = typer.main.get_command(app)
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
