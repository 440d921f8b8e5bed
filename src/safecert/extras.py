"""Optional dependencies: which extra provides which package, and the one-line error when one is
missing.

The base install (``pip install safecert``: numpy, scipy, pydantic, typer, rich, cryptography,
orjson) runs ``plan``, ``bound``, ``keygen``, ``sign``, ``diff``, ``report``, ``shield diagnose``
and ``shield ingest``. Each engine needs one extra (``pyproject.toml``, ``[project.optional-
dependencies]``); :data:`EXTRAS` lists the modules each extra makes importable and
:data:`COMMANDS` the extra each command needs. A command checks its extra before it reads or writes
anything (:func:`require_extra`), so a missing package is one line and exit code 2 — never a
traceback and never a half-written run.

Example::

    from safecert.extras import require_extra
    require_extra("shield")  # MissingExtraError when matplotlib is not installed:
    # matplotlib is not installed; it comes with the shield extra: pip install 'safecert[shield]'
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import TracebackType

from safecert.errors import SafecertError

#: top-level import name → the distribution pip installs it from
PACKAGES: dict[str, str] = {
    "gymnasium": "gymnasium",
    "mujoco": "mujoco",
    "onnxruntime": "onnxruntime",
    "httpx": "httpx",
    "httpcore": "httpcore",
    "matplotlib": "matplotlib",
    "PIL": "pillow",
    "onnx": "onnx",
    "torch": "torch",
    "highspy": "highspy",
    "pyscipopt": "pyscipopt",
    "stable_baselines3": "stable-baselines3",
    "ray": "ray",
    "mcp": "mcp",
    "mcp_types": "mcp-types",
    "anyio": "anyio",
    "uvicorn": "uvicorn",
    "agents": "openai-agents",
    "langchain_core": "langchain-core",
    "langgraph": "langgraph",
    "opentelemetry": "opentelemetry-api",
    "starlette": "starlette",
    "duckdb": "duckdb",
    "pyarrow": "pyarrow",
}

_BLACKBOX = ("gymnasium", "mujoco", "onnxruntime", "httpx", "httpcore", "matplotlib", "PIL")
_SHIELD = ("matplotlib", "duckdb", "pyarrow")

#: extra → the modules it makes importable (an extra that includes another lists its modules too;
#: ``tests/test_extras.py`` checks this table against pyproject.toml)
EXTRAS: dict[str, tuple[str, ...]] = {
    "blackbox": _BLACKBOX,
    "shield": _SHIELD,
    "agents": (
        *_SHIELD,
        "mcp",
        "mcp_types",
        "anyio",
        "uvicorn",
        "httpx",
        "agents",
        "starlette",
        "langchain_core",
        "langgraph",
    ),
    "bnn": ("torch", "highspy", "pyscipopt", "onnx", "matplotlib"),
    "torch": (*_BLACKBOX, "torch"),
    "sb3": (*_BLACKBOX, "torch", "stable_baselines3"),
    "ray": (*_BLACKBOX, "ray"),
    "otel": ("opentelemetry",),
}

#: command path (as typed after ``safecert``) → the extra it needs
COMMANDS: dict[str, str] = {
    "certify": "blackbox",
    "rejudge": "blackbox",
    "shield synthesize": "shield",
    "shield certify": "shield",
    "shield count": "shield",
    "shield serve": "agents",
    "bnn verify": "bnn",
    "bnn export": "bnn",
}

#: ``policy = "SCHEME:..."`` → the extra its oracle needs
POLICY_SCHEMES: dict[str, str] = {"onnx": "blackbox", "sb3": "sb3", "torchscript": "torch"}

_PACKAGE_DIR = Path(__file__).resolve().parent


class MissingExtraError(SafecertError):
    """An optional package is not installed; the message names it, the extra that provides it
    and the ``pip install`` command."""

    def __init__(self, module: str, extra: str) -> None:
        self.module = module
        self.extra = extra
        dist = PACKAGES.get(module, module)
        named = dist if dist == module else f"{dist} (import {module})"
        super().__init__(
            f"{named} is not installed; it comes with the {extra} extra: "
            f"pip install 'safecert[{extra}]' (in a checkout: pip install -e '.[{extra}]')"
        )


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a blocked or half-removed module counts as missing
        return False


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` (a key of :data:`EXTRAS`) that cannot be imported."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return [m for m in dict.fromkeys(EXTRAS[extra]) if not installed(m)]


def require_extra(extra: str) -> None:
    """Raise :class:`MissingExtraError` for the first module of ``extra`` that is not installed.

    >>> require_extra("shield")  # silent when matplotlib is installed
    """
    absent = missing(extra)
    if absent:
        raise MissingExtraError(absent[0], extra)


def require_command(command: str) -> None:
    """:func:`require_extra` for the extra ``command`` (``"shield synthesize"``) needs, if any."""
    extra = COMMANDS.get(command)
    if extra is not None:
        require_extra(extra)


def missing_extra(exc: ModuleNotFoundError) -> MissingExtraError | None:
    """The one-line error for ``exc`` when it says that safecert's own code imported a known
    optional package that is not installed; ``None`` otherwise (an unknown module, a missing
    submodule of an installed package, or an import made by user or third-party code: those stay
    tracebacks, as bugs or the user's own errors)."""
    top = (exc.name or "").partition(".")[0]
    if top not in PACKAGES or installed(top):
        return None
    site = _import_site(exc.__traceback__)
    if site is None:
        return None
    return MissingExtraError(top, _extra_for(top, site))


def _import_site(tb: TracebackType | None) -> Path | None:
    """The safecert source file whose import statement failed: the innermost frame of the
    traceback in safecert, provided every frame inside it is import machinery (importlib, or a
    finder's ``find_spec``) — not code of another module that was being imported."""
    frames: list[tuple[str, str]] = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    for i in range(len(frames) - 1, -1, -1):
        path = _ours(frames[i][0])
        if path is not None:
            inner = frames[i + 1 :]
            return path if all(_machinery(f, name) for f, name in inner) else None
    return None


def _ours(filename: str) -> Path | None:
    path = Path(filename).resolve()
    return path if path.is_relative_to(_PACKAGE_DIR) and path.suffix == ".py" else None


def _machinery(filename: str, name: str) -> bool:
    return (
        filename.startswith("<frozen importlib")
        or Path(filename).parent.name == "importlib"
        or name in ("find_spec", "_find_spec")
    )


def _extra_for(module: str, site: Path) -> str:
    """The extra to name: the engine's own (``safecert/shield/...`` → shield) when it provides
    ``module``, else the first extra that does."""
    engine = site.relative_to(_PACKAGE_DIR).parts[0]
    engine = {"envs": "blackbox", "report": "blackbox"}.get(engine, engine)
    if module in EXTRAS.get(engine, ()):
        return engine
    return next(extra for extra, modules in EXTRAS.items() if module in modules)


__all__ = [
    "COMMANDS",
    "EXTRAS",
    "PACKAGES",
    "POLICY_SCHEMES",
    "MissingExtraError",
    "installed",
    "missing",
    "missing_extra",
    "require_command",
    "require_extra",
]
