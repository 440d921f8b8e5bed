"""The fast rollout path changes no outcome: small certifications give the committed digests.

Each run covers one family of per-step checks: Discrete and Box action spaces, observation and
action noise, action delay, a policy that raises mid-episode, a cost expression that
fails on some steps (``sqrt`` of a negative number), the ``clip`` rule, goals read from ``info``
and ``steps``. The digest is over what a certificate states about the episodes: the evidence
digest of every stored record (seed, return, cost, goal, termination, steps, failure reason) and
the judged cells. The expected values were computed with the per-step path this module replaced
(before issue 28), so an episode that ends differently, one cost summed in another
order or one failure reason reworded fails the test. Runs with ``trust = "isolated"`` (the
default: the policy in a worker process) and ``"in-process"`` must agree.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from safecert.blackbox.certify import certify
from tests.blackbox.pipeline_helpers import write_run

RUNS = {
    "cartpole_noise_sqrt_cost": """
        policy = "python:bbpipe_pol:cartpole"
        env = "CartPole-v1"
        episodes = 10
        seed = 3
        max_steps = 120
        batch_size = {batch}
        trust = "{trust}"
        [spec]
        budget = 0.0
        p_star = 0.3
        cost = 'sqrt(0.2 - abs(obs[2])) * 0 + info.get("cost", 0)'
        [envelope]
        obs_noise = {{ kind = "gaussian", levels = [0.0, 0.3] }}
        obs_ranges = "estimate"
        reference_policy = "random"
        act_noise = {{ kind = "uniform", levels = [0.0, 0.5] }}
        """,
    "cartpole_flaky": """
        policy = "python:bbpipe_pol:flaky"
        env = "CartPole-v1"
        episodes = 12
        seed = 5
        max_steps = 80
        batch_size = {batch}
        trust = "{trust}"
        [spec]
        budget = 0.0
        p_star = 0.5
        cost = 'info.get("cost", 0)'
        goal = "steps >= 30"
        """,
    "point_box_clip": """
        policy = "python:bbpipe_pol:point_greedy"
        env = "SafePointGoal-v0"
        env_kwargs = {{ layout_seed = 0 }}
        episodes = 8
        seed = 7
        max_steps = 60
        batch_size = {batch}
        trust = "{trust}"
        [spec]
        budget = 2.0
        p_star = 0.5
        cost = "info:cost"
        goal = "info:is_success"
        action_out_of_space = "clip"
        [envelope]
        act_noise = {{ kind = "gaussian", levels = [0.0, 0.4] }}
        delay = {{ levels = [0, 2] }}
        """,
}

#: (run, trust) → digest; the trusts differ where a failure reason names the transport
EXPECTED = {
    (
        "cartpole_noise_sqrt_cost",
        "in-process",
    ): "9e1d740b1c9b13cd71021d42fd71726c1970a0452af1d0b6f5c710390722c0af",
    (
        "cartpole_noise_sqrt_cost",
        "isolated",
    ): "9e1d740b1c9b13cd71021d42fd71726c1970a0452af1d0b6f5c710390722c0af",
    (
        "cartpole_flaky",
        "in-process",
    ): "08b8e200f3601827f76664afe06dd4a02826e86a511182193ea790e0c8a3838e",
    (
        "cartpole_flaky",
        "isolated",
    ): "615f0e4f8d2011d343676792d791830824cda469dc64fec36f4f0a58696404f8",
    (
        "point_box_clip",
        "in-process",
    ): "58f11fea497891d2f2c6cc9c033a1968bf147a4f09da87c1bf723fd1038eda58",
    (
        "point_box_clip",
        "isolated",
    ): "58f11fea497891d2f2c6cc9c033a1968bf147a4f09da87c1bf723fd1038eda58",
}


def outcome_digest(certificate: Path) -> str:
    """sha256 of the episode evidence digest and the judged cells of a certificate."""
    doc = json.loads(certificate.read_text())
    evidence = [e["sha256"] for e in doc["inputs"]["evidence"] if e["role"] == "episodes"]
    result = doc["result"]
    stated = {
        "episodes": evidence,
        "cells": result["cells"],
        "stage1": result["stage1"],
        "oracle_failures": result["oracle_failures"],
        "verdict": doc["verdict"] if "verdict" in doc else result.get("verdict"),
    }
    return hashlib.sha256(json.dumps(stated, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(RUNS))
@pytest.mark.parametrize(("trust", "batch"), [("in-process", 1), ("isolated", 1), ("isolated", 3)])
def test_certificates_match_the_committed_digest(tmp_path, name, trust, batch):
    config = write_run(tmp_path, RUNS[name].format(trust=trust, batch=batch))
    certify(config, tmp_path / "out", workers=1, progress=False)
    assert outcome_digest(tmp_path / "out" / "certificate.json") == EXPECTED[name, trust]
