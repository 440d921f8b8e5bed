"""``safecert verify`` for kind "blackbox": recompute the certificate from ``episodes.sqlite``.

Checks, each reported separately:

1. the store holds exactly the episodes each cell claims (counts per cell, task-only, safety-only
   and unified failures, oracle failures), recounted from the raw records;
2. every bound follows from its counts: Clopper–Pearson upper bounds recomputed with SciPy's Beta
   quantile directly (independently of ``safecert.stats``), δ' = (1 − confidence) / M;
3. the whole judged result (decisions, Hoeffding bounds, ODD, verdict) equals a fresh
   :func:`safecert.blackbox.judge.judge_run` on the stored episodes;
4. sequential certificates (``result.sequential``) are handed to BB-seq's ``verify_sequential``
   instead of check 3.

The store is ``--data DIR/episodes.sqlite``, else next to the certificate, else (for a rejudged
certificate) in the run folder above it.
"""

from __future__ import annotations

import math
from pathlib import Path

from safecert.blackbox.certify import records_by_cell
from safecert.blackbox.judge import failure_flags
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import Certificate, Evidence, VerificationReport
from safecert.errors import DataError


def find_store(cert: Certificate, evidence: Evidence) -> Path:
    here = Path(evidence.certificate_path).resolve().parent
    candidates = [Path(evidence.data_dir) / "episodes.sqlite"] if evidence.data_dir else []
    candidates += [here / "episodes.sqlite", here.parent / "episodes.sqlite"]
    for path in candidates:
        if path.is_file():
            return path
    raise DataError(
        f"no episodes.sqlite next to {evidence.certificate_path}",
        field="--data",
        fix="pass --data RUN_DIR (the folder safecert certify wrote)",
    )


def _cp_upper_scipy(k: int, n: int, delta: float) -> float:
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(1.0 - delta, k + 1, n - k))


def check(cert: Certificate, evidence: Evidence) -> VerificationReport:
    report = VerificationReport("blackbox")
    res = cert.result
    with EpisodeStore(find_store(cert, evidence), create=False) as store:
        records = store.records()
        by_cell = records_by_cell(records)
        cells = list(res["cells"])
        stage1 = res["stage1"]
        if stage1["cell"] >= len(cells):
            cells.append(stage1)
        delta = (1.0 - res["confidence"]) / res["family_size"]
        report.add(
            "family size",
            math.isclose(delta, res["delta_cell"], rel_tol=1e-12),
            f"M = {res['family_size']}, δ' = {delta:.6g}",
        )
        for i, cell in enumerate(cells):
            recs = by_cell.get(stage1["cell"] if i >= len(res["cells"]) else i, [])
            task, safety, unified = failure_flags(recs, res["budget"]) if recs else ([], [], [])
            counts = (
                len(recs),
                int(sum(unified)),
                int(sum(task)),
                int(sum(safety)),
                sum(r.failure_reason is not None for r in recs),
            )
            claimed = (
                cell["episodes"],
                cell["failures"],
                cell["task_failures"],
                cell["safety_failures"],
                cell.get("oracle_failures", counts[4]),
            )
            report.add(
                f"cell {i} counts",
                counts == claimed,
                f"stored N={counts[0]} F={counts[1]} task={counts[2]} safety={counts[3]}; "
                f"certificate {claimed[:4]}",
            )
            if "sequential" in res:
                continue
            upper = _cp_upper_scipy(cell["failures"], cell["episodes"], delta)
            report.add(
                f"cell {i} upper bound",
                math.isclose(upper, cell["upper_bound"], rel_tol=1e-9, abs_tol=1e-12),
                f"recomputed {upper:.6g}, certificate {cell['upper_bound']:.6g}",
            )
        if "sequential" in res:
            from safecert.blackbox.sequential import verify_sequential

            for item in verify_sequential(cert, store):
                report.add(item.name, item.ok, item.detail)
        else:
            from safecert.blackbox.rejudge import rejudge_result

            verdict, fresh = rejudge_result(cert, store, res["budget"], res["p_star"])
            keys = ("cells", "stage1", "odd", "family_size")
            same = all(fresh[k] == res[k] for k in keys)
            report.add(
                "judgement",
                same and verdict == cert.verdict,
                f"recomputed verdict {verdict}, certificate {cert.verdict}",
            )
    return report
