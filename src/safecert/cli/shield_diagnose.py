"""``safecert shield diagnose``: the Markov diagnostic of Experiment 4 on a model and its logs."""

from __future__ import annotations

from pathlib import Path

import typer

from safecert.cli.output import console, emit_json, table


def diagnose(
    model: Path = typer.Option(..., "--model", help="Shield model TOML."),
    logs: Path = typer.Option(..., "--logs", help="JSONL step log."),
    context: str = typer.Option(
        "state", "--context", help="Context of the test: 'state' or 'state_action'."
    ),
    alpha: float = typer.Option(0.05, "--alpha", help="False discovery rate (Benjamini–Hochberg)."),
    min_context: int = typer.Option(
        20, "--min-context", help="Visits a context needs to enter a row's test."
    ),
    permutations: int = typer.Option(
        200, "--permutations", help="Permutations for the η̂ null (0: skip)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the permutation null."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Test the Markov assumption A1 on logs: per row a G-test across contexts, BH at 5 %, and
    η̂ against a permutation null. It can refute a predicate set, never certify one.

    Example: safecert shield diagnose --model examples/sandbox/model.toml
    --logs examples/sandbox/explore.jsonl
    """
    import numpy as np

    from safecert.shield.diagnostics import diagnose as run
    from safecert.shield.logs import iter_steps
    from safecert.shield.model import load_model

    shield_model = load_model(model)
    result = run(
        shield_model,
        iter_steps(logs, shield_model),
        context=context,
        alpha=alpha,
        min_context=min_context,
        permutations=permutations,
        rng=np.random.default_rng(seed),
    )
    data = result.to_json()
    if as_json:
        emit_json(data)
        return
    rows = [
        [r.state, r.action, r.visits, r.contexts, f"{r.g:.2f}", f"{r.p_value:.3g}",
         f"{r.p_adjusted:.3g}", "REJECT" if r.reject else "", f"{r.eta:.3f}"]
        for r in result.rows
    ]  # fmt: skip
    console.print(
        table(
            f"Markov diagnostic (context: {context})",
            ["state", "action", "visits", "contexts", "G", "p", "p (BH)", "", "η"],
            rows,
        )
    )
    verdict = "above" if result.eta_hat > result.eta_null else "not above"
    console.print(
        f"{result.rejected} of {result.testable} testable rows reject at FDR {alpha:g} "
        f"({result.rows_visited} stochastic rows visited); η̂ = {result.eta_hat:.3f}, "
        f"{verdict} the permutation null {result.eta_null:.3f} (95 %, {permutations} shuffles)."
    )
