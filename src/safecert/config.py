"""Configuration as data: TOML files parsed into validated pydantic models.

:func:`load_toml` and :func:`parse_model` turn every problem into one :class:`ConfigError` line
naming the key (dotted path), the value received and the fix; unknown keys are errors, not silently
ignored (models set ``extra="forbid"``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from safecert.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

#: configs are small; anything larger is refused before parsing
MAX_TOML_BYTES = 16 << 20


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, one-line errors for a missing file or bad syntax."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"{path} does not exist", field="config", fix="pass an existing TOML file"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{path} cannot be read ({exc.strerror})", field="config", fix="check its permissions"
        ) from None
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError(
            f"{path} is {len(raw)} bytes; a config is at most {MAX_TOML_BYTES >> 20} MiB",
            field="config",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} is not UTF-8 text (line {line}, byte {exc.start})",
            field="config",
            fix="save the file as UTF-8",
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc})", field="config") from None
    except RecursionError:
        raise ConfigError(
            f"{path} nests arrays or tables too deeply", field="config", fix="flatten it"
        ) from None


def dump_toml(data: dict[str, Any]) -> str:
    """TOML text that :func:`read_toml` reads back as ``data`` (tables of strings, booleans,
    integers, floats — ``inf``/``nan`` included — arrays and nested tables; ``None`` values are
    left out, as TOML has no null). Used to write a config given as a dictionary to a file, so
    that it can be hashed and re-read like any other."""
    lines: list[str] = []
    _dump_table(data, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _dump_table(table: dict[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if v is not None and not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if path and (scalars or not tables):
        lines += ["", "[" + ".".join(_toml_key(k) for k in path) + "]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    for key, sub in tables.items():
        _dump_table(sub, [*path, key], lines)


def _toml_key(key: str) -> str:
    import re

    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(
            f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None
        )
        return "{ " + items + " }" if items else "{}"
    raise ConfigError(
        f"{type(value).__name__} cannot be written to TOML",
        field="config",
        fix="use strings, numbers, booleans, lists and tables",
    )


def parse_model(model: type[M], data: dict[str, Any], *, prefix: str = "") -> M:
    """Validate ``data`` against ``model``; the first error becomes one line naming its key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_to_config_error(exc, prefix) from None


def validation_to_config_error(exc: ValidationError, prefix: str = "") -> ConfigError:
    err = exc.errors()[0]
    parts = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
    key = ".".join(([prefix] if prefix else []) + parts) or (prefix or "config")
    kind = err["type"]
    received = err.get("input")
    if kind == "extra_forbidden":
        return ConfigError("unknown key", field=key, fix="remove it or check its spelling")
    if kind == "missing":
        return ConfigError("is required", field=key, fix="add it to the config")
    msg = err["msg"]
    for noise in ("Value error, ", "Assertion failed, "):
        msg = msg.replace(noise, "")
    text = repr(received)
    if len(text) > 60:
        text = text[:57] + "..."
    return ConfigError(f"{msg} (got {text})", field=key)


def load_toml(model: type[M], path: Path) -> M:
    """Read a TOML file into ``model``."""
    return parse_model(model, read_toml(path))
