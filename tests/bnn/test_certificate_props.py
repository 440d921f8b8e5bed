"""BNN certificates through the typed models: round trips and one-line errors (SAFE and UNKNOWN)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import certprops


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_random_valid_bnn_certificates_round_trip(lds_run, unknown_run, seed):
    for path in (lds_run.certificate, unknown_run):
        data = json.loads(path.read_text())
        certprops.assert_round_trips(certprops.perturb_numbers(data, seed))


def test_every_deletion_and_type_change_is_one_line(lds_run, unknown_run):
    for path in (lds_run.certificate, unknown_run):
        certprops.assert_every_mutation_is_one_line(json.loads(path.read_text()))
