"""The typed ``result`` of a ``bnn`` certificate (what ``safecert bnn verify`` claims and records).

Every model is strict (:class:`~safecert.document.StrictModel`): unknown keys are rejected, nothing
is coerced and no field has a default, so a certificate with a missing or mistyped field does not
parse. ``None`` appears only where an absent value is legitimate: no invariant and no runtimes when
the time budget ran out before any ε was attempted, ``sigma`` when ε cannot be stated in σ.

Layout::

    system, solver, verifier_margin, reason, machine_dependent
    epsilon      {value, unit: "sigma"|"absolute", sigma: ε/σ | null, absolute: [half-width per layer]}
    acceptance_probability      Π_i P(|N(0, σ_i)| ≤ ε_i): one raw posterior draw lies in W_ε
    checks       {closure|initial|unsafe: "infeasible" | "not reached" | "node limit" | "timeout" |
                  "error" | "witness did not replay" | {"counterexample": {x, x_next}}}
    invariant    {hidden, layers: [{W, b}, …]} | null          (Inv = {x ∈ B : g(x) ≥ 0})
    iterations, verifier_calls, sampled_violations, spurious_witnesses, counterexamples [{…}]
    runtimes_s   {learner_s, verifier_s, falsifier_s, total_s, wall_s, search_s} | null
    search       [{epsilon, unit, verdict, reason, iterations, runtime_s, machine_dependent,
                   witness: {x0, weights: [[{W, b}, …] per step]} | null}, …]  (every ε tried)

``machine_dependent`` is true where a wall-clock guard (``limits.per_epsilon_s``, ``total_s``,
``solver_s``) cut the run: its reason then begins ``wall-clock guard`` and another machine, or the
same one under another load, may reach a different result. Where it is false every field but the
timings follows from ``parameters`` and the evidence, bit for bit.

What ``safecert verify`` re-derives from ``parameters`` and the evidence and what is descriptive
only is listed in :mod:`safecert.bnn.check`. This module imports nothing but pydantic, so that
reading any certificate never needs the BNN engine's dependencies.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from safecert.document import StrictModel

Condition = Literal["closure", "initial", "unsafe"]
Unit = Literal["sigma", "absolute"]
Verdict = Literal["SAFE", "UNKNOWN"]


class EpsilonRecord(StrictModel):
    """ε as certified: the value and its unit, ε/σ when every Bayesian layer shares one σ (else
    ``None``), and the absolute half-width of the weight box per policy layer (0 where the layer
    is deterministic)."""

    value: float
    unit: Unit
    sigma: float | None
    absolute: list[float]


class StateTransition(StrictModel):
    """A state ``x`` and, for a closure violation, its successor ``x_next`` (else ``None``)."""

    x: list[float]
    x_next: list[float] | None


class CounterexampleOutcome(StrictModel):
    """A check that ended in a counterexample replayed in float64."""

    counterexample: StateTransition


CheckOutcome = (
    Literal["infeasible", "not reached", "node limit", "timeout", "error", "witness did not replay"]
    | CounterexampleOutcome
)


class Checks(StrictModel):
    """The three conditions of the last verifier answer. SAFE needs all three ``"infeasible"``."""

    closure: CheckOutcome
    initial: CheckOutcome
    unsafe: CheckOutcome


class LayerRecord(StrictModel):
    """One layer of ``g`` in Keras layout (``z = x @ W + b``), exact float64 values."""

    W: list[list[float]]
    b: list[float]


class InvariantRecord(StrictModel):
    """The invariant network ``g`` (input normalisation folded into the first layer)."""

    hidden: list[int]
    layers: list[LayerRecord]


class CounterexampleRecord(StateTransition):
    """A counterexample met during CEGIS (history; the final invariant excludes it)."""

    condition: Condition


class Runtimes(StrictModel):
    """Seconds spent in the described attempt — ``learner_s``, ``verifier_s``, ``falsifier_s`` and
    ``total_s`` in this process's CPU seconds, ``wall_s`` on the wall clock — and in the whole
    search (``search_s``, wall clock). Descriptive: timings cannot be re-derived and are not
    checked."""

    learner_s: float
    verifier_s: float
    falsifier_s: float
    total_s: float
    wall_s: float
    search_s: float


class WitnessRecord(StrictModel):
    """A trajectory showing that no invariant exists at a row's ε: the start (in X0) and the
    weights of each step (each inside that ε's box). ``safecert verify`` replays it in float64 and
    re-derives the row's reason from the replay."""

    x0: list[float]
    weights: list[list[LayerRecord]]


class SearchRow(StrictModel):
    """One ε tried, in order, with what Alg. 1 said. ``safecert verify`` replays the search's ε
    sequence from the verdicts and checks these ε values against it, and replays ``witness`` where
    a row holds one; ``machine_dependent`` must agree with the reason (a wall-clock guard's);
    ``runtime_s`` (CPU seconds) is descriptive."""

    epsilon: float
    unit: Unit
    verdict: Verdict
    reason: str
    iterations: int
    runtime_s: float
    machine_dependent: bool
    witness: WitnessRecord | None


class BnnResult(StrictModel):
    """The ``result`` of a ``bnn`` certificate (module docstring for the layout).

    It describes one attempt: the certified one with the largest ε (verdict SAFE), else the last
    one tried (UNKNOWN), else none (UNKNOWN, ``invariant`` and ``runtimes_s`` are ``None`` and
    ``epsilon`` is the first ε the parameters plan). ``verifier_margin`` is the soundness margin
    the verifier proved with (:data:`safecert.bnn.verifier.DEFAULT_MARGIN`).

    Re-derived by ``safecert verify``: ``system``, ``solver``, ``verifier_margin``, ``epsilon``,
    ``acceptance_probability``, ``checks`` (SAFE), ``reason`` and ``iterations`` (against the
    search row described, with what a guard that stopped the search adds), ``machine_dependent``,
    the ε values in ``search``, the invariant's shape. Descriptive only:
    ``verifier_calls``, ``sampled_violations``, ``spurious_witnesses``, ``counterexamples``,
    ``runtimes_s`` and the rows' ``runtime_s`` (history of the run; re-deriving them would mean
    re-running CEGIS).
    """

    system: str
    solver: str
    verifier_margin: float
    reason: str
    machine_dependent: bool
    epsilon: EpsilonRecord
    acceptance_probability: float
    checks: Checks
    invariant: InvariantRecord | None
    iterations: int
    verifier_calls: int
    sampled_violations: int
    spurious_witnesses: int
    counterexamples: list[CounterexampleRecord]
    runtimes_s: Runtimes | None
    search: list[SearchRow]

    @model_validator(mode="before")
    @classmethod
    def _old_format(cls, data: Any) -> Any:
        if isinstance(data, dict) and "machine_dependent" not in data:
            raise ValueError(
                "a certificate from before work-unit budgets (no machine_dependent): "
                "re-run safecert bnn verify to regenerate it"
            )
        return data
