"""Boolean expressions over named state sets (``unsafe``/``goal`` in the shield model).

``and or not`` (or ``&& || & | ! ~``), parentheses, ``true``/``false``; names are predicates or
state labels. A small recursive-descent parser, no ``eval``: any malformed, unknown-name, too long
or too deeply nested input raises :class:`ConfigError` naming the field, and nothing else.
Precedence as in Python: ``not`` > ``and`` > ``or``, both binary operators left-associative.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from safecert.errors import ConfigError

MAX_CHARS = 10_000
MAX_DEPTH = 64  # ≈ 5 Python frames per level: far below the recursion limit

_TOKEN = re.compile(r"\s*(\(|\)|&&|\|\||[&|!~]|[A-Za-z_][A-Za-z0-9_.:\-]*)")


def _tokens(text: str, field: str) -> list[str]:
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConfigError(
                f"cannot parse {text!r} at position {pos}",
                field=field,
                fix="use names, and/or/not, parentheses",
            )
        out.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def eval_expression(text: str, names: dict[str, np.ndarray], field: str) -> np.ndarray:
    """Evaluate a boolean expression over named boolean arrays (vectorised over states).

    Grammar: ``or := and (('or'|'|'|'||') and)*``, ``and := not (('and'|'&'|'&&') not)*``,
    ``not := ('not'|'!'|'~') not | atom``, ``atom := NAME | true | false | '(' or ')'``.
    Unknown names raise :class:`ConfigError` naming ``field``.
    """
    if len(text) > MAX_CHARS:
        raise ConfigError(f"expression longer than {MAX_CHARS} characters", field=field)
    toks = _tokens(text, field)
    if not toks:
        raise ConfigError("empty expression", field=field, fix="write e.g. 'harm' or 'a and not b'")
    shape = next(iter(names.values())).shape if names else (0,)
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(toks):
            raise ConfigError(f"{text!r} ends early", field=field, fix="complete the expression")
        pos += 1
        return toks[pos - 1]

    def p_or() -> np.ndarray:
        val = p_and()
        while peek() in ("or", "|", "||"):
            take()
            val = val | p_and()
        return val

    def p_and() -> np.ndarray:
        val = p_not()
        while peek() in ("and", "&", "&&"):
            take()
            val = val & p_not()
        return val

    def p_not() -> np.ndarray:
        if peek() in ("not", "!", "~"):
            take()
            return ~nested(p_not)
        return atom()

    depth = 0

    def nested(parse: Callable[[], np.ndarray]) -> np.ndarray:
        nonlocal depth
        depth += 1
        if depth > MAX_DEPTH:
            raise ConfigError(f"expression nested deeper than {MAX_DEPTH}", field=field)
        try:
            return parse()
        finally:
            depth -= 1

    def atom() -> np.ndarray:
        tok = take()
        if tok == "(":
            val = nested(p_or)
            if take() != ")":
                raise ConfigError(f"missing ')' in {text!r}", field=field)
            return val
        if tok in ("true", "false"):
            return np.full(shape, tok == "true")
        if tok in names:
            return names[tok].copy()
        raise ConfigError(
            f"unknown name {tok!r} in {text!r}",
            field=field,
            fix=f"use one of: {', '.join(sorted(names)[:20])}",
        )

    val = p_or()
    if pos != len(toks):
        raise ConfigError(f"unexpected {toks[pos]!r} in {text!r}", field=field)
    return val
