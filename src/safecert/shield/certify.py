"""Building a shield certificate: the one path behind ``safecert shield certify`` and ``synthesize``.

Both commands read the model and the logs, settle on a shield D (given, default the full shield;
or synthesized for ε), bring it into its complete form (every live state listed, a state a given
shield omits is halt-only — :func:`safecert.shield.guard.permitted_actions`), evaluate it with
:func:`build_result` and write into ``out``:

* ``model.toml`` — a byte copy of the model (evidence ``model-copy``; its digest equals the
  model's);
* ``shield.json`` — the complete shield that was certified (evidence ``shield``);
* ``shield.md`` (and ``shield.png`` for models with a ``[layout]``) — readable views;
* ``certificate.json`` — last, so a certificate on disk always has its evidence beside it.

The verdict claims only what was checked (:func:`verdict_for`): PASS iff V̄_T(s0) ≤ ε, FAIL
otherwise, BOUND when no ε was stated. :mod:`safecert.shield.check` rebuilds the whole ``result``
with the same :func:`build_result` from ``parameters`` and the evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from safecert.canonical import canonical_json
from safecert.certificate import (
    ShieldCertificate,
    make_certificate,
    read_certificate,
    write_certificate,
)
from safecert.document import FileDigest, Inputs, durable_write, file_digest
from safecert.errors import ConfigError, DataError
from safecert.shield.estimate import RowEstimates, estimate
from safecert.shield.logs import iter_steps
from safecert.shield.model import ShieldModel, load_model
from safecert.shield.reach import full_shield, robust_rows, value_iteration
from safecert.shield.report import (
    allowed_from_json,
    allowed_to_json,
    missing_live_states,
    plot_grid,
    table_rows,
    write_markdown,
)
from safecert.shield.result import (
    CertifyParameters,
    Method,
    RouteStep,
    ShieldResult,
    ShieldRow,
    SynthesizeParameters,
)
from safecert.shield.synthesis import METHODS, forbidden_fraction, goal_route

Verdict = Literal["PASS", "FAIL", "BOUND"]

#: evidence files next to the certificate (paths relative to its folder)
MODEL_COPY, SHIELD_FILE, CERTIFICATE = "model.toml", "shield.json", "certificate.json"


@dataclass(frozen=True)
class ShieldRun:
    """What a certify/synthesize run produced: the certificate, the certified shield (complete,
    ``allowed[s, a]``), V̄_T per state, the files written, the live states a given shield left out
    (certified halt-only) and a readable summary."""

    certificate: ShieldCertificate
    model: ShieldModel
    allowed: np.ndarray
    values: np.ndarray
    written: list[Path]
    missing_states: list[str]
    summary: dict[str, Any]


def verdict_for(bound: float, epsilon: float | None) -> Verdict:
    """PASS iff V̄_T(s0) ≤ ε, FAIL otherwise; BOUND when no ε was stated (nothing is claimed
    about the bound beyond its value)."""
    if epsilon is None:
        return "BOUND"
    return "PASS" if bound <= epsilon else "FAIL"


def load_inputs(
    model_path: Path,
    logs_path: Path | None,
    *,
    anytime: bool = False,
    counts: list[Path] | None = None,
) -> tuple[ShieldModel, RowEstimates]:
    """The model and its estimates: from the logs (streamed once) — committed-budget, or every
    visit when ``anytime`` or the model's ``anytime`` key is set (:func:`uses_anytime`) — or from
    count tables ``counts`` (summed; anytime sets only, :mod:`safecert.shield.counts`). Exactly
    one of ``logs_path`` and ``counts`` is given."""
    if (logs_path is None) == (not counts):
        raise ConfigError(
            "give either --logs or --counts", field="logs", fix="pass exactly one of them"
        )
    model = load_model(model_path)
    if counts:
        from safecert.shield.counts import estimates_from_counts, merge, require_anytime

        require_anytime(uses_anytime(model, anytime))
        table = merge(model, [Path(c) for c in counts])
        return model, estimates_from_counts(model, table, anytime=uses_anytime(model, anytime))
    assert logs_path is not None
    return model, estimate(
        model, iter_steps(logs_path, model), anytime=uses_anytime(model, anytime)
    )


def uses_anytime(model: ShieldModel, flag: bool) -> bool:
    """Anytime sets when asked on the command line or by the model (``anytime = true``)."""
    return bool(flag or model.anytime)


def complete_shield(model: ShieldModel, allowed: np.ndarray) -> np.ndarray:
    """``allowed`` as ``shield.json`` states it: unsafe rows halt-only (they never act: A2), halt
    permitted everywhere. The array every certificate and every check evaluates."""
    return allowed_from_json(model, allowed_to_json(model, allowed))


def build_result(
    model: ShieldModel,
    est: RowEstimates,
    allowed: np.ndarray,
    *,
    epsilon: float | None,
    method: Method,
    fallback_all_halt: bool | None,
) -> ShieldResult:
    """The certificate's ``result`` for shield ``allowed`` (a complete shield,
    :func:`complete_shield`): the Lemma 2 confidence sets of ``est`` (radius β + η), robust value
    iteration over ``model.horizon`` steps (Thm. 1) and the diagnostics. Deterministic: the
    checker calls it on the evidence and compares every field to the last bit."""
    rows = robust_rows(model, est)
    values, _ = value_iteration(rows, allowed, model.horizon)
    route = goal_route(model, rows, allowed)
    table = []
    for s, a in np.argwhere((model.k >= 2) & model.live[:, None]):
        radius = float(rows.radius[s, a])
        table.append(
            ShieldRow(
                state=model.labels[s],
                action=model.actions[a],
                n0=int(est.n0[s, a]),
                visits=int(est.visits[s, a]),
                beta=radius if np.isfinite(radius) else None,
                vacuous=bool(est.vacuous[s, a]),
            )
        )
    return ShieldResult(
        bound=float(values[model.initial]),
        epsilon=epsilon,
        horizon=model.horizon,
        delta=model.delta,
        eta=model.eta,
        initial=model.labels[model.initial],
        method=method,
        allowed=allowed_to_json(model, allowed),
        values={model.labels[s]: float(values[s]) for s in np.flatnonzero(model.live)},
        rows=table,
        forbidden_fraction=forbidden_fraction(model, allowed),
        live_pairs=model.live_pairs,
        stochastic_rows=model.stochastic_rows,
        missed_budget=est.missed_budget,
        steps=est.steps,
        episodes=est.episodes,
        goal_reachable=None if model.goal is None else route is not None,
        fallback_all_halt=fallback_all_halt,
        confidence="anytime" if est.anytime else "committed",
        goal_route=None
        if route is None
        else [
            RouteStep(
                state=model.labels[s],
                action=model.actions[a],
                next_state=model.labels[s2],
                seen=int(est.counts[s, a, model.successor_position(s, a, s2)]),
            )
            for s, a, s2 in route
        ],
    )


def read_shield(path: Path, model: ShieldModel, field: str = "--shield") -> dict[str, Any]:
    """A shield table ``{state: [actions]}`` from a ``shield.json`` or a shield certificate (its
    ``result.allowed``); states it omits are halt-only when evaluated."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist", field=field)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not JSON ({exc})", field=field) from None
    if isinstance(data, dict) and data.get("kind") == "shield":
        cert = read_certificate(path)
        assert isinstance(cert, ShieldCertificate)
        data = cert.result.allowed
    allowed_from_json(model, data, field)  # validates labels and actions
    return dict(data)


def certify_shield(
    model_path: Path,
    logs_path: Path | None,
    out: Path,
    *,
    shield_path: Path | None = None,
    epsilon: float | None = None,
    sign_key: Path | None = None,
    anytime: bool = False,
    counts: list[Path] | None = None,
) -> ShieldRun:
    """Certify a given shield (default: the full shield): V̄_T(s0) with confidence 1 − δ, verdict
    PASS/FAIL against ``epsilon``, or BOUND without one. Live states the shield omits are
    certified halt-only, and the certificate records the complete shield. ``anytime``:
    time-uniform sets on every logged visit (also when the model says ``anytime = true``).
    ``counts``: count tables instead of ``logs_path`` (:mod:`safecert.shield.counts`; anytime
    only); the certificate records each table's digest (role ``counts``)."""
    if epsilon is not None and not 0 <= epsilon <= 1:
        raise ConfigError(f"must be in [0, 1], got {epsilon}", field="epsilon")
    _check_sign_key(sign_key)
    out = Path(out)
    if shield_path is not None and Path(shield_path).resolve() == (out / SHIELD_FILE).resolve():
        raise ConfigError(
            f"{shield_path} is the {SHIELD_FILE} this run writes",
            field="shield",
            fix="choose another --out",
        )
    model, est = load_inputs(model_path, logs_path, anytime=anytime, counts=counts)
    missing: list[str] = []
    if shield_path is None:
        allowed = full_shield(model)
    else:
        table = read_shield(shield_path, model)
        missing = missing_live_states(model, table)
        allowed = allowed_from_json(model, table, "--shield")
    allowed = complete_shield(model, allowed)
    result = build_result(
        model, est, allowed, epsilon=epsilon, method="given", fallback_all_halt=None
    )
    files = _input_digests(model_path, logs_path, shield_path, counts)
    params = CertifyParameters(command="certify", epsilon=epsilon, anytime=est.anytime)
    return _write(out, model_path, model, est, allowed, result, params, files, missing, sign_key)


def synthesize_shield(
    model_path: Path,
    logs_path: Path | None,
    out: Path,
    *,
    epsilon: float,
    method: str = "greedy",
    rho_min: float = 1e-3,
    sign_key: Path | None = None,
    anytime: bool = False,
    counts: list[Path] | None = None,
) -> ShieldRun:
    """Synthesize the least-restrictive shield with V̄_T(s0) ≤ ε (Alg. 1 and variants; Cor. 2:
    no sample splitting) and certify it; the verdict is PASS by construction."""
    from safecert.shield.synthesis import synthesize

    if not 0 <= epsilon < 1:
        raise ConfigError(f"must be in [0, 1), got {epsilon}", field="epsilon")
    if not 0 < rho_min <= 1e6:  # also rejects nan and inf
        raise ConfigError(f"must be in (0, 1e6], got {rho_min}", field="rho_min")
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}", field="method", fix=f"use {METHODS}")
    _check_sign_key(sign_key)
    model, est = load_inputs(model_path, logs_path, anytime=anytime, counts=counts)
    res = synthesize(model, est, epsilon, method=method, rho_min=rho_min)
    allowed = complete_shield(model, res.allowed)
    params = SynthesizeParameters(
        command="synthesize",
        epsilon=epsilon,
        method=cast(Literal["greedy", "additive", "robust_q"], method),  # checked above
        rho_min=rho_min,
        anytime=est.anytime,
    )
    result = build_result(
        model,
        est,
        allowed,
        epsilon=epsilon,
        method=params.method,
        fallback_all_halt=res.fallback_all_halt,
    )
    files = _input_digests(model_path, logs_path, None, counts)
    notes = {"fallback": "greedy lost the goal; additive kept it"} if res.fell_back_to else {}
    return _write(out, model_path, model, est, allowed, result, params, files, [], sign_key, notes)


def short_of_budget(result: ShieldResult) -> list[str]:
    """The vacuous rows — fewer visits than their budget n0, as ``(state, action) visits/n0``
    (anytime: never visited, ``(state, action) 0 visits``): their confidence sets are every
    distribution on K(s,a), so they count as worst case."""
    if result.confidence == "anytime":
        return [f"({r.state}, {r.action}) 0 visits" for r in result.rows if r.vacuous]
    return [f"({r.state}, {r.action}) {r.visits}/{r.n0}" for r in result.rows if r.visits < r.n0]


def _check_sign_key(sign_key: Path | None) -> None:
    """Refuse a missing or unusable key before any work is done (the signature is written last)."""
    if sign_key is not None:
        from safecert.signing import load_private_key

        load_private_key(Path(sign_key))


def _input_digests(
    model_path: Path, logs_path: Path | None, shield_path: Path | None, counts: list[Path] | None
) -> list[FileDigest]:
    root = Path.cwd()
    files = [file_digest("model", model_path, root)]
    if logs_path is not None:
        files.append(file_digest("logs", logs_path, root))
    files += [file_digest("counts", Path(c), root) for c in counts or []]
    if shield_path is not None:
        files.append(file_digest("shield", shield_path, root))
    return files


def _write(
    out: Path,
    model_path: Path,
    model: ShieldModel,
    est: RowEstimates,
    allowed: np.ndarray,
    result: ShieldResult,
    params: CertifyParameters | SynthesizeParameters,
    files: list[FileDigest],
    missing: list[str],
    sign_key: Path | None,
    notes: dict[str, str] | None = None,
) -> ShieldRun:
    out.mkdir(parents=True, exist_ok=True)
    durable_write(out / MODEL_COPY, Path(model_path).read_bytes())
    durable_write(out / SHIELD_FILE, canonical_json(result.allowed))
    evidence = [
        file_digest("model-copy", out / MODEL_COPY, out),
        file_digest("shield", out / SHIELD_FILE, out),
    ]
    cert = make_certificate(
        "shield",
        verdict_for(result.bound, params.epsilon),
        parameters=params.model_dump(mode="json"),
        inputs=Inputs(root=str(Path.cwd().resolve()), files=files, evidence=evidence),
        seed=None,
        result=result,
    )
    assert isinstance(cert, ShieldCertificate)
    values = np.array([result.values.get(label, 1.0) for label in model.labels])
    summary: dict[str, Any] = {
        "certificate V̄_T(s0)": f"{result.bound:.5f}",
        "epsilon": "none stated (BOUND)" if params.epsilon is None else params.epsilon,
        "verdict": cert.verdict,
        "forbidden": f"{100 * result.forbidden_fraction:.1f} % of {result.live_pairs} live pairs",
        "rows short of budget": f"{est.missed_budget} of {model.stochastic_rows}",
        "confidence sets": result.confidence,
        "confidence": f"{1 - model.delta:g} (δ = {model.delta:g}), T = {model.horizon}",
        "method": result.method,
        "goal_reachable": result.goal_reachable,
    }
    short = short_of_budget(result)
    if short:
        more = f" and {len(short) - 10} more" if len(short) > 10 else ""
        summary["short of budget (vacuous rows)"] = ", ".join(short[:10]) + more
    summary.update(notes or {})
    if missing:
        summary["halt-only (not in --shield)"] = f"{len(missing)} live states: {missing[:5]}"
    rows = table_rows(model, allowed, values)
    write_markdown(out / "shield.md", f"Shield for {model.name}", summary, rows)
    written = [out / MODEL_COPY, out / SHIELD_FILE, out / "shield.md"]
    png = plot_grid(
        model, allowed, values, out / "shield.png", f"{model.name}: V̄_T(s0) = {result.bound:.3f}"
    )
    written += [png] if png else []
    written.append(write_certificate(cert, out / CERTIFICATE, sign_key=sign_key))
    return ShieldRun(cert, model, allowed, values, written, missing, summary)
