"""Anytime shield sets at full size: coverage over random models and growing logs, and the ratio
of anytime to committed bounds on the same logs.

    python benchmarks/shield_anytime.py [MODELS]   (default 300)

For each random model (tests/shield/test_anytime.py's generator: 6 states + unsafe, 3 actions +
halt, K of 2-3, Dirichlet(0.7) rows), one closed-loop adaptive log grows to 40,000 steps and is
certified at 14 sizes; reports the fraction of logs where some true row *ever* left its set and
where the anytime certificate was *ever* below the exact worst-case value (both must be ≤ δ), and
the median over models of (anytime V̄ / committed V̄) at the last size, the committed budget being
n0 = floor(0.7 · steps / R) fixed from the final size (favourable to committed), its visits
replayed in a random order within the final log.
"""

from __future__ import annotations

import sys

import numpy as np

from safecert.shield.estimate import RowCounter
from safecert.shield.reach import exact_rows, full_shield, robust_rows, value_iteration

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from tests.shield.test_anytime import _grow, random_model  # noqa: E402


def main(models: int = 300) -> None:
    rng = np.random.default_rng(2026)
    delta = 0.1
    checkpoints = np.unique(np.geomspace(20, 40_000, 14).astype(int))
    out_n = below_n = 0
    ratios = []
    for _ in range(models):
        model, probs = random_model(rng, delta=delta)
        full = full_shield(model)
        truth = value_iteration(exact_rows(model, probs), full, model.horizon)[0][model.initial]
        out = below = False
        for est in _grow(model, probs, rng, checkpoints):
            rows = robust_rows(model, est)
            sto = (model.k >= 2) & ~est.vacuous
            out |= bool((np.abs(probs - est.p_hat).sum(-1)[sto] > rows.radius[sto]).any())
            bound = value_iteration(rows, full, model.horizon)[0][model.initial]
            below |= bool(bound < truth - 1e-12)
        out_n += out
        below_n += below
        # committed on the same final log: replay the visits with n0 = 0.7 * steps / R
        n0 = max(int(0.7 * est.steps / model.stochastic_rows), 1)
        committed = RowCounter(model, np.where(model.k >= 2, n0, 0))
        m = len(model.actions)
        rows_ids = np.repeat(np.arange(model.k.size), est.counts.reshape(model.k.size, -1).sum(1))
        pos = np.concatenate(
            [
                np.repeat(np.arange(est.counts.shape[-1]), c)
                for c in est.counts.reshape(model.k.size, -1)
            ]
        )
        perm = rng.permutation(len(rows_ids))  # visits of a row are exchangeable (A1)
        committed.add(rows_ids[perm].astype(np.int64), pos[perm].astype(np.int64))
        c_est = committed.result(0)
        c_bound = value_iteration(robust_rows(model, c_est), full, model.horizon)[0][model.initial]
        a_bound = value_iteration(robust_rows(model, est), full, model.horizon)[0][model.initial]
        if c_bound > 0:
            ratios.append(a_bound / c_bound)
        del m
    print(f"models {models}, delta {delta}, sizes {list(checkpoints)}")
    print(f"ever some row outside its set: {out_n / models:.4f}")
    print(f"ever certificate below the exact value: {below_n / models:.4f}")
    print(f"median anytime/committed bound at {checkpoints[-1]} steps: {np.median(ratios):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
