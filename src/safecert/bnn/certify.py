"""A ``safecert bnn verify`` run: the ε search, its certificate and the files it writes.

:func:`certify_run` loads the policy named by the config, runs the ε search (Alg. 1 at each ε the
:func:`~safecert.bnn.search.search_plan` implies), and writes into the output folder, each file
durably (:func:`~safecert.document.durable_write`) and the certificate last:

* ``policy.npz`` — first: the mean policy the certificate is about (a byte copy of the user's
  file, or the packaged benchmark weights), read back as the network the search verifies; the
  evidence ``safecert verify`` re-reads;
* ``invariant.png`` — the paper's Fig. 2, for 2-D systems;
* ``certificate.json`` — :func:`build_certificate` (signed with ``sign_key`` when given).

The certificate (kind ``bnn``): ``parameters`` is the complete run configuration
(:class:`~safecert.bnn.config.BnnConfig`, every key written out); ``inputs`` records the config
TOML (role ``config``) and the user's policy file (role ``policy``) relative to the config's folder
(the working directory for ``--benchmark``), and ``policy.npz`` next to the certificate (role
``policy-copy``); ``result`` is a :class:`~safecert.bnn.result.BnnResult` describing the certified
attempt with the largest ε (SAFE), else the last attempt (UNKNOWN); its ``machine_dependent`` says
whether a wall-clock guard cut any part of the search (:func:`search_outcome`). The record
builders here (:func:`epsilon_record`, :func:`check_records`, :func:`search_outcome`) are the ones
:mod:`safecert.bnn.check` recomputes with, so that writing and checking cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from safecert.bnn.config import (
    BnnConfig,
    bayesian_spec,
    check_policy_fits,
    load_policy_network,
    load_sigma_network,
)
from safecert.bnn.networks import read_policy_file
from safecert.bnn.pool import SolvePool
from safecert.bnn.result import (
    BnnResult,
    Checks,
    CounterexampleOutcome,
    CounterexampleRecord,
    EpsilonRecord,
    InvariantRecord,
    LayerRecord,
    Runtimes,
    SearchRow,
    StateTransition,
    WitnessRecord,
)
from safecert.bnn.search import (
    Attempt,
    BnnProblem,
    SearchResult,
    search_epsilon,
    search_plan,
    stop_reason,
)
from safecert.bnn.spec import BayesianSpec, Epsilon
from safecert.bnn.system import build_system
from safecert.bnn.verifier import Counterexample, Proof, Unknown
from safecert.bnn.witness import Witness
from safecert.certificate import BnnCertificate, make_certificate, write_certificate
from safecert.document import FileDigest, Inputs, durable_write, file_digest
from safecert.events import Events

POLICY_FILE = "policy.npz"
CERTIFICATE_FILE = "certificate.json"
PLOT_FILE = "invariant.png"
CONDITIONS = ("closure", "initial", "unsafe")
#: ``result.reason`` (then what stopped it) when the wall-clock guard fired before the first ε
NO_ATTEMPT = "no ε attempted"


def epsilon_record(eps: Epsilon, spec: BayesianSpec) -> EpsilonRecord:
    """ε as certified: its value and unit, ε/σ when one σ is shared by every Bayesian layer, and
    the absolute half-width per layer (``ε·σ_k`` in σ units, ``ε`` absolute, 0 if deterministic)."""
    absolute = [
        eps.for_layer(s) if f else 0.0
        for s, f in zip(spec.sigma, spec.bayesian_layers, strict=True)
    ]
    sigmas = {s for s, f in zip(spec.sigma, spec.bayesian_layers, strict=True) if f}
    if spec.weights is not None:  # σ per weight: ``absolute`` is each layer's widest half-width
        sigmas = set()
    in_sigma: float | None = None
    if eps.in_sigma:
        in_sigma = eps.value
    elif len(sigmas) == 1 and next(iter(sigmas)) > 0:
        in_sigma = eps.value / next(iter(sigmas))
    return EpsilonRecord(
        value=eps.value,
        unit="sigma" if eps.in_sigma else "absolute",
        sigma=in_sigma,
        absolute=absolute,
    )


def check_records(verdict: Proof | Counterexample | Unknown | None) -> Checks:
    """The three conditions of a verifier answer: the first non-infeasible status of each, the
    replayed counterexample for the condition it violates, ``"not reached"`` for the rest."""
    out: dict[str, Any] = {c: "not reached" for c in CONDITIONS}
    if verdict is not None:
        for c in verdict.checks:
            if c.condition in out and out[c.condition] in ("not reached", "infeasible"):
                out[c.condition] = c.status if c.status != "spurious" else "witness did not replay"
        if isinstance(verdict, Counterexample):
            out[verdict.condition] = CounterexampleOutcome(
                counterexample=transition(verdict.x, verdict.x_next)
            )
    return Checks(**out)


def transition(x: np.ndarray, x_next: np.ndarray | None) -> StateTransition:
    return StateTransition(
        x=np.asarray(x, dtype=float).tolist(),
        x_next=None if x_next is None else np.asarray(x_next, dtype=float).tolist(),
    )


def search_row(attempt: Attempt) -> SearchRow:
    res = attempt.result
    return SearchRow(
        epsilon=attempt.epsilon.value,
        unit="sigma" if attempt.epsilon.in_sigma else "absolute",
        verdict=res.verdict,
        reason=res.reason,
        iterations=res.iterations,
        runtime_s=float(res.runtimes_s["total_s"]),
        machine_dependent=res.machine_dependent,
        witness=None if res.witness is None else witness_record(res.witness),
    )


def search_outcome(
    rows: Sequence[SearchRow], shown: int | None, stopped: str | None
) -> tuple[str, bool]:
    """``result.reason`` and ``result.machine_dependent`` of a search: the reason of the row the
    certificate describes (``shown``, else :data:`NO_ATTEMPT`), followed by the reason of every
    other row a wall-clock guard cut and by ``stopped`` (:func:`~safecert.bnn.search.stop_reason`,
    when the guard of the whole search ended it). Machine-dependent when any of those is there."""
    base = rows[shown].reason if shown is not None else NO_ATTEMPT
    notes = [
        f"at ε = {_shown(row)}: {row.reason}"
        for i, row in enumerate(rows)
        if row.machine_dependent and i != shown
    ]
    if stopped is not None:
        notes.append(stopped)
    machine_dependent = any(row.machine_dependent for row in rows) or stopped is not None
    return "; ".join([base, *notes]), machine_dependent


def witness_record(witness: Witness) -> WitnessRecord:
    """The certificate's form of a replayed witness: its start and the weights of each step."""
    return WitnessRecord(
        x0=[float(v) for v in witness.path[0]],
        weights=[
            [LayerRecord(W=np.asarray(w).tolist(), b=np.asarray(b).tolist()) for w, b in step]
            for step in witness.weights
        ],
    )


def described_attempt(found: SearchResult) -> Attempt | None:
    """The attempt a certificate describes: the certified one with the largest ε, else the last."""
    if found.best is not None:
        return found.best
    return found.attempts[-1] if found.attempts else None


def build_result(problem: BnnProblem, found: SearchResult) -> BnnResult:
    """The ``result`` of a finished search (module docstring)."""
    from safecert.bnn.sampling import acceptance_probability

    cfg, spec = problem.config, problem.spec
    plan = search_plan(cfg)
    shown = described_attempt(found)
    eps = shown.epsilon if shown is not None else plan.ladder[0]
    rows = [search_row(a) for a in found.attempts]
    reason, machine_dependent = search_outcome(
        rows,
        next((i for i, a in enumerate(found.attempts) if a is shown), None),
        None if found.stopped is None else stop_reason(plan, found.stopped),
    )
    common: dict[str, Any] = {
        "system": problem.bench.name,
        "solver": cfg.solver,
        "verifier_margin": problem.verifier_margin,
        "reason": reason,
        "machine_dependent": machine_dependent,
        "epsilon": epsilon_record(eps, spec),
        "acceptance_probability": acceptance_probability(problem.box(eps), spec),
        "search": rows,
    }
    if shown is None:
        return BnnResult(
            **common,
            checks=check_records(None),
            invariant=None,
            iterations=0,
            verifier_calls=0,
            sampled_violations=0,
            spurious_witnesses=0,
            counterexamples=[],
            runtimes_s=None,
        )
    res = shown.result
    last: Proof | Counterexample | None = res.proof
    if last is None and res.counterexamples:
        last = res.counterexamples[-1]
    runtimes = {k: float(v) for k, v in res.runtimes_s.items()}
    return BnnResult(
        **common,
        checks=check_records(last),
        invariant=InvariantRecord(
            hidden=list(cfg.invariant.hidden),
            layers=[LayerRecord(**layer) for layer in res.network.to_lists()],
        ),
        iterations=res.iterations,
        verifier_calls=res.verifier_calls,
        sampled_violations=res.sampled_violations,
        spurious_witnesses=res.spurious,
        counterexamples=[
            CounterexampleRecord(
                condition=c.condition,  # type: ignore[arg-type]  # closure | initial | unsafe
                **transition(c.x, c.x_next).model_dump(),
            )
            for c in res.counterexamples
        ],
        runtimes_s=Runtimes(**runtimes, search_s=float(found.total_s)),
    )


def build_certificate(
    problem: BnnProblem, found: SearchResult, inputs: Inputs
) -> tuple[BnnCertificate, Attempt | None]:
    """The certificate of a finished search: SAFE at the largest certified ε, else UNKNOWN
    describing the last attempt. Returns it with the attempt it describes."""
    best = found.best
    cert = make_certificate(
        "bnn",
        "SAFE" if best is not None else "UNKNOWN",
        parameters=problem.config.model_dump(mode="json"),
        inputs=inputs,
        seed=problem.config.seed,
        result=build_result(problem, found),
    )
    assert isinstance(cert, BnnCertificate)
    return cert, described_attempt(found)


def policy_copy_name(policy_path: Path | None) -> str:
    """``policy`` with the user's file's suffix (``.npz`` for a packaged policy)."""
    return POLICY_FILE if policy_path is None else f"policy{policy_path.suffix.lower()}"


def sigma_copy_name(sigma_path: Path) -> str:
    """``sigma`` with the user's σ file's suffix."""
    return f"sigma{sigma_path.suffix.lower()}"


def run_inputs(
    config_path: Path | None, policy_path: Path | None, out: Path, sigma_path: Path | None = None
) -> Inputs:
    """``inputs`` of a run whose ``policy.npz`` copy (and ``sigma.*`` copy of a per-weight σ
    file, role ``sigma-copy``) is already in ``out`` (module docstring), digested when the run
    starts (the files as they were read)."""
    root = (config_path.parent if config_path is not None else Path.cwd()).resolve()
    files: list[FileDigest] = []
    if config_path is not None:
        files.append(file_digest("config", config_path, root))
    if policy_path is not None:
        files.append(file_digest("policy", policy_path, root))
    evidence = [file_digest("policy-copy", out / policy_copy_name(policy_path), out)]
    if sigma_path is not None:
        files.append(file_digest("sigma", sigma_path, root))
        evidence.append(file_digest("sigma-copy", out / sigma_copy_name(sigma_path), out))
    return Inputs(root=str(root), files=files, evidence=evidence)


@dataclass(frozen=True)
class BnnRun:
    """What :func:`certify_run` wrote: the certificate, where, and the attempt it describes."""

    certificate: BnnCertificate
    path: Path
    plot: Path | None
    described: Attempt | None

    def summary(self) -> dict[str, Any]:
        """The run in plain JSON types (what ``safecert bnn verify --json`` prints)."""
        r = self.certificate.result
        return {
            "verdict": self.certificate.verdict,
            "epsilon": str(self.described.epsilon) if self.described is not None else None,
            "epsilon_record": r.epsilon.model_dump(mode="json"),
            "checks": r.checks.model_dump(mode="json"),
            "reason": r.reason,
            "machine_dependent": r.machine_dependent,
            "iterations": r.iterations,
            "runtimes_s": None if r.runtimes_s is None else r.runtimes_s.model_dump(mode="json"),
            "search": [{**row.model_dump(mode="json"), "epsilon": _shown(row)} for row in r.search],
            "certificate": str(self.path),
            "plot": str(self.plot) if self.plot is not None else None,
        }


def _shown(row: SearchRow) -> str:
    return str(Epsilon(row.epsilon, row.unit == "sigma"))


def certify_run(
    cfg: BnnConfig,
    config_path: Path | None,
    out: Path,
    *,
    sign_key: Path | None = None,
    progress: Callable[[int, str], None] | None = None,
    events: Events | None = None,
    workers: int = 1,
) -> BnnRun:
    """Run ``cfg`` (read from ``config_path``, or built from ``--benchmark`` when None) and write
    its artifacts into ``out`` (module docstring). ``workers``: solver processes for the closure
    pieces of ``[verifier] closure_splits`` (:class:`~safecert.bnn.pool.SolvePool`, opened for
    this run and closed before it returns; execution only, never recorded and never an outcome).
    ``progress(iteration, text)`` sees each CEGIS
    event; ``events`` (:mod:`safecert.events`) sees the run: ``run_started``, ``epsilon_started``,
    ``cegis_iteration``, ``epsilon_finished``, ``run_finished`` (docs/bnn.md). Verdict SAFE only
    on a proof of all three conditions for the certified ε."""
    from safecert.bnn.plot import can_plot, plot_invariant

    base = config_path.parent if config_path is not None else None
    system = build_system(cfg.system, cfg.dynamics, cfg.sets)
    mean, policy_path = load_policy_network(cfg, base)
    check_policy_fits(mean, system)
    sigma_source = load_sigma_network(cfg, base)
    bayesian_spec(cfg, mean, None if sigma_source is None else sigma_source[0])  # fails early
    # the copies first, and the networks from them: what is verified is exactly the evidence
    name = policy_copy_name(policy_path)
    copy = policy_path.read_bytes() if policy_path is not None else mean.npz_bytes()
    durable_write(out / name, copy)
    mean = read_policy_file(out / name)
    sigmas = None
    sigma_path = None
    if sigma_source is not None:
        sigma_path = sigma_source[1]
        durable_write(out / sigma_copy_name(sigma_path), sigma_path.read_bytes())
        sigmas = read_policy_file(out / sigma_copy_name(sigma_path))
    spec = bayesian_spec(cfg, mean, sigmas)
    inputs = run_inputs(config_path, policy_path, out, sigma_path)
    events = events if events is not None else Events()
    problem = BnnProblem(system, mean, spec, cfg)
    current: list[str] = [""]

    def iteration(it: int, text: str) -> None:
        events.emit("cegis_iteration", epsilon=current[0], iteration=it, text=text)
        if progress is not None:
            progress(it, text)

    def attempt(e: Epsilon, warm: Any, limit: float) -> Any:
        current[0] = str(e)
        events.emit("epsilon_started", epsilon=current[0])
        res = problem.run(e, warm, limit, plan.guard_key)
        events.emit(
            "epsilon_finished",
            epsilon=current[0],
            verdict=res.verdict,
            reason=res.reason,
            iterations=res.iterations,
        )
        return res

    problem.progress = iteration
    plan = search_plan(cfg)
    events.emit("run_started", engine="bnn", epsilons=[str(e) for e in plan.ladder])
    with SolvePool(workers if cfg.verifier.closure_splits > 0 else 1) as pool:
        problem.pool = pool
        found = search_epsilon(
            attempt,
            plan.ladder,
            total_time_s=plan.total_time_s,
            bisection_steps=plan.bisection_steps,
        )
        problem.pool = None
    cert, shown = build_certificate(problem, found, inputs)
    plot = None
    if shown is not None and can_plot(problem.bench):
        res = shown.result
        ended = next((a for a in found.attempts if a.result.witness is not None), None)
        plot = plot_invariant(
            out / PLOT_FILE,
            problem.bench,
            mean,
            None if res.witness is not None else res.network,  # no CEGIS ran: no candidate
            [(c.x, c.x_next) for c in res.counterexamples],
            trajectory=ended.result.witness.path if ended and ended.result.witness else (),
            trajectory_label=f"unsafe at ε = {ended.epsilon}: no invariant" if ended else "",
            title=f"{problem.bench.name} at ε = {shown.epsilon}: {res.verdict}",
            proved=res.verdict == "SAFE",
        )
    else:
        (out / PLOT_FILE).unlink(missing_ok=True)  # a previous run's picture is not this run's
    path = write_certificate(cert, out / CERTIFICATE_FILE, sign_key=sign_key)
    events.emit(
        "run_finished",
        engine="bnn",
        verdict=cert.verdict,
        epsilon=None if shown is None else str(shown.epsilon),
    )
    return BnnRun(cert, path, plot, shown)
