"""Re-judge a finished run at another budget d and threshold p*, without new episodes.

Each stored record keeps the episode's total cost and its goal flag, which is all the unified
failure F = ¬Goal ∨ cost > d needs (CORE-RL Appendix E), so the counts, bounds, decisions and
verdict are recomputed from ``episodes.sqlite`` with the same code as the original run
(:func:`safecert.blackbox.judge.judge_run`). The new certificate records what it was re-judged from
(``result.rejudged``); ``safecert verify`` finds the store in the run folder above it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safecert.blackbox.certify import records_by_cell
from safecert.blackbox.judge import judge_run
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import Certificate, make_certificate, read_certificate
from safecert.errors import ConfigError, DataError


def rejudge_result(
    cert: Certificate, store: EpisodeStore, budget: float, p_star: float
) -> tuple[str, dict[str, Any]]:
    """(verdict, result) of ``cert``'s run judged at ``budget`` and ``p_star``."""
    res = cert.result
    new = judge_run(
        records_by_cell(store.records()),
        [c["params"] for c in res["cells"]],
        res["stage1"]["cell"],
        budget=budget,
        p_star=p_star,
        confidence=res["confidence"],
        return_range=None if res.get("return_range") is None else tuple(res["return_range"]),
        cost_range=None if res.get("cost_range") is None else tuple(res["cost_range"]),
    )
    verdict = new.pop("verdict")
    return verdict, {**res, **new}


def rejudge(
    run_dir: Path, budget: float, p_star: float, out_dir: Path | None = None
) -> tuple[Certificate, Path]:
    """Write ``out_dir/certificate.json`` (default ``run_dir/rejudge_d{budget}_p{p_star}``) + report."""
    if not budget >= 0:
        raise ConfigError(f"{budget} is negative", field="--budget", fix="pass a budget >= 0")
    if not 0 < p_star < 1:
        raise ConfigError(f"{p_star} is outside (0, 1)", field="--p-star")
    run_dir = Path(run_dir)
    cert = read_certificate(run_dir / "certificate.json")
    if cert.kind != "blackbox":
        raise DataError(f"{run_dir} holds a {cert.kind} certificate", field="DIR")
    if "sequential" in cert.result:
        raise DataError(
            "a sequential run stopped its cells with the original p*; re-judging it "
            "at another threshold has no guarantee",
            field="DIR",
            fix="rerun with safecert certify",
        )
    out_dir = Path(out_dir) if out_dir else run_dir / f"rejudge_d{budget:g}_p{p_star:g}"
    with EpisodeStore(run_dir / "episodes.sqlite", create=False) as store:
        verdict, result = rejudge_result(cert, store, budget, p_star)
        result["rejudged"] = {
            "budget": cert.result["budget"],
            "p_star": cert.result["p_star"],
            "store": "../episodes.sqlite",
        }
        params = {
            **cert.parameters,
            "spec": {**cert.parameters["spec"], "budget": budget, "p_star": p_star},
        }
        new = make_certificate(
            "blackbox",
            verdict,
            parameters=params,
            inputs=dict(cert.inputs),
            seed=cert.seed,
            result=result,
        )
        from safecert.certificate import write_certificate
        from safecert.report import write_report

        write_certificate(new, out_dir / "certificate.json")
        config_path = store.get_meta("config_path")
        write_report(
            new, store.records(), out_dir, config_path=Path(config_path) if config_path else None
        )
    return new, out_dir
