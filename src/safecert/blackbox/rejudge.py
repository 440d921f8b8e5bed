"""Re-judge a finished run at another budget d and threshold p*, without new episodes.

Each stored record keeps the episode's total cost and its goal flag, which is all the unified
failure F = ¬Goal ∨ cost > d needs (CORE-RL Appendix E), so the counts, bounds, decisions and
verdict are recomputed from ``episodes.sqlite`` with the same code as the original run
(:func:`safecert.blackbox.judge.judge_run`). The new certificate records what it was re-judged from
(``result.rejudged``); ``safecert verify`` finds the store in the run folder above it. The
store is opened read-only: re-judging never changes the evidence.
"""

from __future__ import annotations

import math
from pathlib import Path

from safecert.blackbox.certify import blackbox_result, store_digest
from safecert.blackbox.config import RunConfig
from safecert.blackbox.grid import Family
from safecert.blackbox.result import Rejudged
from safecert.blackbox.store import EpisodeStore, output_folder
from safecert.certificate import (
    BlackboxCertificate,
    Inputs,
    make_certificate,
    read_certificate,
    write_certificate,
)
from safecert.config import parse_model
from safecert.errors import ConfigError, DataError

STORE = "../episodes.sqlite"


def rejudge(
    run_dir: Path,
    budget: float,
    p_star: float,
    out_dir: Path | None = None,
    *,
    sign_key: Path | None = None,
) -> tuple[BlackboxCertificate, Path]:
    """Write ``out_dir/certificate.json`` (default ``run_dir/rejudge_d{budget}_p{p_star}``) + report.

    The new certificate's ``parameters.spec`` holds the new budget and p*; ``result.rejudged``
    holds the spec the episodes were run under. Its evidence is the run's store, one folder up.
    """
    if not (math.isfinite(budget) and budget >= 0):
        raise ConfigError(
            f"{budget} is not a finite number >= 0", field="budget", fix="pass e.g. --budget 25"
        )
    if not 0 < p_star < 1:
        raise ConfigError(f"{p_star} is outside (0, 1)", field="p_star")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(
            f"{run_dir} is not a folder",
            field="DIR",
            fix="pass the folder of a safecert certify run (it holds certificate.json)",
        )
    cert = read_certificate(run_dir / "certificate.json")
    if cert.kind == "sequential":
        raise DataError(
            "a sequential run stopped its cells with the original p*; re-judging it "
            "at another threshold has no guarantee",
            field="DIR",
            fix="rerun with safecert certify",
        )
    if not isinstance(cert, BlackboxCertificate):
        raise DataError(f"{run_dir} holds a {cert.kind} certificate", field="DIR")
    if cert.result.rejudged is not None:
        raise DataError(
            f"{run_dir} holds a re-judged certificate", field="DIR", fix="pass the run folder"
        )
    out_dir = Path(out_dir) if out_dir else run_dir / f"rejudge_d{budget:g}_p{p_star:g}"
    params = {
        **cert.parameters,
        "spec": {**cert.parameters["spec"], "budget": budget, "p_star": p_star},
    }
    config = parse_model(RunConfig, params, prefix="parameters")
    res = cert.result
    family = Family.of(config.envelope, config.spec.confidence)
    with EpisodeStore(run_dir / "episodes.sqlite", create=False) as store:
        if store.count() == 0:
            raise DataError(
                f"{run_dir / 'episodes.sqlite'} holds no episode, so there is nothing to re-judge",
                field="episodes.sqlite",
                fix="pass the folder of a finished safecert certify run, or rerun safecert certify",
            )
        _check_complete(store, family.size, config.episodes)
        verdict, result = blackbox_result(
            config,
            family,
            store.records(),
            cost_range=None if res.cost_range is None else (res.cost_range[0], res.cost_range[1]),
            return_range=None
            if res.return_range is None
            else (res.return_range[0], res.return_range[1]),
            obs_ranges=store.get_meta("obs_ranges"),
            rejudged=Rejudged(budget=res.budget, p_star=res.p_star, store=STORE),
        )
        new = make_certificate(
            "blackbox",
            verdict,
            parameters=params,
            inputs=Inputs(
                root=cert.inputs.root,
                files=list(cert.inputs.files),
                evidence=[store_digest(store, STORE)],
            ),
            seed=cert.seed,
            result=result,
        )
        assert isinstance(new, BlackboxCertificate)
        write_certificate(new, output_folder(out_dir) / "certificate.json", sign_key=sign_key)
    return new, out_dir


def _check_complete(store: EpisodeStore, cells: int, episodes: int) -> None:
    """The store holds exactly episodes ``0 … episodes-1`` of cells ``0 … cells-1`` (the run the
    certificate states); else one :class:`DataError` line with the counts and a first example."""
    held = store.done()
    expected = {(c, i) for c in range(cells) for i in range(episodes)}
    missing, extra = sorted(expected - held), sorted(held - expected)
    if missing or extra:
        first = missing[0] if missing else extra[0]
        raise DataError(
            f"{store.path} holds {len(held)} episodes, not the {len(expected)} of the run "
            f"({cells} cells x {episodes}): {len(missing)} missing, {len(extra)} extra, e.g. "
            f"cell {first[0]} episode {first[1]}",
            field="episodes.sqlite",
            fix="resume the run (safecert certify CONFIG --out DIR --resume) and re-judge it",
        )
