"""``safecert bnn verify``: infinite-horizon safety of a BNN policy by a learned invariant."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from safecert.cli.output import console, emit_json, err_console, table
from safecert.errors import ConfigError

app = typer.Typer(
    help="Infinite-horizon safety of Bayesian neural-network policies (positive invariants).",
    no_args_is_help=True,
)

BENCHMARK_NAMES = "lds|lds_all|pend|pend_all|car|car_all"


@app.command()
def verify(
    config: Annotated[
        Path | None, typer.Argument(help="Run config (TOML); see docs/bnn.md.")
    ] = None,
    benchmark: Annotated[
        str | None, typer.Option(help=f"A published policy instead of a config: {BENCHMARK_NAMES}.")
    ] = None,
    epsilon: Annotated[
        str | None, typer.Option(help='Weight-box half-width: absolute ("0.1") or "1.5sigma".')
    ] = None,
    search: Annotated[
        bool, typer.Option("--search", help="Search the largest ε on the ladder.")
    ] = False,
    out: Annotated[
        Path, typer.Option(help="Output folder (certificate.json, invariant.png).")
    ] = ...,
    time_limit: Annotated[
        float | None, typer.Option("--time-limit", help="Seconds per ε (overrides the config).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed (overrides the config).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log CEGIS progress.")] = False,
) -> None:
    """Learn and verify a positive invariant; exit 0 when SAFE, 1 when UNKNOWN.

    Example: safecert bnn verify --benchmark lds --epsilon 0.5sigma --out runs/lds
    """
    from safecert.bnn.config import benchmark_config, load_config

    if (config is None) == (benchmark is None):
        raise ConfigError(
            "give exactly one of CONFIG.toml and --benchmark",
            field="config",
            fix=f"e.g. safecert bnn verify --benchmark lds --out DIR ({BENCHMARK_NAMES})",
        )
    if search and epsilon is not None:
        raise ConfigError(
            "--epsilon and --search exclude each other", field="epsilon", fix="use one"
        )
    cfg = load_config(config) if config is not None else benchmark_config(str(benchmark))
    updates: dict[str, Any] = {}
    if epsilon is not None:
        updates["epsilon"] = epsilon
    if seed is not None:
        updates["seed"] = seed
    if time_limit is not None:
        if time_limit <= 0:
            raise ConfigError(f"must be > 0, got {time_limit}", field="--time-limit", fix="e.g. 60")
        updates["limits"] = cfg.limits.model_copy(update={"per_epsilon_s": time_limit})
    if search:
        updates["search"] = cfg.search.model_copy(update={"enabled": True})
    if updates:
        from safecert.bnn.config import BnnConfig
        from safecert.config import parse_model

        cfg = parse_model(
            BnnConfig, {**cfg.model_dump(), **{k: _dump(v) for k, v in updates.items()}}
        )
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    summary = run_verify(cfg, config, out, quiet=json_out)
    if json_out:
        emit_json(summary)
    else:
        _print(summary)
    if summary["verdict"] != "SAFE":
        raise typer.Exit(1)


def _dump(v: Any) -> Any:
    return v.model_dump() if hasattr(v, "model_dump") else v


def run_verify(cfg: Any, config_path: Path | None, out: Path, *, quiet: bool) -> dict[str, Any]:
    """Run a ``bnn verify`` and write its artifacts into ``out``; returns the summary."""
    from safecert.bnn.config import bayesian_spec, load_policy_network
    from safecert.bnn.dynamics import get_benchmark
    from safecert.bnn.search import BnnProblem, search_epsilon

    base = config_path.parent if config_path is not None else None
    mean, policy_path = load_policy_network(cfg, base)
    bench = get_benchmark(cfg.system)
    spec = bayesian_spec(cfg, mean)
    problem = BnnProblem(bench, mean, spec, cfg)
    out.mkdir(parents=True, exist_ok=True)
    with _progress(quiet) as update:
        problem.progress = update
        ladder = cfg.search.ladder if cfg.search.enabled else [cfg.epsilon]
        found = search_epsilon(
            lambda e, warm, limit: problem.run(e, warm, limit),
            ladder,
            total_time_s=cfg.limits.total_s if cfg.search.enabled else cfg.limits.per_epsilon_s,
            bisection_steps=cfg.search.bisection_steps if cfg.search.enabled else 0,
            clock=cfg.limits.clock,
        )
    if policy_path is not None:
        shutil.copyfile(policy_path, out / "policy.npz")
    else:
        mean.save_npz(out / "policy.npz")
    return write_outputs(problem, found, out, config_path)


class _progress:
    """A rich spinner showing the latest CEGIS event (silent with --json)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.status: Any = None

    def __enter__(self):
        if self.quiet:
            return lambda it, text: None
        self.status = err_console.status("CEGIS: starting")
        self.status.__enter__()
        return lambda it, text: self.status.update(f"CEGIS iteration {it}: {text}")

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(*exc)


def write_outputs(problem: Any, found: Any, out: Path, config_path: Path | None) -> dict[str, Any]:
    """certificate.json (and invariant.png for 2-D systems) in ``out``; returns the summary."""
    from safecert.bnn.plot import can_plot, plot_invariant
    from safecert.bnn.verify import POLICY_FILE, build_certificate
    from safecert.certificate import sha256_file, write_certificate

    cert, shown = build_certificate(
        problem,
        found,
        policy_sha256=sha256_file(out / POLICY_FILE),
        config_sha256=sha256_file(config_path) if config_path is not None else None,
    )
    path = write_certificate(cert, out / "certificate.json")
    plot = None
    if shown is not None and can_plot(problem.bench):
        res = shown.result
        cexs = [(c.x, c.x_next) for c in res.counterexamples]
        plot = plot_invariant(
            out / "invariant.png",
            problem.bench,
            problem.mean,
            res.network,
            cexs,
            title=f"{problem.bench.name} at ε = {shown.epsilon}: {res.verdict}",
        )
    r = cert.result
    return {
        "verdict": cert.verdict,
        "epsilon": str(shown.epsilon) if shown is not None else None,
        "epsilon_record": r.get("epsilon"),
        "checks": r.get("checks"),
        "reason": r.get("reason"),
        "iterations": r.get("iterations"),
        "runtimes_s": r.get("runtimes_s"),
        "search": r["search"],
        "certificate": str(path),
        "plot": str(plot) if plot is not None else None,
    }


def _print(summary: dict[str, Any]) -> None:
    rows = [
        [a["epsilon"], a["verdict"], a["reason"], a["iterations"], round(a["runtime_s"], 1)]
        for a in summary["search"]
    ]
    console.print(
        table("ε attempts", ["epsilon", "verdict", "reason", "iterations", "runtime_s"], rows)
    )
    colour = "green" if summary["verdict"] == "SAFE" else "yellow"
    console.print(
        f"[bold {colour}]{summary['verdict']}[/] ε = {summary['epsilon']} "
        f"→ {summary['certificate']}" + (f", {summary['plot']}" if summary.get("plot") else "")
    )
