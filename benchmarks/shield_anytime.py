"""Anytime shield sets at full size: coverage over random models and growing logs, and the ratio
of anytime to committed bounds on the same logs.

    python benchmarks/shield_anytime.py [MODELS]   (default 300)

For each random model (tests/shield/test_anytime.py's generator: 6 states + unsafe, 3 actions +
halt, K of 2-3, Dirichlet(0.7) rows), one closed-loop adaptive log grows to 40,000 steps and is
certified at 14 sizes; reports the fraction of logs where some true row *ever* left its set and
where the anytime certificate was *ever* below the exact worst-case value (both must be ≤ δ), and
the ratio anytime V̄ / committed V̄ on the same log at every size from 1,000 steps: the median over
models, the share of models at ≤ 0.8, the median over models where the committed bound is below 1,
and against the best committed budget in hindsight (n0 among 0.1 … 1.0 × steps / R, chosen after
seeing the result: not a valid certificate, an upper limit for what committing could give), the
ratio of the excess over the exact worst-case value V, and of the rows' L1 radii. The
committed budget n0 = floor(0.7 · steps / R) is fixed knowing each size (favourable to committed),
its visits replayed in a random order within the log. Figures: RESULTS_shield_anytime.md.
"""

from __future__ import annotations

import sys

import numpy as np

from safecert.shield.estimate import RowCounter
from safecert.shield.reach import exact_rows, full_shield, robust_rows, value_iteration

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from tests.shield.test_anytime import _grow, random_model  # noqa: E402

#: log sizes (steps) at which anytime and committed bounds are compared
COMPARE_FROM = 1000
#: committed budgets tried for the "best n0 in hindsight" baseline, as fractions of steps / R
HINDSIGHT = (0.1, 0.2, 0.35, 0.5, 0.7, 1.0)


def committed_bound(model, est, n0: int, rng) -> tuple[float, np.ndarray]:
    """V̄ of committed sets with budget n0 on every stochastic row, on the visits of ``est``
    replayed in a random order (the visits of a row are exchangeable, A1); and their radii."""
    counter = RowCounter(model, np.where(model.k >= 2, n0, 0))
    flat = est.counts.reshape(model.k.size, -1)
    rows_ids = np.repeat(np.arange(model.k.size), flat.sum(1))
    pos = np.concatenate([np.repeat(np.arange(flat.shape[-1]), c) for c in flat])
    perm = rng.permutation(len(rows_ids))
    counter.add(rows_ids[perm].astype(np.int64), pos[perm].astype(np.int64))
    rows = robust_rows(model, counter.result(0))
    v = float(value_iteration(rows, full_shield(model), model.horizon)[0][model.initial])
    return v, rows.radius


def main(models: int = 300) -> None:
    rng = np.random.default_rng(2026)
    delta = 0.1
    checkpoints = np.unique(np.geomspace(20, 40_000, 14).astype(int))
    compared = [int(c) for c in checkpoints if c >= COMPARE_FROM]
    out_n = below_n = 0
    ratios: dict[int, list[float]] = {c: [] for c in compared}
    hindsight: dict[int, list[float]] = {c: [] for c in compared}
    informative: dict[int, list[float]] = {c: [] for c in compared}
    excess: dict[int, list[float]] = {c: [] for c in compared}
    radii: dict[int, list[float]] = {c: [] for c in compared}
    for _ in range(models):
        model, probs = random_model(rng, delta=delta)
        full = full_shield(model)
        truth = value_iteration(exact_rows(model, probs), full, model.horizon)[0][model.initial]
        out = below = False
        for size, est in zip(checkpoints, _grow(model, probs, rng, checkpoints), strict=True):
            rows = robust_rows(model, est)
            sto = (model.k >= 2) & ~est.vacuous
            out |= bool((np.abs(probs - est.p_hat).sum(-1)[sto] > rows.radius[sto]).any())
            bound = value_iteration(rows, full, model.horizon)[0][model.initial]
            below |= bool(bound < truth - 1e-12)
            if int(size) not in ratios:
                continue
            # committed on the same log: the paper's rule n0 = 0.7 · steps / R, fixed knowing
            # the log's final size (favourable to committed), and the best n0 in hindsight
            share = est.steps / model.stochastic_rows
            rule, radius = committed_bound(model, est, max(int(0.7 * share), 1), rng)
            best = min(
                committed_bound(model, est, max(int(f * share), 1), rng)[0] for f in HINDSIGHT
            )
            if rule > 0:
                ratios[int(size)].append(bound / rule)
                if rule < 1:
                    informative[int(size)].append(bound / rule)
            if rule > truth + 1e-12:
                excess[int(size)].append((bound - truth) / (rule - truth))
            if best > 0:
                hindsight[int(size)].append(bound / best)
            both = sto & np.isfinite(radius) & (radius > 0)
            radii[int(size)].extend((rows.radius[both] / radius[both]).tolist())
        out_n += out
        below_n += below
    print(f"models {models}, delta {delta}, sizes {[int(c) for c in checkpoints]}")
    print(f"ever some row outside its set: {out_n / models:.4f}")
    print(f"ever certificate below the exact value: {below_n / models:.4f}")
    print(
        "steps | median V̄ anytime/committed (n0 = 0.7 steps/R) | share <= 0.8 | median where "
        "committed < 1 (models) | median (V̄ − V) anytime/committed | median anytime/best "
        "committed n0 in hindsight | median row radius anytime/committed"
    )
    for c in compared:
        r, h, i = np.array(ratios[c]), np.array(hindsight[c]), np.array(informative[c])
        inf = f"{np.median(i):.3f} ({len(i)})" if len(i) else "- (0)"
        exc = f"{np.median(excess[c]):.3f}" if excess[c] else "-"
        print(
            f"{c} | {np.median(r):.3f} | {np.mean(r <= 0.8):.2f} | {inf} | {exc} | "
            f"{np.median(h):.3f} | {np.median(radii[c]):.3f}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
