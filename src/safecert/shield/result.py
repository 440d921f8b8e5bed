"""The typed ``result`` and ``parameters`` of a shield certificate (kind ``shield``).

Every field is required (no defaults): a certificate missing one is malformed, never completed by
a guess; ``X | None`` means the key must be present and may be ``null``. Everything in
:class:`ShieldResult` is recomputed by :mod:`safecert.shield.check` from ``parameters``, the model
copy, the logs and ``shield.json`` with the same builder that wrote it
(:func:`safecert.shield.certify.build_result`), and compared field by field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from safecert.document import StrictModel
from safecert.errors import DataError

Method = Literal["given", "greedy", "additive", "robust_q"]
Confidence = Literal["committed", "anytime"]


class ShieldRow(StrictModel):
    """One stochastic live row (s, a) of the confidence sets (Lemma 2).

    ``n0``: the committed budget (anytime sets: the visits used, = ``visits``); ``visits``: every
    logged visit N(s,a) (surplus included); ``beta``: the L1 radius β + η of the confidence set,
    ``null`` when ``vacuous`` (fewer than n0 visits, anytime: none: the set is every distribution
    on K(s,a))."""

    state: str
    action: str
    n0: int
    visits: int
    beta: float | None
    vacuous: bool


class RouteStep(StrictModel):
    """One step of the goal witness: row (state, action) led to ``next_state`` in ``seen`` logged
    transitions (``seen`` = 0 only for an exact row, |K| = 1, known from the model)."""

    state: str
    action: str
    next_state: str
    seen: int


class ShieldResult(StrictModel):
    """What a shield certificate states.

    ``bound`` is V̄_T(s0) of the shield ``allowed`` (every live state → its permitted actions,
    halt always among them): with confidence 1 − ``delta`` over the logs, every controller the
    shield admits reaches an unsafe state within ``horizon`` executed calls from ``initial`` with
    probability at most ``bound`` (Thm. 1, Cor. 2). ``epsilon`` is the stated budget (``null``:
    none was stated, verdict BOUND). ``values``: V̄_T per live state. ``forbidden_fraction``:
    forbidden pairs of working states / ``live_pairs``. ``method``: ``given`` for
    ``shield certify``, else the synthesis method. ``goal_reachable``: the synthesizer's liveness
    heuristic (``null`` when the model has no goal); ``fallback_all_halt``: synthesis returned the
    all-halt shield (``null`` for ``given``). ``stochastic_rows`` is R; ``missed_budget`` the
    number of vacuous rows; ``steps``/``episodes`` how much log was read. ``confidence``:
    ``committed`` (Lemma 2 on the first n0 visits) or ``anytime`` (time-uniform sets on every
    visit, valid at every log size). ``goal_route``: the rows a witness path to the goal relied
    on (``null`` without a goal or when none is reachable); ``goal_reachable`` counts only
    transitions seen in the logs (and exact rows)."""

    bound: float
    epsilon: float | None
    horizon: int
    delta: float
    eta: float
    initial: str
    method: Method
    allowed: dict[str, list[str]]
    values: dict[str, float]
    rows: list[ShieldRow]
    forbidden_fraction: float
    live_pairs: int
    stochastic_rows: int
    missed_budget: int
    steps: int
    episodes: int
    goal_reachable: bool | None
    fallback_all_halt: bool | None
    confidence: Confidence
    goal_route: list[RouteStep] | None


class CertifyParameters(StrictModel):
    """``parameters`` of ``shield certify``: the stated budget ε, or ``null`` (verdict BOUND);
    ``anytime``: time-uniform sets on every visit (``--anytime`` or the model's ``anytime``)."""

    command: Literal["certify"]
    epsilon: float | None
    anytime: bool


class SynthesizeParameters(StrictModel):
    """``parameters`` of ``shield synthesize``: budget ε, method and ρ_min of the synthesizer."""

    command: Literal["synthesize"]
    epsilon: float
    method: Literal["greedy", "additive", "robust_q"]
    rho_min: float
    anytime: bool


ShieldParameters = Annotated[
    CertifyParameters | SynthesizeParameters, Field(discriminator="command")
]
_PARAMETERS: TypeAdapter[Any] = TypeAdapter(ShieldParameters)


def parse_parameters(data: Any) -> CertifyParameters | SynthesizeParameters:
    """Validate a shield certificate's ``parameters``; the first problem is one DataError line."""
    try:
        params: CertifyParameters | SynthesizeParameters = _PARAMETERS.validate_python(data)
        return params
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] in ("certify", "synthesize"):
            loc = loc[1:]
        where = ".".join(["certificate.parameters", *loc])
        raise DataError(
            "is missing" if err["type"] == "missing" else err["msg"],
            field=where,
            fix="regenerate the certificate with safecert shield",
        ) from None
