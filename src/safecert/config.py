"""Configuration as data: TOML files parsed into validated pydantic models.

:func:`load_toml` and :func:`parse_model` turn every problem into one :class:`ConfigError` line
naming the key (dotted path), the value received and the fix; unknown keys are errors, not silently
ignored (models set ``extra="forbid"``).
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import tomllib
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from safecert.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

#: pydantic is imported where a model is validated, not with this module: reading a TOML file
#: (``safecert certify`` reads the policy before anything else) does not pay for it
M = TypeVar("M", bound="BaseModel")

#: configs are small; anything larger is refused before parsing
MAX_TOML_BYTES = 16 << 20
#: parts of one dotted key (``a.b.c`` has 3): tomllib's work and memory grow with the square of
#: this number (4,000 parts: 75 MB; 20,000: 1.6 GB), real configs use fewer than 5
MAX_KEY_PARTS = 64
#: arrays and tables nested inside each other (tomllib recurses once per level)
MAX_TOML_NESTING = 64


def read_regular_file(path: Path, *, field: str, what: str, max_bytes: int) -> bytes:
    """The bytes of ``path``, refused in one :class:`ConfigError` line on ``field`` unless it is
    a readable regular file of at most ``max_bytes``.

    A folder is named "is a directory", a FIFO, socket or device "is not a regular file" (never
    "does not exist"); the file is opened non-blocking (a FIFO without a writer cannot hang the
    open) and its type is checked again on the open descriptor (no swap between check and read);
    at most ``max_bytes + 1`` bytes are ever read (``/dev/zero`` cannot be read forever)."""
    path = Path(path)
    require_regular_file(path, field=field, what=what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(
            f"{path} cannot be read ({exc.strerror})", field=field, fix="check its permissions"
        ) from None
    try:
        info = os.fstat(fd)
        _require_regular(path, info, field, what)
        if info.st_size > max_bytes:
            raise _too_large(path, info.st_size, field, max_bytes)
        chunks, size = [], 0
        while size <= max_bytes and (block := os.read(fd, min(1 << 20, max_bytes + 1 - size))):
            chunks.append(block)
            size += len(block)
        if size > max_bytes:  # the file grew while it was read
            raise _too_large(path, size, field, max_bytes)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror})", field=field) from None
    finally:
        os.close(fd)


def require_regular_file(path: Path, *, field: str, what: str) -> None:
    """Refuse ``path`` in one :class:`ConfigError` line on ``field`` unless it is a regular file:
    a missing path "does not exist", a folder "is a directory", a FIFO, socket or device "is not a
    regular file (it is a FIFO)". Follows symbolic links, as opening the file would."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(
            f"{path} does not exist", field=field, fix=f"pass an existing {what}"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror})", field=field) from None
    _require_regular(path, info, field, what)


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _require_regular(path: Path, info: os.stat_result, field: str, what: str) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            f"{path} is a directory", field=field, fix=f"pass the {what} itself, not its folder"
        )
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
        raise ConfigError(
            f"{path} is not a regular file (it is {kind})", field=field, fix=f"pass a {what}"
        )


def _too_large(path: Path, size: int, field: str, max_bytes: int) -> ConfigError:
    return ConfigError(
        f"{path} is {size:,} bytes, more than the {max_bytes:,} allowed",
        field=field,
        fix="pass the right file",
    )


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML config file; every problem is one :class:`ConfigError` line on ``config``.

    Guarantee: the parser only sees a regular UTF-8 file of at most :data:`MAX_TOML_BYTES` whose
    keys have at most :data:`MAX_KEY_PARTS` dotted parts and whose arrays/tables nest at most
    :data:`MAX_TOML_NESTING` deep (:func:`check_toml_shape`, one linear scan before parsing:
    tomllib's cost is quadratic in the parts of a dotted key and recursive in the nesting)."""
    path = Path(path)
    raw = read_regular_file(path, field="config", what="TOML file", max_bytes=MAX_TOML_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} is not UTF-8 text (line {line}, byte {exc.start})",
            field="config",
            fix="save the file as UTF-8",
        ) from None
    check_toml_shape(text, str(path))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc})", field="config") from None


# outside strings and comments: what opens a string or a comment, brackets, and what ends a key
_TOML_SPECIAL = re.compile(r"\"\"\"|'''|[\"'#\[\]{}=,\n.]")
_BASIC_REST = re.compile(r'(?:[^"\\\n]|\\[^\n])*+"?')
_LITERAL_REST = re.compile(r"[^'\n]*+'?")
_ML_BASIC_REST = re.compile(r'(?:[^"\\]|\\.|"(?!""))*+(?:"""|$)', re.DOTALL)


def check_toml_shape(text: str, source: str) -> None:
    """Refuse TOML text whose dotted keys or nesting exceed the limits, in one linear pass.

    Dots are counted outside strings and comments between two of ``= , [ ] { }`` or a newline:
    a dotted key's parts are exactly such a run (quoted parts included), while a value holds at
    most one dot there (a float or a time), so a valid config is never refused for its numbers.
    The scan follows TOML's four string forms: a dot or bracket inside a string never counts."""
    dots = depth = 0
    pos, n = 0, len(text)
    rest = {'"': _BASIC_REST, "'": _LITERAL_REST, '"""': _ML_BASIC_REST}
    while (m := _TOML_SPECIAL.search(text, pos)) is not None:
        tok, pos = m.group(), m.end()
        if tok == ".":
            dots += 1
            if dots >= MAX_KEY_PARTS:
                raise _shape_error(text, pos, source, f"a key of more than {MAX_KEY_PARTS} parts")
        elif tok in rest:
            pos = rest[tok].match(text, pos).end()  # type: ignore[union-attr]
        elif tok == "'''":
            end = text.find("'''", pos)
            pos = n if end < 0 else end + 3
        else:
            dots = 0
            if tok == "#":
                end = text.find("\n", pos)
                pos = n if end < 0 else end
            elif tok in "[{":
                depth += 1
                if depth > MAX_TOML_NESTING:
                    raise _shape_error(
                        text, pos, source, f"arrays or tables nested over {MAX_TOML_NESTING} deep"
                    )
            elif tok in "]}":
                depth = max(depth - 1, 0)


def _shape_error(text: str, pos: int, source: str, what: str) -> ConfigError:
    line = text.count("\n", 0, pos) + 1
    return ConfigError(
        f"{source} has {what} (line {line})",
        field="config",
        fix="write the config with short keys and little nesting",
    )


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
    """Validate ``data`` against ``model``; one error becomes one line naming its key.

    An unknown key is reported before any other error (a misspelt key usually also makes a
    required one missing), with the closest known key of its table: ``episode: unknown key;
    did you mean `episodes`?``."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_to_config_error(exc, prefix, model) from None


def validation_to_config_error(
    exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> ConfigError:
    """One :class:`ConfigError` line for a pydantic error: the first unknown key if there is one
    (with a "did you mean" from ``model``'s keys at that place), else the first error. The key is
    the dotted path of the user's document: pydantic's union-member tags (``float``,
    ``list[str]``, a model's class name) are left out when ``model`` is given."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    parts, known = _user_path(model, [p for p in err["loc"] if not str(p).startswith("function-")])
    key = ".".join(([prefix] if prefix else []) + parts) or (prefix or "config")
    kind = err["type"]
    received = err.get("input")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(parts[-1] if parts else "", known, n=1, cutoff=0.6)
        if close:
            fix = f"did you mean `{close[0]}`?"
        elif known:
            shown = ", ".join(sorted(known)[:16]) + (", …" if len(known) > 16 else "")
            fix = f"remove it or check its spelling (keys here: {shown})"
        else:
            fix = "remove it or check its spelling"
        return ConfigError("unknown key", field=key, fix=fix)
    if kind == "missing":
        return ConfigError("is required", field=key, fix="add it to the config")
    msg = err["msg"]
    for noise in ("Value error, ", "Assertion failed, "):
        msg = msg.replace(noise, "")
    text = repr(received)
    if len(text) > 60:
        text = text[:57] + "..."
    return ConfigError(f"{msg} (got {text})", field=key)


def _user_path(model: type[BaseModel] | None, loc: list[Any]) -> tuple[list[str], list[str]]:
    """``loc`` without union tags, and the keys a table at ``loc[:-1]`` may hold (walking
    ``model``'s annotations); ``(loc as strings, [])`` where the walk cannot follow."""
    from pydantic import BaseModel

    if model is None:
        return [str(p) for p in loc], []
    here: list[Any] = [model]
    out: list[str] = []
    known: list[str] = []
    for part in loc:
        models = [t for t in here if isinstance(t, type) and issubclass(t, BaseModel)]
        known = [k for m in models for k in _keys(m)]
        if len(here) > 1 and isinstance(part, str):
            tagged = [t for t in here if _tag(t) == part]
            if tagged:
                here = _members(tagged[0])
                models = [t for t in here if isinstance(t, type) and issubclass(t, BaseModel)]
                known = [k for m in models for k in _keys(m)]
                continue
        out.append(str(part))
        here = _step(here, part)
    return out, known


def _keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _members(tp: Any) -> list[Any]:
    """A type's union members (``None`` left out), or the type itself."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(tp) for m in _members(arg) if m is not type(None)]
    return [tp]


def _step(here: list[Any], part: Any) -> list[Any]:
    """The types found under key or index ``part`` of a value of one of the types ``here``."""
    from pydantic import BaseModel

    out: list[Any] = []
    for tp in here:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str):
            for name, f in tp.model_fields.items():
                if part in (name, f.alias):
                    out += _members(f.annotation)
        elif origin is dict and len(args) == 2 and isinstance(part, str):
            out += _members(args[1])
        elif origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
            out += _members(args[0] if origin is not tuple else args[min(part, len(args) - 1)])
    return out


def _tag(tp: Any) -> str:
    """The name pydantic gives a union member in an error's location (``list[float]``)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None:
        return getattr(tp, "__name__", str(tp))
    return f"{getattr(origin, '__name__', str(origin))}[{','.join(_tag(a) for a in args)}]"


def load_toml(model: type[M], path: Path) -> M:
    """Read a TOML file into ``model``."""
    return parse_model(model, read_toml(path))
