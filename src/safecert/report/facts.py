"""The facts panel: everything a signer needs to know about a certificate, stated on one table.

Every report (black-box, sequential, shield, BNN) opens with the same panel, built here from the
certificate alone plus the signature file next to it: engine, verdict and its claim in one
sentence, every parameter, the digest of every input and evidence file, seed, safecert version,
date and signature status; for black-box runs also the noise kind and scale of every axis, the
declared and estimated ranges, the family size M and δ'. A value the certificate does not hold
is written as "not stated", never left out. A post-hoc judgement (``rejudge``) gets a banner with
the spec the episodes were run under beside the spec they are judged at now.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safecert.certificate import BlackboxCertificate, Certificate, SequentialCertificate
from safecert.document import sha256_file
from safecert.errors import DataError
from safecert.report.html import breakable, esc, table
from safecert.report.odd import level_key

NOT_STATED = "not stated"

#: what an axis level measures (the units of its scale)
AXIS_SCALES = {
    "obs_noise": "fraction of each observation dimension's range",
    "act_noise": "fraction of the action range (discrete: probability of a random action)",
    "delay": "action delay in steps",
    "mass": "multiplier of the nominal mass",
    "friction": "multiplier of the nominal friction",
    "damping": "multiplier of the nominal damping",
    "random_dynamics": "relative spread of randomised dynamics",
    "layout": "layout randomised (true/false)",
}


@dataclass(frozen=True)
class Fact:
    """One row of the panel: a stable key (``data-fact`` in the HTML), a label and the value."""

    key: str
    label: str
    value: str


def claim(cert: Certificate) -> str:
    """What the verdict claims, in one sentence (the verdict table of docs/architecture.md)."""
    if isinstance(cert, BlackboxCertificate | SequentialCertificate):
        r = cert.result
        n_pass, m = len(r.odd), len(r.cells)
        if cert.verdict == "PASS":
            return (
                f"With confidence {r.confidence:g}, family-wise over M = {r.family_size} cells, every "
                f"cell fails (goal not met or cost > {r.budget:g}) with probability at most "
                f"p* = {r.p_star:g}."
            )
        if cert.verdict == "FAIL":
            return (
                f"Not certified: some cell could not be shown to fail at most p* = {r.p_star:g}; "
                f"{n_pass} of {m} grid cells pass at confidence {r.confidence:g}"
                + (
                    ""
                    if r.stage1.decision == "PASS"
                    else ", but the nominal cell fails, so no cell is certified"
                )
                + "."
            )
        return (
            f"Inconclusive: no cell was shown to fail more than p* = {r.p_star:g}, but some "
            "reached their episode cap undecided; nothing is certified."
        )
    if cert.kind == "shield":  # by kind: a black-box report never imports the shield models
        sr = cert.result
        base = (
            f"With confidence {1 - sr.delta:g} over the logs, every controller the shield admits "
            f"reaches an unsafe state within {sr.horizon} calls from {sr.initial} with probability "
            f"at most {sr.bound:.5g}"
        )
        if sr.epsilon is None:
            return base + "; no ε was stated, so nothing is claimed about it."
        rel = "≤" if cert.verdict == "PASS" else ">"
        return base + f", which is {rel} the stated ε = {sr.epsilon:g}."
    assert cert.kind == "bnn"
    nr = cert.result
    if cert.verdict == "SAFE":
        return (
            f"For every weight in the box of half-width ε = {nr.epsilon.value:g} "
            f"({nr.epsilon.unit}) around the mean, {nr.system} started in X0 never enters Xu: "
            "closure, initial and unsafe conditions are proved (a posterior draw lies in the box "
            f"with probability {nr.acceptance_probability:.4g})."
        )
    return f"Nothing is claimed: {nr.reason}."


def digest_of(cert_path: Path | None) -> str | None:
    """The SHA-256 of the certificate file at ``cert_path`` (``None`` when there is none): the
    printed report's running footer, so a page can be matched to the certificate it shows."""
    if cert_path is None or not Path(cert_path).is_file():
        return None
    return sha256_file(Path(cert_path))


def signature_status(cert_path: Path | None) -> str:
    """``signed by <fingerprint> (not checked here …)``, ``unsigned``, or what is wrong with the
    signature file. The signature itself needs the signer's public key: ``safecert verify``."""
    from safecert.document import signature_path

    if cert_path is None:
        return "unknown (the certificate's file was not given)"
    sig = signature_path(Path(cert_path))
    if not sig.is_file():
        return "unsigned"
    from safecert.signing import parse_signature  # only for a signed certificate

    try:
        parsed = parse_signature(sig.read_bytes(), source=sig.name)
    except DataError as exc:
        return f"signature file present but unreadable: {exc}"
    if parsed.signed_sha256 != sha256_file(Path(cert_path)):
        return (
            f"signature by {parsed.public_key_fingerprint} covers other bytes than this "
            "certificate (stale or tampered)"
        )
    return (
        f"signed by {parsed.public_key_fingerprint} (not checked here: run "
        "safecert verify CERT --pubkey PUB)"
    )


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every leaf of a JSON value with its dotted path (lists of scalars stay one leaf)."""
    if isinstance(value, dict) and value:
        out: list[tuple[str, Any]] = []
        for key in sorted(value):
            out += flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
        return out
    return [(prefix, value)]


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def facts(cert: Certificate, cert_path: Path | None) -> list[Fact]:
    """Every fact of the panel, in reading order."""
    out = [
        Fact("engine", "engine", cert.kind),
        Fact("verdict", "verdict", cert.verdict),
        Fact("claim", "what the verdict claims", claim(cert)),
        Fact("signature", "signature", signature_status(cert_path)),
        Fact("safecert_version", "safecert version", cert.safecert_version),
        Fact("created_utc", "date (UTC)", cert.created_utc),
        Fact("seed", "seed", NOT_STATED if cert.seed is None else str(cert.seed)),
        Fact("inputs.root", "inputs root", cert.inputs.root),
    ]
    for entry in [*cert.inputs.files, *cert.inputs.evidence]:
        kind = "input" if entry in cert.inputs.files else "evidence"
        out.append(
            Fact(
                f"digest:{entry.role}:{entry.path}",
                f"{kind} {entry.role}: {entry.path}",
                f"sha256 ({entry.digest_of}) {entry.sha256}",
            )
        )
    if isinstance(cert, BlackboxCertificate | SequentialCertificate):
        out += _blackbox_facts(cert)
    for path, value in flatten(cert.parameters):
        out.append(Fact(f"parameters.{path}", f"parameter {path}", _shown(value)))
    return out


def _blackbox_facts(cert: BlackboxCertificate | SequentialCertificate) -> list[Fact]:
    r = cert.result
    envelope = cert.parameters.get("envelope", {})
    out = [
        Fact("family_size", "family size M", str(r.family_size)),
        Fact("delta_cell", "δ' = (1 − confidence) / M", f"{r.delta_cell:.6g}"),
        Fact(
            "spec",
            "spec",
            f"budget d = {r.budget:g}, p* = {r.p_star:g}, confidence {r.confidence:g}, "
            f"goal {r.goal}, cost read from {r.cost_key}",
        ),
        Fact(
            "stage1",
            "stage 1 (nominal cell)",
            f"{r.stage1.decision}: {r.stage1.failures}/{r.stage1.episodes} failures, "
            f"upper bound {r.stage1.upper_bound:.4f}",
        ),
    ]
    for axis in r.axes:
        spec = envelope.get(axis.name)
        kind = spec.get("kind") if isinstance(spec, dict) else None
        what = AXIS_SCALES.get(axis.name, "level")
        levels = ", ".join(str(v) for v in sorted(axis.levels, key=level_key))
        out.append(
            Fact(
                f"axis:{axis.name}",
                f"axis {axis.name}",
                (f"noise kind {kind}; " if kind else "") + f"scale: {what}; levels {levels}",
            )
        )
    kpis = cert.parameters.get("kpis", {})
    for name, rng, declared in (
        ("cost", r.cost_range, "cost" in kpis),
        ("return", r.return_range, "return" in kpis),
    ):
        if rng is None:
            text = "none: no Hoeffding bound is stated"
        else:
            how = "declared in [kpis]" if declared else "derived: [0, max_steps × max_step_cost]"
            text = f"[{rng[0]:g}, {rng[1]:g}] ({how})"
        out.append(Fact(f"range:{name}", f"{name} range", text))
    obs = r.obs_ranges
    if obs is None:
        out.append(Fact("range:obs", "observation ranges", "none (no observation noise)"))
    else:
        dims = [
            f"dim {d}: [{lo:.4g}, {hi:.4g}] {'estimated' if est else obs.source}"
            for d, (lo, hi, est) in enumerate(zip(obs.low, obs.high, obs.estimated, strict=True))
        ]
        how = {
            "declared": "declared in the config",
            "space": "the observation space's bounds",
            "estimated": f"estimated from {obs.episodes} rollouts of {obs.reference_policy}",
        }[obs.source]
        out.append(Fact("range:obs", f"observation ranges ({how})", "; ".join(dims)))
    return out


def facts_html(cert: Certificate, cert_path: Path | None) -> str:
    rows = "".join(
        f"<tr data-fact='{esc(f.key)}'><th>{breakable(f.label)}</th><td>{breakable(f.value)}</td></tr>"
        for f in facts(cert, cert_path)
    )
    return (
        f"<h2>Facts</h2><div class='scroll'><table class='facts' id='facts'><tbody>{rows}</tbody>"
        "</table></div>"
    )


def facts_markdown(cert: Certificate, cert_path: Path | None) -> list[str]:
    return ["## Facts", ""] + [f"- **{f.label}**: {f.value}" for f in facts(cert, cert_path)]


def posthoc_banner(cert: Certificate) -> str:
    """The banner of a post-hoc judgement (empty when the certificate is not one)."""
    if not isinstance(cert, BlackboxCertificate) or cert.result.rejudged is None:
        return ""
    old, r = cert.result.rejudged, cert.result
    rows = [
        ["budget d", f"{old.budget:g}", f"{r.budget:g}"],
        ["p*", f"{old.p_star:g}", f"{r.p_star:g}"],
    ]
    return (
        "<div class='banner' id='posthoc' data-posthoc='rejudged'><strong>Re-judged post hoc.</strong> "
        "These episodes were run under another spec and judged afterwards at the spec below. "
        "A threshold chosen after seeing the outcomes carries no guarantee unless it was fixed in "
        f"advance. Episodes: {esc(old.store)} (relative to this folder)."
        + table(["", "run under (original)", "judged at (this page)"], rows)
        + "</div>"
    )
