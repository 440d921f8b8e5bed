"""Independent re-check of a kind="shield" certificate (``safecert verify``).

Nothing is taken from ``result``; the claim is re-derived from ``parameters`` and the evidence:

* **digests** — every file in ``inputs`` is re-hashed (:func:`check_file_digests`): the original
  model and logs (and a given ``--shield``) under ``inputs.root`` (or ``--inputs DIR``), the model
  copy and ``shield.json`` next to the certificate (or in ``--data DIR``); the logs are looked for
  at ``--logs``, then by name in ``--data``, at the recorded path, then next to the certificate;
  count tables (role ``counts``, instead of logs) at their recorded paths (or under ``--inputs``).
  The model copy's recorded digest must equal the original model's.
* **model** — T, δ, η, s0, the unsafe and goal sets, K(s,a) and the budgets n0 come from the model
  copy; ε (or none) from ``parameters``.
* **shield** — from ``shield.json``: it must list every live state (a state it omits would be
  halt-only, as the runtime guard treats it) and equal ``result.allowed``; halt must be permitted
  in every state of ``result.allowed``. For ``synthesize`` the synthesizer is re-run with the
  recorded method, ε and ρ_min and must return the same shield.
* **result** — the logs (or the count tables, summed: anytime only) are streamed again into the committed-budget estimates (or, for an anytime
  certificate — ``parameters.anytime`` or the model copy's ``anytime`` — every visit), the confidence
  sets rebuilt and robust value iteration re-run; the whole expected ``result`` is rebuilt with
  the builder that wrote it (:func:`safecert.shield.certify.build_result`) and compared path by
  path (one failing check per differing field, both values shown); the verdict is recomputed from
  the recomputed bound and ``parameters.epsilon``.
"""

from __future__ import annotations

import json
from pathlib import Path

from safecert.audit import Evidence, check_file_digests, locate_evidence, locate_input
from safecert.certificate import Certificate, FileDigest, ShieldCertificate, sha256_file
from safecert.errors import DataError, SafecertError
from safecert.shield.certify import build_result, complete_shield, uses_anytime, verdict_for
from safecert.shield.counts import estimates_from_counts, merge
from safecert.shield.estimate import estimate
from safecert.shield.logs import iter_steps
from safecert.shield.model import load_model
from safecert.shield.report import allowed_from_json, allowed_to_json, missing_live_states
from safecert.shield.result import SynthesizeParameters, parse_parameters
from safecert.verification import VerificationReport


def check(cert: Certificate, evidence: Evidence) -> VerificationReport:
    """Re-derive a shield certificate from its parameters and evidence (module docstring)."""
    if not isinstance(cert, ShieldCertificate):
        raise DataError(f"is {cert.kind!r}, not 'shield'", field="certificate.kind")
    params = parse_parameters(cert.parameters)
    report = VerificationReport("shield")
    report.equal("seed (a shield certificate draws nothing at random)", None, cert.seed)
    model_entry = _entry(cert.inputs.files, "model", "files")
    count_entries = [e for e in cert.inputs.files if e.role == "counts"]
    logs_entry = None if count_entries else _entry(cert.inputs.files, "logs", "files")
    if count_entries:  # certify reads the logs or count tables, never both
        logs_entries = [e.path for e in cert.inputs.files if e.role == "logs"]
        report.add("inputs: count tables, no logs", not logs_entries, ", ".join(logs_entries))
    copy_entry = _entry(cert.inputs.evidence, "model-copy", "evidence")
    shield_entry = _entry(cert.inputs.evidence, "shield", "evidence")
    logs_path = None if logs_entry is None else _find_logs(cert, logs_entry, evidence)

    # digests: every input and evidence file (count tables under inputs.root or --inputs); the
    # logs where they were found
    others = [e for e in cert.inputs.files if e is not logs_entry]
    inputs = cert.inputs.model_copy(update={"files": others})
    check_file_digests(cert.model_copy(update={"inputs": inputs}), evidence, report)
    if logs_entry is not None and logs_path is not None:
        report.equal(f"logs sha256 ({logs_path})", sha256_file(logs_path), logs_entry.sha256)
    report.equal("model copy sha256 = model sha256", copy_entry.sha256, model_entry.sha256)

    try:
        model = load_model(locate_evidence(copy_entry, evidence))
    except SafecertError as exc:
        report.add("model copy", False, str(exc))
        return report
    try:
        if logs_path is None:
            table = merge(model, [locate_input(cert, e, evidence) for e in count_entries])
            est = estimates_from_counts(model, table, anytime=uses_anytime(model, params.anytime))
        else:
            est = estimate(
                model, iter_steps(logs_path, model), anytime=uses_anytime(model, params.anytime)
            )
    except SafecertError as exc:
        report.add("logs", False, str(exc))
        return report
    report.equal(
        "parameters.anytime (true when the model copy says anytime = true)",
        uses_anytime(model, params.anytime),
        params.anytime,
    )
    shield_path = locate_evidence(shield_entry, evidence)
    try:
        table = json.loads(shield_path.read_text(encoding="utf-8"))
        allowed = complete_shield(model, allowed_from_json(model, table, "shield.json"))
    except (OSError, ValueError, SafecertError) as exc:
        report.add("shield.json", False, str(exc))
        return report

    missing = missing_live_states(model, table)
    report.add(
        "shield.json lists every live state",
        not missing,
        f"{len(missing)} missing (halt-only): {', '.join(missing[:5])}"
        if missing
        else f"{int(model.live.sum())} live states",
    )
    report.equal("shield.json = result.allowed", table, cert.result.allowed)
    halt = model.actions[model.halt]
    no_halt = [s for s, acts in cert.result.allowed.items() if halt not in acts]
    report.add(
        "halt permitted in every state of result.allowed",
        not no_halt,
        f"not in {', '.join(no_halt[:5])}" if no_halt else "",
    )

    fallback: bool | None = None
    if isinstance(params, SynthesizeParameters):
        from safecert.shield.synthesis import synthesize

        name = f"shield.json = synthesize({params.method}, ε={params.epsilon:g}, ρ_min={params.rho_min:g})"
        try:
            res = synthesize(
                model, est, params.epsilon, method=params.method, rho_min=params.rho_min
            )
        except SafecertError as exc:
            report.add(name, False, str(exc))
        else:
            fallback = res.fallback_all_halt
            report.equal(name, allowed_to_json(model, complete_shield(model, res.allowed)), table)
    method = params.method if isinstance(params, SynthesizeParameters) else "given"

    fresh = build_result(
        model, est, allowed, epsilon=params.epsilon, method=method, fallback_all_halt=fallback
    )
    report.compare_documents("result", fresh, cert.result)
    report.verdict_check(verdict_for(fresh.bound, params.epsilon), cert.verdict)
    return report


def _entry(entries: list[FileDigest], role: str, where: str) -> FileDigest:
    found = [e for e in entries if e.role == role]
    if len(found) != 1:
        raise DataError(
            f"has {len(found)} entries of role {role!r}, a shield certificate has exactly one",
            field=f"certificate.inputs.{where}",
            fix="regenerate the certificate with safecert shield",
        )
    return found[0]


def _find_logs(cert: Certificate, entry: FileDigest, evidence: Evidence) -> Path:
    """``--logs``, else a file of the recorded name in ``--data``, else the recorded path (under
    ``--inputs`` or ``inputs.root``), else a file of that name next to the certificate."""
    if evidence.logs is not None:
        if not Path(evidence.logs).is_file():
            raise DataError(f"{evidence.logs} does not exist", field="logs")
        return Path(evidence.logs)
    name = Path(entry.path).name
    candidates = [Path(evidence.data_dir) / name] if evidence.data_dir else []
    candidates += [locate_input(cert, entry, evidence), evidence.certificate_path.parent / name]
    for path in candidates:
        if path.is_file():
            return path
    raise DataError(
        f"cannot find the logs ({entry.path})",
        field="logs",
        fix="pass --logs, or --data DIR with the logs in it",
    )
