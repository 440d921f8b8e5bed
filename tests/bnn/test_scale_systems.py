"""The 3-D lane-keeping and 4-D cart-pole, lane-keeping-with-actuator and reactor systems (issue
25.5): the packaged tables compile to the dynamics their comments state (written out here by hand),
their policies fit and keep the mean closed loop inside B, ``--benchmark`` builds their published
setup, and the packaged ``lane4`` and ``reactor`` policies are the ones their training script
writes."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from safecert.bnn.config import bayesian_spec
from safecert.bnn.networks import SCALE_POLICIES, load_policy
from safecert.bnn.setup import benchmark_config
from safecert.bnn.spec import parse_epsilon
from safecert.bnn.system import get_benchmark


def _lane(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1, 1)
    return np.stack([x[:, 0] + 0.1 * x[:, 1], x[:, 1] + 0.1 * x[:, 2], 0.8 * x[:, 2] + 0.2 * uc], 1)


def _lane4(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1, 1)
    e, psi, r, d = x.T
    return np.stack([e + 0.1 * psi, psi + 0.1 * r, 0.8 * r + 0.2 * d, 0.6 * d + 0.4 * uc], 1)


def _reactor(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1, 1)
    c, temp, jacket, valve = x.T
    return np.stack(
        [
            0.5 * c - 0.2 * temp,
            1.1 * temp + 0.1 * c + 0.2 * jacket,
            0.4 * jacket + 0.2 * temp - 0.4 * valve,
            0.2 * valve + 0.8 * uc,
        ],
        1,
    )


def _cartpole(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    uc = np.clip(u, -1, 1)
    M, m, half_len, g, dt, force = 1.0, 0.1, 0.5, 9.8, 0.05, 10.0
    acc = (force * uc - m * g * x[:, 2]) / M
    ang = ((M + m) * g * x[:, 2] - force * uc) / (M * half_len)
    return np.stack(
        [x[:, 0] + dt * x[:, 1], x[:, 1] + dt * acc, x[:, 2] + dt * x[:, 3], x[:, 3] + dt * ang], 1
    )


@pytest.mark.parametrize(
    "name,step",
    [("lane", _lane), ("cartpole", _cartpole), ("lane4", _lane4), ("reactor", _reactor)],
)
def test_packaged_dynamics_are_the_stated_model(name, step) -> None:
    bench = get_benchmark(name)
    rng = np.random.default_rng(0)
    x = rng.uniform(bench.box.lo, bench.box.hi, size=(5000, bench.state_dim))
    u = rng.uniform(-3, 3, size=(5000, 1))
    np.testing.assert_allclose(bench.step(x, u), step(x, u[:, 0]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", SCALE_POLICIES)
def test_mean_closed_loop_from_every_corner_of_x0_stays_inside_and_settles(name) -> None:
    bench, net = get_benchmark(name), load_policy(name)
    assert (net.in_dim, net.out_dim) == (bench.state_dim, 1)
    box = bench.initial.pieces[0].box
    x = np.array(list(itertools.product(*zip(box.lo, box.hi, strict=True))))
    for _ in range(400):
        x = bench.step(x, net.forward(x))
        assert np.all(bench.in_box(x)) and not np.any(bench.in_unsafe(x))
    assert np.max(np.abs(x)) < 0.1  # settles near the origin


@pytest.mark.parametrize("name", SCALE_POLICIES)
def test_benchmark_setup_is_the_papers_convention(name) -> None:
    cfg = benchmark_config(name)
    assert cfg.bayesian.sigma == 0.1 and cfg.bayesian.first_layer == 1
    assert cfg.invariant.hidden == [16] and cfg.limits.max_iterations == 1000
    net = load_policy(name)
    box = bayesian_spec(cfg, net).box(net, parse_epsilon("0.5sigma"))
    (w0l, _), (w0u, _) = box.lower[0], box.upper[0]
    np.testing.assert_array_equal(w0l, w0u)  # first layer deterministic
    (w1l, b1l), (w1u, b1u) = box.lower[1], box.upper[1]
    np.testing.assert_allclose(w1u - w1l, 2 * 0.05)  # ± 0.5 · 0.1 on the output kernel
    np.testing.assert_array_equal(b1l, b1u)


def test_the_cli_names_every_benchmark():
    """``--benchmark``'s help and error text list every name ``benchmark_config`` accepts."""
    import re

    from safecert.bnn.setup import BENCHMARKS
    from safecert.cli.bnn import BENCHMARK_NAMES

    missing = [n for n in BENCHMARKS if not re.search(rf"(?<![\w]){n}(?![\w])", BENCHMARK_NAMES)]
    assert not missing, missing


_DATA = Path(__file__).resolve().parents[2] / "src" / "safecert" / "bnn" / "data"
#: sha256 of the packaged lane4 policy
LANE4_SHA256 = "3394befdd2623441c2ecab9675c695e2f3946710d1c2d4388a30bfcd722cf14b"
#: sha256 of the packaged policies that their training script writes again, byte for byte
PINNED = {
    "lane4": LANE4_SHA256,
    "reactor": "a2bd377f281d2de7ee257f06dda0d1e57800489ceffdee89e43966a4941a2379",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_policy_is_the_pinned_file(name) -> None:
    import hashlib

    assert hashlib.sha256((_DATA / f"{name}.npz").read_bytes()).hexdigest() == PINNED[name]


@pytest.mark.slow  # trains the policy again: ≈ 15 CPU-s each
@pytest.mark.parametrize("name", sorted(PINNED))
def test_policy_is_the_file_its_training_script_writes(name, tmp_path) -> None:
    """``benchmarks/bnn_scale_train.py`` (seeded, one thread) writes the packaged file again, byte
    for byte: the policy is reproducible from the script."""
    import hashlib
    import subprocess
    import sys

    script = _DATA.parents[3] / "benchmarks" / "bnn_scale_train.py"
    cmd = [sys.executable, str(script), "--systems", name, "--out", str(tmp_path)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    assert hashlib.sha256((tmp_path / f"{name}.npz").read_bytes()).hexdigest() == PINNED[name]


@pytest.mark.slow  # a few CEGIS rounds on the 4-D closure MILP, twice: ≈ 40 CPU-s
def test_a_short_lane4_run_writes_a_certificate_that_verifies_and_repeats(tmp_path, capsys) -> None:
    """``--benchmark lane4`` end to end, cut short by its iteration budget: the certificate
    (UNKNOWN, claiming nothing) names the packaged policy by its pinned digest, and ``safecert
    verify`` re-derives every recorded value. The same inputs again (on two solver processes
    instead of one) write the same certificate but for its timings, byte for byte."""
    import json

    from safecert.bnn.certify import certify_run
    from safecert.cli.main import main
    from tests.bnn.test_budgets import reproducible

    cfg = benchmark_config(
        "lane4",
        epsilon="0.5sigma",
        limits={"max_iterations": 3},
        data={"witness_rollouts": 2000, "bootstrap_states": 500, "falsifier_samples": 50_000},
    )
    run = certify_run(cfg, None, tmp_path / "out", workers=1)
    assert run.certificate.verdict == "UNKNOWN"
    assert run.certificate.result.reason.startswith("iteration cap 3 reached")
    cert = json.loads((tmp_path / "out" / "certificate.json").read_text())
    [copy] = cert["inputs"]["evidence"]
    assert copy["path"] == "policy.npz" and copy["sha256"] == LANE4_SHA256
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "out" / "certificate.json"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["checks"] and all(c["ok"] for c in report["checks"])
    again = certify_run(cfg, None, tmp_path / "again", workers=2).certificate
    first, second = (
        json.dumps(reproducible(c), sort_keys=True).encode() for c in (run.certificate, again)
    )
    assert first == second


def _falsifier_tables() -> dict:
    """``SYSTEMS`` of ``benchmarks/bnn_cert_falsify.py`` (the independent falsifier's hand tables)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bnn_cert_falsify.py"
    spec = importlib.util.spec_from_file_location("bnn_cert_falsify", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SYSTEMS


@pytest.mark.parametrize("name", SCALE_POLICIES)
def test_the_independent_falsifier_checks_the_packaged_sets(name) -> None:
    """The falsifier's hand-written B and X0 are the packaged tables' (a falsifier sampling an old
    X0 would check a claim the certificate does not make): centred boxes with these half-widths."""
    step, b_half, x0_half = _falsifier_tables()[name]
    bench = get_benchmark(name)
    [x0] = bench.initial.pieces
    np.testing.assert_array_equal(bench.box.hi, b_half)
    np.testing.assert_array_equal(bench.box.lo, -b_half)
    np.testing.assert_array_equal(x0.box.hi, x0_half)
    np.testing.assert_array_equal(x0.box.lo, -x0_half)
    x = np.random.default_rng(0).uniform(-b_half, b_half, size=(2000, len(b_half)))
    u = np.random.default_rng(1).uniform(-3, 3, size=(2000, 1))
    np.testing.assert_allclose(step(x, u[:, 0]), bench.step(x, u), rtol=0, atol=1e-12)
