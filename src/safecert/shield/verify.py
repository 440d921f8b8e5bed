"""Independent re-check of a kind="shield" certificate (``safecert verify``).

From the evidence — the model copy next to the certificate and the logs (``--logs``, else a file
of the recorded name in ``--data`` or next to the certificate, else the recorded absolute path) —
it re-derives the committed budgets, streams the logs again, rebuilds every confidence set,
re-runs robust value iteration for the certified shield and compares: input hashes, per-row n0 /
visits / β / vacuous, the bound V̄_T(s0), the per-state values, the forbidden fraction, halt always
permitted, and the verdict against ε.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from safecert.certificate import Certificate, Evidence, VerificationReport, sha256_file
from safecert.errors import DataError
from safecert.shield.estimate import estimate
from safecert.shield.logs import iter_steps
from safecert.shield.model import load_model
from safecert.shield.reach import robust_rows, value_iteration
from safecert.shield.report import allowed_from_json
from safecert.shield.synthesis import forbidden_fraction

TOL = 1e-9


def _find(name: str, evidence: Evidence, explicit: Path | None, recorded: str | None) -> Path:
    if explicit is not None:
        return Path(explicit)
    folders = [evidence.data_dir] if evidence.data_dir else []
    folders.append(evidence.certificate_path.parent)
    for folder in folders:
        if recorded and (Path(folder) / Path(recorded).name).is_file():
            return Path(folder) / Path(recorded).name
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    raise DataError(
        f"cannot find the {name} ({recorded})",
        field=name,
        fix=f"pass --{'logs' if name == 'logs' else 'data'} or put it next to the certificate",
    )


def check(cert: Certificate, evidence: Evidence) -> VerificationReport:
    report = VerificationReport("shield")
    params, result = cert.parameters, cert.result
    model_path = _find("model", evidence, None, params.get("model_file", "model.toml"))
    logs_path = _find("logs", evidence, evidence.logs, params.get("logs_file"))
    report.add(
        "model sha256",
        sha256_file(model_path) == cert.inputs.get("model_sha256"),
        str(model_path),
    )
    report.add(
        "logs sha256", sha256_file(logs_path) == cert.inputs.get("logs_sha256"), str(logs_path)
    )
    model = load_model(model_path)
    est = estimate(model, iter_steps(logs_path, model))
    rows = robust_rows(model, est)
    recorded = {(r["state"], r["action"]): r for r in result.get("rows", [])}
    bad = []
    for s, a in np.argwhere((model.k >= 2) & model.live[:, None]):
        r = recorded.get((model.labels[s], model.actions[a]))
        radius = float(rows.radius[s, a])
        beta = None if not np.isfinite(radius) else radius
        if (
            r is None
            or r["n0"] != est.n0[s, a]
            or r["visits"] != est.visits[s, a]
            or r["vacuous"] != bool(est.vacuous[s, a])
            or (r["beta"] is None) != (beta is None)
            or (beta is not None and abs(r["beta"] - beta) > TOL)
        ):
            bad.append(model.row_label(s, a))
    report.add(
        "rows (n0, visits, beta, vacuous)",
        not bad and len(recorded) == model.stochastic_rows,
        f"{len(bad)} mismatching: {', '.join(bad[:3])}" if bad else f"{len(recorded)} rows",
    )
    allowed = allowed_from_json(model, result.get("allowed", {}), "result.allowed")
    listed = result.get("allowed", {})
    report.add(
        "halt always permitted",
        all(model.actions[model.halt] in acts for acts in listed.values()),
        "",
    )
    values, _ = value_iteration(rows, allowed, model.horizon)
    bound = float(values[model.initial])
    report.add(
        "bound V̄_T(s0)",
        abs(bound - float(result.get("bound", np.nan))) <= TOL,
        f"recomputed {bound:.10f}, certificate {result.get('bound')}",
    )
    per_state = result.get("values", {})
    worst = max((abs(values[model.labels.index(k)] - v) for k, v in per_state.items()), default=0.0)
    report.add("per-state values", worst <= TOL and len(per_state) > 0, f"max diff {worst:.2e}")
    frac = forbidden_fraction(model, allowed)
    report.add(
        "forbidden fraction",
        abs(frac - float(result.get("forbidden_fraction", np.nan))) <= TOL,
        f"{frac:.4f}",
    )
    eps = result.get("epsilon")
    expected = "PASS" if eps is None or bound <= eps else "FAIL"
    report.add("verdict", cert.verdict == expected, f"{cert.verdict} (recomputed {expected})")
    return report
