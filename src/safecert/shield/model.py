"""The abstract plant: a finite controlled Markov chain read from a TOML model (paper Sec. II).

Two ways to name states (docs/shield.md has full examples):

* **predicate mode** (``predicates = [...]``): a state is the truth assignment of the Boolean
  predicates, ``2**p`` states; state ``i`` sets predicate ``j`` iff bit ``j`` of ``i`` is 1. In logs a
  state is an object ``{"in_prod": false, ...}`` with exactly these keys. ``unsafe``/``goal`` are
  boolean expressions over predicate names (``"chmod_prod and not confirmed"``). ``[successors]``
  maps an action to the predicates it may change; K(s,a) = every state that agrees with s on all
  other predicates (default: any predicate may change).
* **label mode** (no ``predicates``; ``states = ["r0c0", ...]``): a state is a string label. ``unsafe``
  /``goal`` are a list of labels or an expression whose names are labels (name true iff the state is
  that label). ``[successors]`` maps an action either to a list of labels (same K from every state) or
  to a table ``{label = [labels], "*" = [labels]}`` (``"*"`` is the default for unlisted states); an
  action with no entry may go anywhere.

Always: ``halt`` ends the episode in the absorbing sink ⊥ (index ``n_states``, value 0); unsafe states
are absorbing (their only successor is themselves, A2). Rows are indexed ``(s, a)``; the padded
successor table ``succ[s, a, :k[s, a]]`` lists K(s,a) in a fixed order shared by the estimates and
the confidence sets. Budgets n0(s,a) are computed here, from the model alone, before any log is read.

Expressions use ``and or not`` (or ``& | ! ~``), parentheses, ``true``/``false``; parsed by
:mod:`safecert.expressions`, labels dialect (no ``eval``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from safecert.config import parse_model, read_toml
from safecert.errors import ConfigError, DataError, SafecertError
from safecert.expressions import eval_labels as eval_expression
from safecert.shield.layout import LayoutSpec

MAX_PREDICATES = 16
#: label mode: as many states as predicate mode allows
MAX_STATES = 1 << MAX_PREDICATES
MAX_TABLE_ENTRIES = 50_000_000
#: the horizon, and the work of robust value iteration (horizon x entries of the successor table)
MAX_HORIZON = 10_000
MAX_VI_WORK = 1_000_000_000
#: n0 per row: more visits than any log holds
MAX_PER_ROW = 1_000_000_000
SINK_LABEL = "⊥"

# ----------------------------------------------------------------------------- TOML schema


class BudgetSpec(BaseModel):
    """n0 per row: ``per_row`` visits, or ``floor(fraction * episodes * horizon / R)`` (R = the
    number of stochastic live rows), both fixed from design constants only."""

    model_config = ConfigDict(extra="forbid", strict=True)
    per_row: int | None = Field(default=None, ge=1, le=MAX_PER_ROW)
    fraction_of_even_share: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False)
    episodes: int | None = Field(default=None, ge=1, le=MAX_PER_ROW)

    @model_validator(mode="after")
    def _one_rule(self) -> BudgetSpec:
        if (self.per_row is None) == (self.fraction_of_even_share is None):
            raise ValueError("give exactly one of per_row or fraction_of_even_share")
        if self.fraction_of_even_share is not None and self.episodes is None:
            raise ValueError("fraction_of_even_share needs episodes (the planned M)")
        return self


class ModelSpec(BaseModel):
    """The model file. Numbers are strict (no coercion from strings, floats or booleans into
    integers; no inf or nan) and bounded by the limits above, each stated in its error."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = "shield-model"
    predicates: list[str] | None = None
    states: list[str] | None = None
    actions: list[str] = Field(min_length=1)
    halt: str = "halt"
    initial: dict[str, bool] | str
    unsafe: str | list[str]
    goal: str | list[str] | None = None
    horizon: int = Field(ge=1, le=MAX_HORIZON)
    delta: float = Field(gt=0, lt=1, allow_inf_nan=False)
    eta: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    #: time-uniform confidence sets over every logged visit (no budget needed; docs/methods.md)
    anytime: bool = False
    #: committed budgets n0; required unless the certificate is anytime (``anytime`` or --anytime)
    budget: BudgetSpec | None = None
    successors: dict[str, list[str] | dict[str, list[str]]] = Field(default_factory=dict)
    layout: LayoutSpec | None = None


# ----------------------------------------------------------------------------- the model


class ShieldModel:
    """A validated abstract model with enumerated states and the padded successor table.

    Attributes: ``labels`` (state names), ``actions``, ``halt`` (index), ``n_states``, ``sink``
    (= n_states), ``initial`` (index), ``unsafe``/``goal``/``live`` (bool arrays over states),
    ``horizon``, ``delta``, ``eta``, ``succ`` (n, m, kmax) int (padding -1), ``k`` (n, m),
    ``n0`` (n, m) committed budgets (0 for deterministic rows), ``stochastic_rows`` (R).
    """

    _names: Mapping[str, np.ndarray]  # expression names -> (n,) bool masks

    def __init__(self, spec: ModelSpec, source: Path | None = None) -> None:
        self.spec, self.source = spec, source
        self.name = spec.name
        self.actions = list(spec.actions)
        if len(set(self.actions)) != len(self.actions):
            raise ConfigError("duplicate action names", field="actions")
        if spec.halt not in self.actions:
            raise ConfigError(f"halt action {spec.halt!r} is not in actions", field="halt")
        self.halt = self.actions.index(spec.halt)
        self._action_index = {a: i for i, a in enumerate(self.actions)}
        self.horizon, self.delta, self.eta = spec.horizon, spec.delta, spec.eta
        self.predicates = spec.predicates
        if self.predicates is not None:
            self._init_predicates(self.predicates)
        else:
            self._init_labels(spec.states)
        self.sink = self.n_states
        self.unsafe = self._state_set(spec.unsafe, "unsafe")
        self.goal = None if spec.goal is None else self._state_set(spec.goal, "goal")
        self.live = ~self.unsafe
        self.initial = self.state_index(spec.initial, field="initial", error=ConfigError)
        if self.unsafe[self.initial]:
            raise ConfigError("the initial state is unsafe", field="initial")
        self._build_successors()
        self.stochastic_rows = int(((self.k >= 2) & self.live[:, None]).sum())
        self.anytime = spec.anytime
        self.has_budget = spec.budget is not None
        self.n0 = self._budgets(spec.budget) if spec.budget is not None else self._no_budget()
        self._position: dict[int, dict[int, int]] = {}

    # -- states ---------------------------------------------------------------------------
    def _init_predicates(self, preds: list[str]) -> None:
        if not preds or len(set(preds)) != len(preds):
            raise ConfigError("must be a non-empty list of distinct names", field="predicates")
        if len(preds) > MAX_PREDICATES:
            raise ConfigError(
                f"{len(preds)} predicates give too many states",
                field="predicates",
                fix=f"use at most {MAX_PREDICATES}",
            )
        if self.spec.states is not None:
            raise ConfigError("give predicates or states, not both", field="states")
        self.n_states = 1 << len(preds)
        idx = np.arange(self.n_states)
        self.bits = ((idx[:, None] >> np.arange(len(preds))) & 1).astype(bool)  # (n, p)
        self._names = {p: self.bits[:, j] for j, p in enumerate(preds)}
        self.labels = [
            "{" + ",".join(p for j, p in enumerate(preds) if self.bits[i, j]) + "}"
            for i in range(self.n_states)
        ]
        self._label_index = {lab: i for i, lab in enumerate(self.labels)}

    def _init_labels(self, states: list[str] | None) -> None:
        if not states:
            raise ConfigError(
                "is required when predicates is absent", field="states", fix="list the state labels"
            )
        if len(set(states)) != len(states):
            raise ConfigError("duplicate state labels", field="states")
        if SINK_LABEL in states:
            raise ConfigError(f"{SINK_LABEL!r} is reserved for the halt sink", field="states")
        if len(states) > MAX_STATES:
            raise ConfigError(
                f"{len(states)} states are too many",
                field="states",
                fix=f"use at most {MAX_STATES} (an abstraction, not the raw state space)",
            )
        self.n_states = len(states)
        self.labels = list(states)
        self._label_index = {lab: i for i, lab in enumerate(states)}
        self._names = _OneHot(self._label_index)

    def _state_set(self, value: str | list[str], field: str) -> np.ndarray:
        if isinstance(value, list):
            if self.predicates is not None:
                raise ConfigError("must be an expression in predicate mode", field=field)
            mask = np.zeros(self.n_states, dtype=bool)
            for i, lab in enumerate(value):
                mask[self.state_index(lab, field=f"{field}[{i}]", error=ConfigError)] = True
            return mask
        # label mode's _OneHot is a read-only mapping, all eval_expression needs
        return eval_expression(value, self._names, field)  # type: ignore[arg-type]

    def state_index(
        self, state: Any, *, field: str = "state", error: type[SafecertError] = DataError
    ) -> int:
        """Index of a state given as a predicate object (predicate mode) or a label string.

        Raises ``error`` (DataError for logs, ConfigError for the model file) naming ``field``."""
        if self.predicates is None:
            if not isinstance(state, str) or state not in self._label_index:
                raise error(
                    f"unknown state {state!r}", field=field, fix="use a label listed in states"
                )
            return self._label_index[state]
        if not isinstance(state, dict):
            raise error(
                f"expected an object of predicate values, got {state!r}",
                field=field,
                fix=f"give {{{', '.join(self.predicates)}}} as true/false",
            )
        if len(state) != len(self.predicates) or any(p not in state for p in self.predicates):
            unknown = [k for k in state if k not in self._names]
            missing = [p for p in self.predicates if p not in state]
            what = f"unknown predicate {unknown[0]!r}" if unknown else f"missing {missing[0]!r}"
            raise error(what, field=field, fix=f"use exactly: {', '.join(self.predicates)}")
        idx = 0
        for j, p in enumerate(self.predicates):
            v = state[p]
            if v is True:
                idx |= 1 << j
            elif v is not False:
                raise error(
                    f"predicate {p!r} is {v!r}, not a boolean", field=field, fix="use true/false"
                )
        return idx

    def state_repr(self, i: int) -> dict[str, bool] | str:
        """The log representation of state ``i`` (inverse of :meth:`state_index`)."""
        if i == self.sink:
            return SINK_LABEL
        if self.predicates is None:
            return self.labels[i]
        return {p: bool(self.bits[i, j]) for j, p in enumerate(self.predicates)}

    def action_index(self, name: Any, *, field: str = "action") -> int:
        if not isinstance(name, str) or name not in self._action_index:
            raise DataError(
                f"unknown action {name!r}",
                field=field,
                fix=f"use one of: {', '.join(self.actions)}",
            )
        return self._action_index[name]

    def is_unsafe(self, s: int) -> bool:
        return s != self.sink and bool(self.unsafe[s])

    # -- successors -----------------------------------------------------------------------
    def _declared(self, a: int) -> list[np.ndarray]:
        """Per live state, the declared candidate successors of action ``a``."""
        name = self.actions[a]
        decl = self.spec.successors.get(name)
        n = self.n_states
        every = np.arange(n)
        if self.predicates is not None:
            if decl is None:
                return [every] * n
            if not isinstance(decl, list):
                raise ConfigError(
                    "must list the predicates the action may change", field=f"successors.{name}"
                )
            mask = 0
            for p in decl:
                if p not in self._names:
                    raise ConfigError(f"unknown predicate {p!r}", field=f"successors.{name}")
                mask |= 1 << self.predicates.index(p)
            return [every[(every & ~mask) == (s & ~mask)] for s in range(n)]
        if decl is None:
            return [every] * n
        table = {"*": decl} if isinstance(decl, list) else decl
        default = table.get("*")
        out = []
        for lab in self.labels:
            labs = table.get(lab, default)
            if labs is None:
                out.append(every)
                continue
            idx = [
                self.state_index(x, field=f"successors.{name}.{lab}", error=ConfigError)
                for x in labs
            ]
            if not idx:
                raise ConfigError("empty successor list", field=f"successors.{name}.{lab}")
            out.append(np.array(sorted(set(idx))))
        for key in table:
            if key != "*":
                self.state_index(key, field=f"successors.{name}", error=ConfigError)
        return out

    def _build_successors(self) -> None:
        for name in self.spec.successors:
            if name not in self._action_index:
                raise ConfigError(f"unknown action {name!r}", field="successors")
        if self.spec.halt in self.spec.successors:
            raise ConfigError(
                "halt always goes to the sink ⊥", field=f"successors.{self.spec.halt}"
            )
        n, m = self.n_states, len(self.actions)
        lists: list[list[np.ndarray]] = [[np.array([])] * m for _ in range(n)]
        for a in range(m):
            declared = [] if a == self.halt else self._declared(a)
            for s in range(n):
                if self.unsafe[s]:
                    lists[s][a] = np.array([s])
                elif a == self.halt:
                    lists[s][a] = np.array([self.sink])
                else:
                    lists[s][a] = declared[s]
        self.k = np.array([[len(x) for x in row] for row in lists], dtype=np.int64)
        kmax = int(self.k.max())
        if n * m * kmax > MAX_TABLE_ENTRIES:
            raise ConfigError(
                f"successor table too large ({n}x{m}x{kmax})",
                field="successors",
                fix="declare K(s,a) for each action",
            )
        work = self.horizon * int(self.k.sum())
        if work > MAX_VI_WORK:
            raise ConfigError(
                f"value iteration would take {work:.3g} row updates (horizon {self.horizon} x "
                f"{int(self.k.sum())} successor entries), more than {MAX_VI_WORK:.0e}",
                field="horizon",
                fix="shorten the horizon or declare smaller K(s,a) in [successors]",
            )
        self.succ = np.full((n, m, kmax), -1, dtype=np.int64)
        for s in range(n):
            for a in range(m):
                self.succ[s, a, : self.k[s, a]] = lists[s][a]

    def successors(self, s: int, a: int) -> np.ndarray:
        """K(s, a) as state indices (the sink index for halt)."""
        return self.succ[s, a, : self.k[s, a]]

    def successor_position(self, s: int, a: int, s2: int) -> int:
        """Position of ``s2`` in K(s,a), or -1 when ``s2`` is not a declared successor."""
        row = s * len(self.actions) + a
        table = self._position.get(row)
        if table is None:
            table = {int(x): j for j, x in enumerate(self.successors(s, a))}
            self._position[row] = table
        return table.get(s2, -1)

    # -- budgets ----------------------------------------------------------------------------
    def _no_budget(self) -> np.ndarray:
        """n0 = 0 everywhere: only anytime estimates may be built (estimate() refuses otherwise)."""
        return np.zeros(self.k.shape, dtype=np.int64)

    def _budgets(self, b: BudgetSpec) -> np.ndarray:
        if b.per_row is not None:
            per = b.per_row
        else:
            assert b.fraction_of_even_share is not None and b.episodes is not None
            share = b.episodes * self.horizon / max(self.stochastic_rows, 1)
            per = math.floor(b.fraction_of_even_share * share)
            if per > MAX_PER_ROW:
                raise ConfigError(
                    f"the budget rule gives n0 = {per}, more than {MAX_PER_ROW}",
                    field="budget.fraction_of_even_share",
                    fix="lower fraction_of_even_share or episodes",
                )
            if per < 1:
                raise ConfigError(
                    f"the budget rule gives n0 = {per}",
                    field="budget",
                    fix="raise fraction_of_even_share or episodes",
                )
        n0 = np.where((self.k >= 2) & self.live[:, None], per, 0)
        return n0.astype(np.int64)

    @cached_property
    def working(self) -> np.ndarray:
        """States where something is left to decide: not unsafe, and some non-halt action may
        leave the state (an absorbing goal such as the sandbox's ``done`` is not working)."""
        moves = np.delete(self.succ, self.halt, axis=1)  # (n, m-1, kmax)
        here = np.arange(self.n_states)[:, None, None]
        leaves = ((moves >= 0) & (moves != here)).any(axis=(1, 2))
        return self.live & leaves

    @cached_property
    def live_pairs(self) -> int:
        """Number of live state–action pairs — every action (halt included) of every working
        state — the denominator of "forbidden fraction of live pairs" for every shield."""
        return int(self.working.sum()) * len(self.actions)

    def row_label(self, s: int, a: int) -> str:
        return f"{self.labels[s]} · {self.actions[a]}"


class _OneHot(Mapping[str, np.ndarray]):
    """Label mode's names for expressions: ``name -> (n,) bool`` true only at that state, built
    when an expression uses the name (never the n x n identity)."""

    def __init__(self, index: dict[str, int]) -> None:
        self._index = index

    def __getitem__(self, name: str) -> np.ndarray:
        mask = np.zeros(len(self._index), dtype=bool)
        mask[self._index[name]] = True
        return mask

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


def model_from_dict(data: dict[str, Any], source: Path | None = None) -> ShieldModel:
    """Validate a model given as a dict (the parsed TOML)."""
    return ShieldModel(parse_model(ModelSpec, data), source)


def load_model(path: Path) -> ShieldModel:
    """Read and validate a TOML model file (one-line :class:`ConfigError` on any problem)."""
    path = Path(path)
    return model_from_dict(read_toml(path), path)
