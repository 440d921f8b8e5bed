"""Shield certificates through the typed models: round trips and one-line errors (both verdicts)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import certprops
from tests.shield.test_forgery import base

__all__ = ["base"]


@pytest.mark.parametrize("run", ["synth", "bound"])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_random_valid_shield_certificates_round_trip(base, run, seed):
    data = json.loads((base / run / "certificate.json").read_text())
    certprops.assert_round_trips(certprops.perturb_numbers(data, seed))


@pytest.mark.parametrize("run", ["synth", "bound"])
def test_every_deletion_and_type_change_is_one_line(base, run):
    data = json.loads((base / run / "certificate.json").read_text())
    certprops.assert_every_mutation_is_one_line(data)
