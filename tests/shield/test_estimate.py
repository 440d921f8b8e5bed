"""Committed budgets: only the first n0 successors per row count; short rows are vacuous."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from safecert.shield.estimate import estimate
from safecert.shield.logs import Step
from safecert.shield.model import model_from_dict

from .test_model import LABELS


def _steps(model, seq):
    return [
        Step("e", i, s, a, s2, model.successor_position(s, a, s2), i + 1)
        for i, (s, a, s2) in enumerate(seq)
    ]


def test_truncation_uses_the_first_n0_in_file_order():
    m = model_from_dict({**LABELS, "budget": {"per_row": 3}})
    a, b = m.state_index("a"), m.state_index("b")
    go = m.actions.index("go")
    seq = [(a, go, b), (a, go, a), (a, go, b), (a, go, a), (a, go, a)]  # first three: b, a, b
    e = estimate(m, _steps(m, seq))
    assert e.visits[a, go] == 5 and e.counts[a, go].tolist() == [1, 2]
    assert np.allclose(e.p_hat[a, go], [1 / 3, 2 / 3])
    assert not e.vacuous[a, go] and e.vacuous[b, go]  # b·go never visited
    assert e.deterministic[a, m.halt] and e.p_hat[a, m.halt, 0] == 1.0
    assert e.missed_budget == 3  # b·go, a·stay, b·stay


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 1)), max_size=300),
    st.integers(1, 20),
    st.integers(1, 7),
)
def test_chunked_counts_equal_a_plain_loop(seq, n0, chunk_pow):
    m = model_from_dict({**LABELS, "budget": {"per_row": n0}})
    go, stay = m.actions.index("go"), m.actions.index("stay")
    steps = []
    for s, which, j in seq:
        a = (go, stay)[which]
        k = m.successors(s, a)
        steps.append((s, a, int(k[min(j, len(k) - 1)])))
    e = estimate(m, _steps(m, steps), chunk=1 << chunk_pow)
    want = np.zeros_like(e.counts)
    seen = np.zeros_like(e.visits)
    for s, a, s2 in steps:
        if seen[s, a] < m.n0[s, a]:
            want[s, a, m.successor_position(s, a, s2)] += 1
        seen[s, a] += 1
    assert (e.counts == want).all() and (e.visits == seen).all()
