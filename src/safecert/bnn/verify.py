"""The ``bnn`` certificate: its ``result`` layout and the checker behind ``safecert verify``.

``result`` (ARCHITECTURE.md, "Certificates")::

    system, reason, solver, verifier_margin
    epsilon      {"value", "unit": "sigma"|"absolute", "sigma": ε/σ or null, "absolute": [per layer]}
    checks       {"closure"|"initial"|"unsafe": "infeasible" | "not reached" | "timeout" |
                  {"counterexample": {"x": […], "x_next": […] | null}}}
    invariant    {"hidden": […], "layers": [{"W", "b"}, …]}   (Inv = {x ∈ B : g(x) ≥ 0})
    policy_sha256, acceptance_probability (chance that one raw posterior draw lies in W_ε)
    iterations, verifier_calls, sampled_violations, spurious_witnesses, counterexamples [{…}]
    runtimes_s   {"learner_s", "verifier_s", "falsifier_s", "total_s", "search_s"}
    search       [{"epsilon", "verdict", "reason", "runtime_s", "iterations"}, …]

:func:`check` (``safecert verify DIR/certificate.json``) recomputes from the evidence: the policy
file next to the certificate (``policy.npz``) must hash to ``policy_sha256``; the weight box is
rebuilt from the stored Bayesian spec and ε; for a SAFE certificate the three MILP checks are
re-run on the stored invariant with the stored solver and must all be infeasible, and a sampled
closure check (states of Inv × box weights) must find no violation. An UNKNOWN certificate claims
nothing, so only its inputs are checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from safecert.bnn.dynamics import Benchmark, get_benchmark
from safecert.bnn.networks import ReluNetwork
from safecert.bnn.spec import BayesianSpec, Epsilon, WeightBox
from safecert.bnn.verifier import Counterexample, Proof, Unknown
from safecert.certificate import Certificate, Evidence, VerificationReport, sha256_file
from safecert.errors import DataError

if TYPE_CHECKING:
    from safecert.bnn.search import Attempt, BnnProblem, SearchResult

CONDITIONS = ("closure", "initial", "unsafe")
POLICY_FILE = "policy.npz"


def epsilon_record(eps: Epsilon, spec: BayesianSpec) -> dict[str, Any]:
    """ε as stored: the value and unit given, ε/σ when one σ is shared, the per-layer half-width."""
    absolute = [
        eps.for_layer(s) if f else 0.0
        for s, f in zip(spec.sigma, spec.bayesian_layers, strict=True)
    ]
    sigmas = {s for s, f in zip(spec.sigma, spec.bayesian_layers, strict=True) if f}
    if eps.in_sigma:
        in_sigma: float | None = eps.value
    elif len(sigmas) == 1 and next(iter(sigmas)) > 0:
        in_sigma = eps.value / next(iter(sigmas))
    else:
        in_sigma = None
    return {
        "value": eps.value,
        "unit": "sigma" if eps.in_sigma else "absolute",
        "sigma": in_sigma,
        "absolute": absolute,
    }


def check_records(verdict: Proof | Counterexample | Unknown | None) -> dict[str, Any]:
    """The three checks of the last verifier answer (module docstring)."""
    out: dict[str, Any] = {c: "not reached" for c in CONDITIONS}
    if verdict is None:
        return out
    for c in verdict.checks:
        if c.condition in out and out[c.condition] in ("not reached", "infeasible"):
            out[c.condition] = c.status if c.status != "spurious" else "witness did not replay"
    if isinstance(verdict, Counterexample):
        out[verdict.condition] = {"counterexample": cex_record(verdict.x, verdict.x_next)}
    return out


def cex_record(x: np.ndarray, x_next: np.ndarray | None) -> dict[str, Any]:
    return {
        "x": np.asarray(x, dtype=float).tolist(),
        "x_next": None if x_next is None else np.asarray(x_next, dtype=float).tolist(),
    }


def spec_record(spec: BayesianSpec) -> dict[str, Any]:
    return {
        "sigma": list(spec.sigma),
        "bayesian_layers": list(spec.bayesian_layers),
        "biases": spec.bayesian_biases,
    }


def spec_from_record(data: dict[str, Any]) -> BayesianSpec:
    try:
        return BayesianSpec(
            tuple(float(s) for s in data["sigma"]),
            tuple(bool(f) for f in data["bayesian_layers"]),
            bool(data["biases"]),
        )
    except (KeyError, TypeError, ValueError):
        raise DataError(
            "Bayesian spec missing or malformed",
            field="parameters.bayesian",
            fix="regenerate the certificate",
        ) from None


def _get(d: dict[str, Any], *keys: str) -> Any:
    cur: Any = d
    for i, k in enumerate(keys):
        if not isinstance(cur, dict) or k not in cur:
            raise DataError(
                "missing",
                field="result." + ".".join(keys[: i + 1]),
                fix="regenerate the certificate",
            )
        cur = cur[k]
    return cur


def rebuild(
    cert: Certificate, evidence: Evidence
) -> tuple[Benchmark, ReluNetwork, BayesianSpec, WeightBox, ReluNetwork, Path]:
    """Benchmark, mean policy, spec, weight box and invariant described by ``cert``."""
    folder = evidence.data_dir or Path(evidence.certificate_path).parent
    policy_path = Path(folder) / POLICY_FILE
    if not policy_path.is_file():
        raise DataError(
            f"{policy_path} does not exist",
            field="evidence",
            fix=f"keep {POLICY_FILE} next to the certificate or pass --data DIR",
        )
    bench = get_benchmark(str(_get(cert.result, "system")))
    mean = ReluNetwork.from_npz(policy_path)
    spec = spec_from_record(cert.parameters.get("bayesian", {}))
    eps_rec = _get(cert.result, "epsilon")
    eps = Epsilon(float(eps_rec["value"]), eps_rec["unit"] == "sigma")
    box = spec.box(mean, eps)
    g = ReluNetwork.from_lists(
        _get(cert.result, "invariant", "layers"), name="result.invariant.layers"
    )
    return bench, mean, spec, box, g, policy_path


def check(
    cert: Certificate, evidence: Evidence, *, closure_samples: int = 20000
) -> VerificationReport:
    """Recompute a ``bnn`` certificate (module docstring)."""
    from safecert.bnn.cegis import SamplingFalsifier
    from safecert.bnn.verifier import Verifier

    report = VerificationReport("bnn")
    bench, mean, spec, box, g, policy_path = rebuild(cert, evidence)
    digest = sha256_file(policy_path)
    expect = cert.inputs.get("policy_sha256")
    report.add(
        "policy_sha256", digest == expect, f"{POLICY_FILE} {digest[:12]}… vs {str(expect)[:12]}…"
    )
    stored = epsilon_record(
        Epsilon(float(cert.result["epsilon"]["value"]), cert.result["epsilon"]["unit"] == "sigma"),
        spec,
    )
    report.add(
        "epsilon",
        np.allclose(stored["absolute"], cert.result["epsilon"]["absolute"], rtol=0, atol=1e-15),
        f"half-widths per layer {stored['absolute']}",
    )
    if cert.verdict != "SAFE":
        report.add(
            "verdict",
            cert.verdict == "UNKNOWN",
            f"{cert.verdict}: claims nothing; inputs checked only",
        )
        return report
    solver = str(cert.result.get("solver", "highs"))
    margin = float(cert.result.get("verifier_margin", 1e-6))
    verdict = Verifier(bench, box, solver=solver, time_limit_s=None, margin=margin).check(g)
    recomputed = check_records(verdict)
    for cond in CONDITIONS:
        ok = recomputed[cond] == "infeasible" and cert.result["checks"].get(cond) == "infeasible"
        report.add(cond, ok, f"{solver}: {recomputed[cond]}")
    found = SamplingFalsifier(bench, box, np.random.default_rng(0), samples=closure_samples).find(g)
    report.add(
        "sampled_conditions",
        not found,
        f"{closure_samples} sampled states, weights in the box: {len(found)} violations",
    )
    return report


def build_certificate(
    problem: BnnProblem,
    found: SearchResult,
    *,
    policy_sha256: str,
    config_sha256: str | None,
) -> tuple[Certificate, Attempt | None]:
    """The certificate of a finished search (or single ε): SAFE at the largest certified ε, else
    UNKNOWN describing the last attempt. Returns it with the attempt it describes."""
    from safecert.bnn.sampling import acceptance_probability
    from safecert.certificate import make_certificate

    cfg, spec = problem.config, problem.spec
    best = found.best
    shown = best if best is not None else (found.attempts[-1] if found.attempts else None)
    search_rows = [
        {
            "epsilon": str(a.epsilon),
            "verdict": a.result.verdict,
            "reason": a.result.reason,
            "runtime_s": a.result.runtimes_s.get("total_s", 0.0),
            "iterations": a.result.iterations,
        }
        for a in found.attempts
    ]
    result: dict[str, Any] = {
        "system": problem.bench.name,
        "solver": cfg.solver,
        "verifier_margin": 1e-6,
        "policy_sha256": policy_sha256,
        "search": search_rows,
    }
    if shown is not None:
        res = shown.result
        last = (
            res.proof
            if res.proof is not None
            else (res.counterexamples[-1] if res.counterexamples else None)
        )
        result.update(
            {
                "reason": res.reason,
                "epsilon": epsilon_record(shown.epsilon, spec),
                "acceptance_probability": acceptance_probability(problem.box(shown.epsilon), spec),
                "checks": check_records(last),
                "invariant": {
                    "hidden": list(cfg.invariant.hidden),
                    "layers": res.network.to_lists(),
                },
                "iterations": res.iterations,
                "verifier_calls": res.verifier_calls,
                "sampled_violations": res.sampled_violations,
                "spurious_witnesses": res.spurious,
                "counterexamples": [
                    {"condition": c.condition, **cex_record(c.x, c.x_next)}
                    for c in res.counterexamples
                ],
                "runtimes_s": {**res.runtimes_s, "search_s": found.total_s},
            }
        )
    else:
        result.update(
            {
                "reason": "no ε attempted (time budget)",
                "epsilon": epsilon_record(cfg.epsilon_value(), spec),
            }
        )
    parameters = {
        "system": problem.bench.name,
        "policy": cfg.policy,
        "bayesian": spec_record(spec),
        "epsilon_requested": str(cfg.epsilon),
        "search": cfg.search.model_dump() if cfg.search.enabled else None,
        "limits": cfg.limits.model_dump(),
        "learner": cfg.learner.model_dump(),
        "data": cfg.data.model_dump(),
        "invariant_hidden": list(cfg.invariant.hidden),
    }
    cert = make_certificate(
        "bnn",
        "SAFE" if best is not None else "UNKNOWN",
        parameters=parameters,
        inputs={"config_sha256": config_sha256, "policy_sha256": policy_sha256},
        seed=cfg.seed,
        result=result,
    )
    return cert, shown
