"""Independent cross-check with Storm (stormpy, test-only: GPL).

* exact VI on the true grid kernel vs Storm's ``Pmax=? [F<=T "unsafe"]`` on the same MDP;
* our robust value (L1 sets) vs Storm's interval-MDP value (uncertainty resolved MAXIMIZE) on the box
  relaxation of each L1 set, q_i ∈ [p̂_i − β/2, p̂_i + β/2] ∩ [0, 1] (any q in the L1 set satisfies
  |q_i − p̂_i| ≤ β/2): ours must never exceed Storm's.
Both MDPs are built with stormpy's sparse builders (SparseMatrixBuilder, SparseModelComponents).
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks._experiments.gridworld import grid_model, simulate_logs, true_kernel
from safecert.shield.estimate import estimate
from safecert.shield.reach import exact_rows, full_shield, robust_rows, value_iteration
from safecert.shield.synthesis import synthesize

from .test_reach import random_model, sample_steps

stormpy = pytest.importorskip("stormpy")
from stormpy import datastructures as ds  # noqa: E402
from stormpy.developer import storage  # noqa: E402


def storm_mdp(model, allowed, entry):
    """Sparse MDP over model states + sink; ``entry(s, a, j)`` gives the value of K-entry j."""
    value_type = type(entry(*_first_row(model)))
    n = model.n_states
    rows = []
    groups = []
    for s in range(n + 1):
        groups.append(len(rows))
        if s == n or model.unsafe[s]:
            rows.append({s: value_type(1.0) if value_type is float else stormpy.Interval(1, 1)})
            continue
        for a in np.flatnonzero(allowed[s]):
            row = {}
            for j, s2 in enumerate(model.successors(s, a)):
                row[int(s2)] = entry(s, a, j)
            rows.append(row)
    builder = ds.SparseMatrixBuilder[value_type](
        rows=len(rows), columns=n + 1, entries=sum(len(r) for r in rows),
        has_custom_row_grouping=True, row_groups=len(groups),
    )  # fmt: skip
    g = 0
    for i, row in enumerate(rows):
        if g < len(groups) and groups[g] == i:
            builder.new_row_group(i)
            g += 1
        for col in sorted(row):
            builder.add_next_value(i, col, row[col])
    labels = storage.StateLabeling(n + 1)
    for name, states in (("init", [model.initial]), ("unsafe", np.flatnonzero(model.unsafe))):
        labels.add_label(name)
        for s in states:
            labels.add_label_to_state(name, int(s))
    comp = storage.SparseModelComponents[value_type](
        transition_matrix=builder.build(), state_labeling=labels
    )
    return storage.SparseMdp[value_type](comp)


def _first_row(model):
    s = int(np.flatnonzero(model.live)[0])
    return s, 0, 0


def storm_values(mdp, horizon, interval=False):
    prop = stormpy.parse_properties(f'Pmax=? [F<={horizon} "unsafe"]')[0]
    kwargs = {"only_initial_states": False}
    if interval:
        kwargs["uncertainty_resolution_mode"] = stormpy.UncertaintyResolutionMode.MAXIMIZE
    res = stormpy.model_checking(mdp, prop, **kwargs)
    return np.array([res.get_value(s) for s in range(mdp.nr_states)])


@pytest.fixture(scope="module")
def grid():
    model = grid_model(6_000)
    probs = true_kernel(model)
    est, _ = simulate_logs(model, probs, 6_000, np.random.default_rng(11))
    shield = synthesize(model, est, 0.1, method="additive").allowed
    return model, probs, est, shield


def test_exact_vi_matches_storm_on_the_true_kernel(grid):
    model, probs, _, shield = grid
    for allowed in (full_shield(model), shield):
        ours, _ = value_iteration(exact_rows(model, probs), allowed, model.horizon)
        mdp = storm_mdp(model, allowed, lambda s, a, j: float(probs[s, a, j]))
        theirs = storm_values(mdp, model.horizon)
        assert np.allclose(ours, theirs, atol=1e-9)


def _box(rows):
    def entry(s, a, j):
        r = rows.radius[s, a]
        if np.isinf(r):
            return stormpy.Interval(0.0, 1.0)
        p = float(rows.p[s, a, j])
        return stormpy.Interval(max(0.0, p - r / 2), min(1.0, p + r / 2))

    return entry


def test_robust_value_never_exceeds_storm_interval_mdp(grid):
    model, _, est, shield = grid
    rows = robust_rows(model, est)
    for allowed in (full_shield(model), shield):
        ours, _ = value_iteration(rows, allowed, model.horizon)
        theirs = storm_values(storm_mdp(model, allowed, _box(rows)), model.horizon, interval=True)
        assert np.all(ours <= theirs + 1e-9)
        assert theirs[model.initial] <= 1.0


@pytest.mark.parametrize("seed", range(4))
def test_random_models_against_storm(seed):
    rng = np.random.default_rng(500 + seed)
    model, probs = random_model(rng, n=6, m=4, horizon=5, per_row=30)
    est = estimate(model, sample_steps(model, probs, rng, 2000))
    allowed = rng.random(model.k.shape) < 0.7
    allowed[:, model.halt] = True
    exact, _ = value_iteration(exact_rows(model, probs), allowed, model.horizon)
    mdp = storm_mdp(model, allowed, lambda s, a, j: float(probs[s, a, j]))
    assert np.allclose(exact, storm_values(mdp, model.horizon), atol=1e-9)
    rows = robust_rows(model, est)
    ours, _ = value_iteration(rows, allowed, model.horizon)
    theirs = storm_values(storm_mdp(model, allowed, _box(rows)), model.horizon, interval=True)
    assert np.all(ours <= theirs + 1e-9)
