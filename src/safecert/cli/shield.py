"""``safecert shield …``: certificates and least-restrictive shields from agent logs.

Commands: ``certify`` (the bound V̄_T(s0) of a given shield, default the full one) and
``synthesize`` (the least-restrictive shield meeting ε, plus its certificate). Both write into
``--out``: ``certificate.json`` (kind "shield"), ``shield.json`` (state → permitted actions, the
input format of ``certify --shield``), ``shield.md`` (readable table), ``model.toml`` (a copy, for
``safecert verify``) and, for models with a ``[layout]``, ``shield.png``.

Extension seam — the Markov diagnostic: a module ``safecert.cli.shield_diagnose`` (owned by the
diagnostics work) that defines either ``register(app: typer.Typer) -> None`` or a plain command
function ``diagnose``, registered as ``safecert shield diagnose``. It is imported at the bottom of
this module when it exists; nothing else here needs to change.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from safecert.certificate import make_certificate, sha256_file, write_certificate
from safecert.cli.output import console, emit_json, err_console, table
from safecert.errors import ConfigError, DataError

app = typer.Typer(
    help="Certified runtime shields for tool-using agents, from ordinary logs.",
    no_args_is_help=True,
    add_completion=False,
)

ModelOpt = Annotated[Path, typer.Option("--model", help="Model TOML (predicates, actions, ...).")]
LogsOpt = Annotated[Path, typer.Option("--logs", help="Step log, JSON Lines.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def load_inputs(model_path: Path, logs_path: Path, *, quiet: bool = False):
    """Model + committed-budget estimates (streaming the log once)."""
    from safecert.shield.estimate import estimate
    from safecert.shield.logs import iter_steps
    from safecert.shield.model import load_model

    model = load_model(model_path)
    if quiet:
        return model, estimate(model, iter_steps(logs_path, model))
    with err_console.status(f"reading {logs_path.name}"):
        return model, estimate(model, iter_steps(logs_path, model))


def _write(
    out: Path,
    model_path: Path,
    logs_path: Path,
    model,
    est,
    allowed,
    values,
    *,
    epsilon: float | None,
    parameters: dict[str, Any],
    extra: dict[str, Any],
    inputs: dict[str, str | None],
    json_out: bool,
) -> bool:
    from safecert.shield.report import plot_grid, result_block, table_rows, write_markdown

    out.mkdir(parents=True, exist_ok=True)
    result = result_block(model, est, allowed, values, epsilon=epsilon, extra=extra)
    holds = epsilon is None or result["bound"] <= epsilon
    shutil.copyfile(model_path, out / "model.toml")
    params = {
        **parameters,
        "model_file": "model.toml",
        "logs_file": str(logs_path.resolve()),
        "budget": model.spec.budget.model_dump(exclude_none=True),
    }
    cert = make_certificate(
        "shield",
        "PASS" if holds else "FAIL",
        parameters=params,
        inputs={
            "model_sha256": sha256_file(model_path),
            "logs_sha256": sha256_file(logs_path),
            **inputs,
        },
        seed=None,
        result=result,
    )
    write_certificate(cert, out / "certificate.json")
    (out / "shield.json").write_text(json.dumps(result["allowed"], indent=2) + "\n")
    rows = table_rows(model, allowed, values)
    summary = {
        "certificate V̄_T(s0)": f"{result['bound']:.5f}",
        "epsilon": epsilon,
        "verdict": cert.verdict,
        "forbidden": f"{100 * result['forbidden_fraction']:.1f} % of {model.live_pairs} live pairs",
        "rows short of budget": f"{est.missed_budget} of {model.stochastic_rows}",
        "confidence": f"{1 - model.delta:g} (δ = {model.delta:g}), T = {model.horizon}",
        **{k: v for k, v in extra.items() if k in ("method", "goal_reachable")},
    }
    write_markdown(out / "shield.md", f"Shield for {model.name}", summary, rows)
    png = plot_grid(
        model, allowed, values, out / "shield.png", f"{model.name}: V̄_T(s0) = {result['bound']:.3f}"
    )
    if json_out:
        emit_json({"verdict": cert.verdict, "out": str(out), **result})
    else:
        console.print(
            table(f"shield for {model.name}", ["state", "V̄_T", "permitted", "forbidden"], rows)
        )
        for k, v in summary.items():
            console.print(f"[bold]{k}[/]: {v}")
        files = ["certificate.json", "shield.json", "shield.md"] + (["shield.png"] if png else [])
        console.print(f"wrote {', '.join(str(out / f) for f in files)}")
    return holds


@app.command()
def certify(
    model_path: ModelOpt,
    logs_path: LogsOpt,
    out: OutOpt,
    shield: Annotated[
        Path | None,
        typer.Option(
            help="shield.json (state → actions) or a shield certificate.json; default: the full shield."
        ),
    ] = None,
    epsilon: Annotated[
        float | None, typer.Option(help="Budget ε: exit 1 if the certificate exceeds it.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Certify a shield: with confidence 1−δ every controller it admits reaches an unsafe state
    within T calls with probability at most V̄_T(s0).

    Example: safecert shield certify --model examples/shield/grid.toml --logs examples/shield/grid_logs.jsonl --shield runs/grid/shield.json --out runs/grid-cert
    """
    from safecert.shield.reach import full_shield, robust_rows, value_iteration
    from safecert.shield.report import allowed_from_json

    if epsilon is not None and not 0 <= epsilon <= 1:
        raise ConfigError(f"must be in [0, 1], got {epsilon}", field="--epsilon")
    model, est = load_inputs(model_path, logs_path, quiet=json_out)
    if shield is None:
        allowed = full_shield(model)
    else:
        if not shield.is_file():
            raise ConfigError(f"{shield} does not exist", field="--shield")
        try:
            data = json.loads(shield.read_text())
        except json.JSONDecodeError as exc:
            raise DataError(f"not JSON ({exc.msg})", field="--shield") from None
        if isinstance(data, dict) and data.get("kind") == "shield":
            data = data.get("result", {}).get("allowed")
        allowed = allowed_from_json(model, data, "--shield")
    values, _ = value_iteration(robust_rows(model, est), allowed, model.horizon)
    inputs = {"shield_sha256": sha256_file(shield) if shield else None}
    holds = _write(
        out, model_path, logs_path, model, est, allowed, values[: model.n_states],
        epsilon=epsilon, parameters={"command": "certify"}, extra={"method": "given"},
        inputs=inputs, json_out=json_out,
    )  # fmt: skip
    if not holds:
        raise typer.Exit(1)


@app.command()
def synthesize(
    model_path: ModelOpt,
    logs_path: LogsOpt,
    epsilon: Annotated[float, typer.Option(help="Risk budget ε for V̄_T(s0).")],
    out: OutOpt,
    method: Annotated[
        str, typer.Option(help="greedy (Alg. 1), additive, or robust_q (the sandbox variant).")
    ] = "greedy",
    rho_min: Annotated[
        float, typer.Option(help="ρ_min in the removal cost ρ(s,a) + ρ_min.")
    ] = 1e-3,
    json_out: JsonOpt = False,
) -> None:
    """Least-restrictive shield with V̄_T(s0) ≤ ε, and its certificate (Alg. 1; Cor. 2: no sample
    splitting needed).

    Example: safecert shield synthesize --model examples/shield/grid.toml --logs examples/shield/grid_logs.jsonl --epsilon 0.1 --out runs/grid
    """
    from safecert.shield.synthesis import synthesize as run

    if not 0 <= epsilon < 1:
        raise ConfigError(f"must be in [0, 1), got {epsilon}", field="--epsilon")
    if rho_min <= 0:
        raise ConfigError(f"must be > 0, got {rho_min}", field="--rho-min")
    model, est = load_inputs(model_path, logs_path, quiet=json_out)
    res = run(model, est, epsilon, method=method, rho_min=rho_min)
    extra = {
        "method": res.method,
        "goal_reachable": res.goal_reachable,
        "fallback_all_halt": res.fallback_all_halt,
    }
    _write(
        out, model_path, logs_path, model, est, res.allowed, res.values,
        epsilon=epsilon, parameters={"command": "synthesize", "method": method, "rho_min": rho_min},
        extra=extra, inputs={}, json_out=json_out,
    )  # fmt: skip


if importlib.util.find_spec("safecert.cli.shield_diagnose") is not None:
    _diagnose = importlib.import_module("safecert.cli.shield_diagnose")
    if hasattr(_diagnose, "register"):
        _diagnose.register(app)
    else:
        app.command("diagnose")(_diagnose.diagnose)
