"""Structure-aware generators of hostile inputs, one per class of issue 27 (hypothesis strategies).

Each class is a way an input can ask for unbounded work or an unchecked conversion:

* **chains** — flat runs of thousands of ``+``, ``*``, ``and``, ``<``, ``[i]`` or ``.get`` in an
  expression (bounded in nesting, unbounded in length: recursion at evaluation);
* **nesting** — parentheses, unary operators, calls, ``not`` nested around the parser's limit;
* **numbers** — 400-digit integers, ``1e400``, ``10**10**10``, ``sqrt(-1)``, ``log(0)``, ``exp(1000)``
  (overflow, invalid operations, numpy warnings);
* **TOML bombs** — one dotted key or table header of up to 50,000 parts, arrays or inline tables
  nested thousands deep (tomllib: quadratic memory, recursion);
* **format strings** — ``cell_format`` widths of 3·10⁹, attribute/index access, positional fields;
* **near-miss keys** — a key renamed by one edit (``episode`` for ``episodes``);
* **special files** — the config given as a folder, a FIFO without a writer, ``/dev/zero``, a missing
  path or a link to ``/dev/zero``.

The formats (cost expressions, black-box TOML, shield model, BNN config) combine these with the
generic mutations of :mod:`tests.fuzz.harness`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.fuzz import harness

PATH_KINDS = (
    "file",
    "file",
    "file",
    "file",
    "file",
    "folder",
    "fifo",
    "dev-zero",
    "missing",
    "link",
)


@dataclass(frozen=True)
class Case:
    """One hostile input: ``data`` written to the format's target as a ``path_kind`` (a regular
    file, or a folder/FIFO/``/dev/zero``/missing path/link to ``/dev/zero`` in its place)."""

    data: bytes
    done: list[str] = field(default_factory=list)
    path_kind: str = "file"


# ----------------------------------------------------------------------------- expressions

FULL_LEAVES = (
    "obs[0]",
    "obs[3]",
    "obs[-1]",
    "obs[9]",
    "action",
    "reward",
    "t",
    'info["cost"]',
    'info.get("cost", 0)',
    'info["nope"]',
    "terminated",
    "1",
    "0",
    "2.5",
    "1e308",
    "1e400",
    "1" * 400,
    "-1",
    "true",
    '"s"',
)
NUMBER_BOMBS = (
    "10**10**10",
    "sqrt(-1)",
    "log(0)",
    "log(-1)",
    "exp(1000)",
    "1e308 * 10",
    "obs[0] ** 1e10",
    "1 / 0",
    "1 % 0",
    "tanh(1e400)",
    "(-8) ** 0.5",
    "norm(obs) ** 400",
    "sum(obs) / (obs[0] - obs[0])",
    "clip(1e400, -1e400, 1e400) - 1e400",
    "min(obs) * 1e308 * 1e308",
)
STRANGE = (
    "obs.__class__",
    "__import__('os')",
    "obs.get",
    "info.get('a')",
    "lambda: 1",
    "x if y else z",
    "[1, 2]",
    "obs[",
    "((1)",
    "1 +",
    "@",
    "",
    "   ",
    "obs[0.5]",
    "obs['a']",
    'info[0]["x"]',
    "max()",
    "abs(1, 2)",
)


@st.composite
def chain(draw: Callable, leaves: tuple[str, ...] = FULL_LEAVES) -> str:
    """A flat chain of one operator, long enough to overflow a recursive evaluator."""
    op = draw(st.sampled_from(["+", "*", "-", " and ", " or ", " < ", "==", "/", "%", "**"]))
    leaf = draw(st.sampled_from([x for x in leaves if len(x) < 12]))
    step = draw(st.sampled_from(["[0]", '["k"]', '.get("k", 0)'])) if draw(st.booleans()) else ""
    fits = (10_000 - len(leaf)) // len(step or op + leaf)  # the longest chain under the limit
    n = draw(st.sampled_from([2, 100, 900, 2000, 4999, fits, fits, fits + 1]))
    return leaf + step * n if step else op.join([leaf] * n)


@st.composite
def nesting(draw: Callable, leaf: str = "obs[0]") -> str:
    """``depth`` levels of one nesting construct, around the parser's depth limit (64)."""
    depth = draw(st.sampled_from([1, 20, 63, 64, 65, 100, 1000, 3000]))
    opener, closer = draw(
        st.sampled_from(
            [("(", ")"), ("-", ""), ("not ", ""), ("abs(", ")"), ("max(1, ", ")"), ("obs[", "]")]
        )
    )
    inner = draw(st.sampled_from(["0", leaf]))
    return opener * depth + inner + closer * depth


@st.composite
def expression(draw: Callable) -> str:
    """A hostile ``spec.cost``/``spec.goal``: a chain, a nest, a number bomb, a strange form, or a
    random well-formed combination of those."""
    kind = draw(st.sampled_from(["chain", "nesting", "bomb", "strange", "mixed", "mixed"]))
    if kind == "chain":
        return draw(chain())
    if kind == "nesting":
        return draw(nesting())
    if kind == "bomb":
        return draw(st.sampled_from(NUMBER_BOMBS))
    if kind == "strange":
        return draw(st.sampled_from(STRANGE))
    parts = draw(
        st.lists(
            st.one_of(st.sampled_from(FULL_LEAVES + NUMBER_BOMBS), chain(), nesting()),
            min_size=1,
            max_size=4,
        )
    )
    ops = draw(st.lists(st.sampled_from(["+", "*", " and ", " > ", "**"]), min_size=len(parts)))
    text = parts[0]
    for p, op in zip(parts[1:], ops, strict=False):
        text = f"({text}){op}({p})"
    return text


@st.composite
def label_expression(draw: Callable, labels: list[str]) -> str:
    """A hostile shield ``unsafe``/``goal``: chains and nests of labels, unknown names, garbage."""
    leaf = draw(st.sampled_from([*labels[:4], "true", "nope", "a.b:c-d", "()", "&&"]))
    kind = draw(st.sampled_from(["chain", "nest", "garbage"]))
    n = draw(st.integers(2, 4999))
    if kind == "chain":
        op = draw(st.sampled_from([" and ", " or ", " | ", " && "]))
        return op.join([leaf] * n)[:10_001]
    if kind == "nest":
        depth = draw(st.sampled_from([63, 64, 65, 1000]))
        opener, closer = draw(st.sampled_from([("(", ")"), ("not ", ""), ("!", "")]))
        return opener * depth + leaf + closer * depth
    return draw(st.text("()&|!~ abc.:-", max_size=200))


# ----------------------------------------------------------------------------- TOML text bombs


@st.composite
def toml_bomb(draw: Callable) -> tuple[str, str]:
    """TOML text to prepend to a document (and what it is): a bomb for the TOML reader."""
    kind = draw(st.sampled_from(["dotted", "header", "arrays", "tables", "digits", "quoted"]))
    n = draw(st.sampled_from([65, 500, 4000, 20_000, 50_000]))
    if kind == "dotted":
        return ".".join(["a"] * n) + " = 1\n", f"dotted key of {n} parts"
    if kind == "quoted":
        return ".".join(['"a.b"'] * n) + " = 1\n", f"quoted dotted key of {n} parts"
    if kind == "header":
        return "[" + ".".join(["t"] * n) + "]\n", f"table header of {n} parts"
    if kind == "arrays":
        return "zz = " + "[" * n + "]" * n + "\n", f"arrays nested {n} deep"
    if kind == "tables":
        return "zz = " + "{a = " * n + "1" + "}" * n + "\n", f"inline tables nested {n} deep"
    return "zz = " + "9" * min(n, 4000) + "\n", f"integer of {min(n, 4000)} digits"


def near_miss(key: str, edit: int) -> str:
    """``key`` with one edit: drop, double or swap a character, or change its case."""
    if len(key) < 2:
        return key + "s"
    i = edit % len(key)
    options = [
        key[:i] + key[i + 1 :],
        key[:i] + key[i] + key[i:],
        key[: i - 1] + key[i] + key[i - 1] + key[i + 1 :] if i else key[1] + key[0] + key[2:],
        key.upper(),
        key.rstrip("s") if key.endswith("s") else key + "s",
    ]
    return options[(edit // len(key)) % len(options)]


@st.composite
def renamed(draw: Callable, doc: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``doc`` with one key (top level or one table down) renamed by a near miss."""
    doc = copy.deepcopy(doc)
    tables = [doc] + [v for v in doc.values() if isinstance(v, dict) and v]
    table = draw(st.sampled_from(tables))
    key = draw(st.sampled_from(sorted(table)))
    new = near_miss(key, draw(st.integers(0, 200)))
    if new != key and new not in table:
        table[new] = table.pop(key)
    return doc, f"renamed {key!r} to {new!r}"


def huge_numbers() -> st.SearchStrategy[Any]:
    return st.sampled_from([10**400, -(10**400), 2**64, 1e308, -1e308, 3 * 10**9, 10**19])


# ----------------------------------------------------------------------------- the formats


@st.composite
def document_case(
    draw: Callable,
    base: dict[str, Any],
    fields: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]],
) -> Case:
    """A TOML config: the base with one or two hostile values in ``fields`` (paths into the
    document), maybe a near-miss key, a generic mutation, a bomb, and a special path kind."""
    doc, done = copy.deepcopy(base), []
    for path, values in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=2)):
        table = doc
        for k in path[:-1]:
            table = table.setdefault(k, {})
        table[path[-1]] = copy.deepcopy(draw(values))
        done.append(f"{'.'.join(path)} = {str(table[path[-1]])[:40]!r}")
    if draw(st.integers(0, 3)) == 0:
        doc, what = draw(renamed(doc))
        done.append(what)
    if draw(st.integers(0, 3)) == 0:
        doc, more = draw(harness.mutated(doc, allow_null=False))
        done += more
    text = harness.write_toml(doc)
    if draw(st.integers(0, 4)) == 0:
        bomb, what = draw(toml_bomb())
        text = bomb.encode() + text
        done.append(what)
    kind = draw(st.sampled_from(PATH_KINDS))
    if kind != "file":
        done.append(f"config is a {kind}")
    return Case(text, done, kind)


def blackbox_case(fmt: harness.Format) -> st.SearchStrategy[Case]:
    numeric = st.one_of(huge_numbers(), st.sampled_from([0, -1, 1.5, float("inf")]))
    return document_case(
        fmt.base,
        [
            (("spec", "cost"), expression()),
            (("spec", "goal"), expression()),
            (("episodes",), numeric),
            (("max_steps",), numeric),
            (("seed",), numeric),
            (("kpis", "return", "upper"), numeric),
            (("envelope", "act_noise", "levels"), st.lists(numeric, max_size=5)),
        ],
    )


def shield_case(fmt: harness.Format) -> st.SearchStrategy[Case]:
    labels = list(fmt.base.get("states", ["r0c0"]))
    widths = st.sampled_from(
        [
            "r{row:3000000000}c{col}",
            "{row.real}",
            "{row[0]}",
            "{}",
            "{0}",
            "{row!r}",
            "{row:{col}}",
            "r{row:02d}c{col}",
            "{" * 50,
            "x" * 5000,
            "r{row}c{col}",
        ]
    )
    return document_case(
        fmt.base,
        [
            (("layout", "cell_format"), widths),
            (("unsafe",), label_expression(labels)),
            (("goal",), label_expression(labels)),
            (("horizon",), huge_numbers()),
            (("delta",), huge_numbers()),
        ],
    )


def bnn_case(fmt: harness.Format) -> st.SearchStrategy[Case]:
    dyn = st.one_of(
        st.sampled_from(
            [
                "1" * 400 + " * x",
                "1e400 * x",
                "x * 1" + "0" * 300,
                "x + " * 2000 + "x",
                "(" * 3000 + "x" + ")" * 3000,
                "-" * 1000 + "x",
                "sin(x)",
                "x * y",
                "clip(x, 1, -1)",
                "pwl(x, [1, 0], [0, 1])",
                "x.__class__",
                "__import__('os')",
                "x / 0",
            ]
        ),
        nesting("x"),
    )
    interval = st.lists(st.one_of(huge_numbers(), st.sampled_from(["-pi/6", "1e400", "x"])))
    base = copy.deepcopy(fmt.base)  # a run that passes the door stops within seconds
    base["limits"] = {"per_epsilon_s": 1, "total_s": 2, "solver_s": 1, "max_iterations": 1}
    base["data"] = {**base.get("data", {}), "witness_rollouts": 200, "bootstrap": False}
    return document_case(
        base,
        [
            (("dynamics", "next", "x"), dyn),
            (("dynamics", "define", "uc"), dyn),
            (("dynamics", "choices"), st.lists(huge_numbers(), min_size=2, max_size=2)),
            (("sets", "domain", "x"), interval),
            (("sets", "initial", "box", "x"), interval),
            (("seed",), huge_numbers()),
            (("epsilon",), st.sampled_from(["1e400sigma", "1" * 400, 10**400, "-1sigma"])),
        ],
    )


@st.composite
def expression_case(draw: Callable) -> Case:
    """A ``spec.cost`` and a ``spec.goal`` (one line each, NUL-separated)."""
    cost, goal = draw(expression()), draw(st.one_of(expression(), st.just("no_termination")))
    return Case(
        cost.encode() + b"\0" + goal.encode(), [f"cost {cost[:60]!r}", f"goal {goal[:60]!r}"]
    )


def strategy(name: str) -> st.SearchStrategy[Case]:
    """The generator of one format (``cost-expression``, ``blackbox-toml``,
    ``shield-model-toml``, ``bnn-toml``)."""
    if name == "cost-expression":
        return expression_case()
    make, fmt = {
        "blackbox-toml": (blackbox_case, harness.blackbox_format),
        "shield-model-toml": (shield_case, harness.shield_model_format),
        "bnn-toml": (bnn_case, harness.bnn_format),
    }[name]
    return make(fmt())
