"""The one exception hierarchy of safecert.

Every error caused by bad input (a config key, a CLI option, a log line, a certificate file) is a
:class:`SafecertError`. Its string is a single line that names the offending field and value and
says how to fix it; the CLI prints exactly that line and exits with code 2. Tracebacks are for bugs.
"""

from __future__ import annotations


class SafecertError(Exception):
    """Bad input, stated in one line: ``field: problem; fix``."""

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None) -> None:
        self.field = field
        self.fix = fix
        text = message if field is None else f"{field}: {message}"
        if fix:
            text = f"{text}; {fix}"
        super().__init__(" ".join(text.split()))


class ConfigError(SafecertError):
    """A configuration file, model file or command-line option is invalid."""


class DataError(SafecertError):
    """An input data file (logs, episodes, weights, certificate) is malformed or inconsistent."""


class OracleError(SafecertError):
    """A policy oracle cannot be reached or set up (raised before a run starts, never mid-run)."""


class SolverError(SafecertError):
    """A solver is unavailable or was configured wrongly."""
