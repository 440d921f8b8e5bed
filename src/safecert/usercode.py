"""Code and commands the user names: ``module:attr`` callables and program command lines.

One place for both, used by every engine: black-box ``python:`` policies and environments (in
their worker processes, :mod:`safecert.isolation`), the shield's abstraction and action map, and
``exec:`` vendors and MCP upstream servers (command lines, never a shell).

* :func:`import_from` imports ``module:attr`` with a folder first on ``sys.path``; a module of the
  same name imported earlier from elsewhere is forgotten first, so the code that runs is that
  folder's (the one hashed into a certificate).
* :func:`split_command` splits a command line like a POSIX shell would, without running one;
  ``python``/``python3`` mean the interpreter running safecert (``sys.executable``), so a vendor
  script sees the same packages; give an absolute path to choose another interpreter.

Every problem is one :class:`safecert.errors.ConfigError` line naming the field.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path

from safecert.errors import ConfigError

__all__ = ["INTERPRETERS", "command_program", "import_from", "split_command"]

#: program names that mean "the interpreter running safecert"
INTERPRETERS = frozenset({"python", "python3", Path(sys.executable).name})


def import_from(target: str, base_dir: Path, *, field: str) -> object:
    """Import ``module:attr`` with ``base_dir`` on ``sys.path``; one ConfigError line on failure."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{target!r} is not module:attr", field=field, fix="e.g. mypkg.pol:act")
    if str(base_dir) in sys.path:
        sys.path.remove(str(base_dir))
    sys.path.insert(0, str(base_dir))
    _forget_shadowed(module_name, Path(base_dir))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import module {module_name!r} ({exc})",
            field=field,
            fix=f"make it importable from {base_dir}",
        ) from None
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}", field=field)
        obj = getattr(obj, part)
    return obj


def _forget_shadowed(module_name: str, base_dir: Path) -> None:
    """Drop an already imported module of this name that came from another folder than the
    config's own copy, so the code that runs (and is hashed) is the config's."""
    stem = base_dir / Path(*module_name.split("."))
    own = next((p for p in (stem.with_suffix(".py"), stem / "__init__.py") if p.is_file()), None)
    loaded = sys.modules.get(module_name)
    source = getattr(loaded, "__file__", None)
    if own is None or loaded is None or source is None:
        return
    if Path(source).resolve() != own.resolve():
        for name in [n for n in sys.modules if n == module_name or n.startswith(module_name + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()


def split_command(command: str, *, field: str, example: str) -> list[str]:
    """``command`` split into its program and arguments (no shell); an interpreter name becomes
    ``sys.executable``. ConfigError on ``field`` for unbalanced quotes or an empty command."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"cannot split command {command!r} ({exc})", field=field) from None
    if not argv:
        raise ConfigError("names no program", field=field, fix=f"e.g. {example}")
    if argv[0] in INTERPRETERS:
        argv[0] = sys.executable
    return argv


def command_program(command: str) -> str:
    """The program as written in ``command`` (before :func:`split_command` resolves it)."""
    return shlex.split(command)[0]
