"""``safecert bound`` and ``safecert plan``: Clopper–Pearson bounds and sample-size plans."""

from __future__ import annotations

from typing import Annotated

import typer

from safecert.cli.output import console, emit_json, table
from safecert.errors import ConfigError

# safecert.stats imports scipy.stats: imported inside the commands so `safecert --help` is fast


def _delta(confidence: float, family_size: int) -> float:
    if not 0.0 < confidence < 1.0:
        raise ConfigError(
            f"{confidence} is outside (0, 1)", field="--confidence", fix="use e.g. 0.9"
        )
    if family_size < 1:
        raise ConfigError(f"{family_size} must be >= 1", field="--family-size", fix="use M >= 1")
    from safecert.stats import bonferroni

    return bonferroni(1.0 - confidence, family_size)


def parse_int_list(text: str, option: str) -> list[int]:
    """Parse ``"0,1,2"`` into ints ≥ 0, naming the option on error."""
    try:
        values = [int(part) for part in text.split(",") if part.strip() != ""]
    except ValueError:
        raise ConfigError(
            f"{text!r} is not a comma-separated list of integers", field=option, fix="e.g. 0,1,2"
        ) from None
    if not values or any(v < 0 for v in values):
        raise ConfigError(f"{text!r} needs integers >= 0", field=option, fix="e.g. 0,1,2")
    return values


def bound(
    failures: Annotated[int, typer.Option("--failures", "-k", help="Failures K observed.")],
    episodes: Annotated[int, typer.Option("--episodes", "-n", help="Episodes N run.")],
    confidence: Annotated[float, typer.Option(help="Family-wise confidence 1-δ.")] = 0.9,
    family_size: Annotated[int, typer.Option(help="Cells M sharing δ (Bonferroni δ/M).")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One-sided Clopper–Pearson lower and upper bounds for one cell, each at δ/M.

    Example: safecert bound --failures 81 --episodes 10000 --confidence 0.9 --family-size 9
    """
    if episodes < 1:
        raise ConfigError(f"{episodes} must be >= 1", field="--episodes", fix="pass N >= 1")
    if not 0 <= failures <= episodes:
        raise ConfigError(
            f"{failures} is not in [0, episodes={episodes}]",
            field="--failures",
            fix="pass 0 <= K <= N",
        )
    from safecert.stats import cp_lower, cp_upper

    delta = _delta(confidence, family_size)
    result = {
        "failures": failures,
        "episodes": episodes,
        "confidence": confidence,
        "family_size": family_size,
        "rate": failures / episodes,
        "lower_bound": cp_lower(failures, episodes, delta).value,
        "upper_bound": cp_upper(failures, episodes, delta).value,
    }
    if json_out:
        emit_json(result)
        return
    console.print(
        table(
            f"Clopper–Pearson bounds, confidence {confidence} over {family_size} cell(s) "
            f"(δ' = {delta:.6g} per side)",
            ["failures", "episodes", "rate", "lower_bound", "upper_bound"],
            [[failures, episodes, result["rate"], result["lower_bound"], result["upper_bound"]]],
        )
    )


def plan(
    p_star: Annotated[float, typer.Option("--p-star", help="Required failure-rate bound p*.")],
    confidence: Annotated[float, typer.Option(help="Family-wise confidence 1-δ.")] = 0.9,
    family_size: Annotated[int, typer.Option(help="Cells M sharing δ.")] = 1,
    failures: Annotated[str, typer.Option(help="Planned failure counts, comma-separated.")] = "0",
    method: Annotated[
        str | None,
        typer.Option(
            help="Compare methods instead: cp, hoeffding, sequential (= onesided), onesided, "
            "looks, mixture, betting, curtail (comma-separated) or all."
        ),
    ] = None,
    expected_rate: Annotated[
        float, typer.Option(help="Expected failure rate (with --method).")
    ] = 0.0,
    cap: Annotated[int, typer.Option(help="Episode cap per cell of sequential methods.")] = 10000,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Minimum episodes N with upper(k, N, δ/M) ≤ p* for each planned failure count k; with
    --method, the episodes each method needs at an expected failure rate, side by side.

    Example: safecert plan --p-star 0.05 --confidence 0.9 --failures 0,1,2,3,5,10
    Example: safecert plan --p-star 0.05 --family-size 9 --method all --expected-rate 0.01
    """
    if not 0.0 < p_star < 1.0:
        raise ConfigError(f"{p_star} is outside (0, 1)", field="--p-star", fix="use e.g. 0.05")
    delta = _delta(confidence, family_size)
    if method is not None:
        _plan_methods(method, p_star, confidence, family_size, delta, expected_rate, cap, json_out)
        return
    from safecert.stats import min_episodes

    counts = parse_int_list(failures, "--failures")
    plans = [min_episodes(k, p_star, delta) for k in counts]
    result = {
        "p_star": p_star,
        "confidence": confidence,
        "family_size": family_size,
        "plans": [
            {"failures": p.failures, "episodes": p.episodes, "upper_bound": p.upper_bound}
            for p in plans
        ],
    }
    if json_out:
        emit_json(result)
        return
    console.print(
        table(
            f"Episodes needed for upper bound ≤ {p_star} at confidence {confidence}"
            f" over {family_size} cell(s)",
            ["failures", "episodes", "upper_bound"],
            [[p.failures, p.episodes, p.upper_bound] for p in plans],
        )
    )


def _plan_methods(
    method: str,
    p_star: float,
    confidence: float,
    family_size: int,
    delta: float,
    rate: float,
    cap: int,
    json_out: bool,
) -> None:
    from safecert.stats.sequential_plan import PLAN_METHODS, compare_methods

    names = [m.strip() for m in method.split(",") if m.strip()]
    if names == ["all"]:
        names = [m for m in PLAN_METHODS if m != "sequential"]
    bad = [m for m in names if m not in PLAN_METHODS]
    if not names or bad:
        raise ConfigError(
            f"{method!r} names no known method",
            field="--method",
            fix="use " + ", ".join(PLAN_METHODS) + " (comma-separated) or all",
        )
    if not 0.0 <= rate < 1.0:
        raise ConfigError(f"{rate} is outside [0, 1)", field="--expected-rate", fix="e.g. 0.01")
    if cap < 1:
        raise ConfigError(f"{cap} must be >= 1", field="--cap", fix="e.g. 10000")
    plans = compare_methods(names, p_star, delta, rate, cap)
    result = {
        "p_star": p_star,
        "confidence": confidence,
        "family_size": family_size,
        "delta_cell": delta,
        "expected_rate": rate,
        "cap": cap,
        "methods": [
            {
                "method": p.method,
                "kind": p.kind,
                "episodes": p.episodes,
                "median": p.median,
                "quantile90": p.quantile90,
                "pass_prob": p.pass_prob,
                "how": p.how,
            }
            for p in plans
        ],
    }
    if json_out:
        emit_json(result)
        return

    def fmt(x: float | None, digits: int = 0) -> str:
        return "never" if x is None else f"{x:.{digits}f}"

    console.print(
        table(
            f"Episodes per cell to certify p* = {p_star} at confidence {confidence} over "
            f"{family_size} cell(s), expected failure rate {rate} "
            "(sequential: expected episodes)",
            [
                "method",
                "kind",
                "episodes (expected if sequential)",
                "median",
                "90%",
                "P(PASS)",
                "how",
            ],
            [
                [
                    p.method,
                    p.kind,
                    fmt(p.episodes),
                    "" if p.median is None else p.median,
                    "" if p.quantile90 is None else p.quantile90,
                    fmt(p.pass_prob, 3),
                    p.how,
                ]
                for p in plans
            ],
        )
    )
