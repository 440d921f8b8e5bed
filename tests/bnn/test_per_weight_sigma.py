"""One σ per weight (issue 25.4): a BNN trained by variational inference has a σ for every weight.
The box, the posterior draws and the acceptance probability follow the σ of each entry; with every
σ of a layer equal, the per-weight spec gives exactly the per-layer one."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm, truncnorm

from safecert.bnn.networks import load_policy
from safecert.bnn.sampling import SafeBNNPolicy, acceptance_probability
from safecert.bnn.spec import BayesianSpec, default_spec
from safecert.errors import ConfigError


def _constant(spec: BayesianSpec, net) -> BayesianSpec:
    sig = [
        (np.full(w.shape, spec.sigma[k]), np.full(b.shape, spec.sigma[k]))
        for k, (w, b) in enumerate(net.layers)
    ]
    return BayesianSpec.per_weight(net, sig, spec.bayesian_layers, spec.bayesian_biases)


@pytest.mark.parametrize("name", ["lds", "pend_all"])
def test_equal_sigmas_give_the_per_layer_spec_bit_for_bit(name: str) -> None:
    net, spec = load_policy(name), default_spec(name)
    per_weight = _constant(spec, net)
    for eps in ("1.5sigma", "0.07"):
        a, b = spec.box(net, eps), per_weight.box(net, eps)
        for (al, bl), (au, bu) in zip(a.lower + a.upper, b.lower + b.upper, strict=True):
            np.testing.assert_array_equal(al, au)
            np.testing.assert_array_equal(bl, bu)
        assert acceptance_probability(a, spec) == acceptance_probability(b, per_weight)
    one = spec.sample(net, np.random.default_rng(4))
    two = per_weight.sample(net, np.random.default_rng(4))
    for (w1, b1), (w2, b2) in zip(one, two, strict=True):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)


def test_each_weight_gets_its_own_interval_draws_and_acceptance() -> None:
    net = load_policy("lds")
    rng = np.random.default_rng(0)
    sig = [(rng.uniform(0.01, 0.3, w.shape), np.zeros(b.shape)) for w, b in net.layers]
    flags = (False, True)
    spec = BayesianSpec.per_weight(net, sig, flags)
    box = spec.box(net, "2sigma")
    (w1, b1), (sw, _) = net.layers[1], sig[1]
    np.testing.assert_allclose(box.upper[1][0] - w1, 2 * sw, rtol=1e-12)
    np.testing.assert_array_equal(box.upper[0][0], net.layers[0][0])  # deterministic layer
    np.testing.assert_array_equal(box.upper[1][1], b1)  # biases not Bayesian
    expected = float(np.prod(np.full(sw.size, 2 * norm.cdf(2.0) - 1)))
    assert acceptance_probability(box, spec) == pytest.approx(expected, rel=1e-10)
    absolute = spec.box(net, "0.05")
    np.testing.assert_allclose(absolute.upper[1][0] - w1, 0.05, rtol=1e-12)
    # raw posterior draws: N(μ_i, σ_i²) per entry
    draws = np.stack([spec.sample(net, rng)[1][0] for _ in range(4000)])
    np.testing.assert_allclose(draws.std(axis=0), sw, rtol=0.1)
    # the safe policy's draws stay in each entry's own interval
    policy = SafeBNNPolicy(box, spec, np.random.default_rng(1))
    (wk, _) = policy.sample(2000)[1]
    assert np.all(wk >= box.lower[1][0]) and np.all(wk <= box.upper[1][0])
    # each entry is N(μ_i, σ_i²) truncated to ±2σ_i: its spread is σ_i · std(truncnorm(−2, 2))
    np.testing.assert_allclose(wk.std(axis=0), sw * truncnorm(-2, 2).std(), rtol=0.1)


def test_wrong_shapes_or_negative_sigma_are_one_line() -> None:
    net = load_policy("lds")
    good = [(np.full(w.shape, 0.1), np.zeros(b.shape)) for w, b in net.layers]
    with pytest.raises(ConfigError, match="bayesian.sigma_file: layer 1: σ shapes"):
        BayesianSpec.per_weight(net, [good[0], (good[1][0].T, good[1][1])], (False, True))
    with pytest.raises(ConfigError, match="finite and ≥ 0"):
        BayesianSpec.per_weight(net, [good[0], (-good[1][0], good[1][1])], (False, True))
    with pytest.raises(ConfigError, match="1 σ layers for a 2-layer policy"):
        BayesianSpec.per_weight(net, good[:1], (False, True))


def test_sigma_file_certifies_and_verify_rederives_from_its_copy(tmp_path) -> None:
    """``[bayesian] sigma_file``: a real run with one σ per weight (X0 = 0.4 LDS at 0.5σ), the σ
    file recorded as an input and copied as evidence; ``safecert verify``'s checker re-derives the
    box from the copy, and a changed copy or a σ file of the wrong shape fails."""
    import shutil
    import tomllib

    from safecert.audit import Evidence
    from safecert.bnn.certify import certify_run
    from safecert.bnn.check import check
    from safecert.bnn.setup import load_config
    from safecert.config import dump_toml

    examples = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "bnn"
    shutil.copyfile(examples / "lds.npz", tmp_path / "lds.npz")
    net = load_policy("lds")
    rng = np.random.default_rng(0)
    arrays = {}
    for k, (w, b) in enumerate(net.layers):
        arrays[f"W{k}"] = rng.uniform(0.05, 0.15, w.shape)
        arrays[f"b{k}"] = np.zeros(b.shape)
    np.savez(tmp_path / "sigma.npz", **arrays)
    cfg = tomllib.loads((examples / "lds.toml").read_text())
    cfg["sets"]["initial"] = {"box": {"x": [-0.4, 0.4], "y": [-0.4, 0.4]}}
    cfg["bayesian"]["sigma_file"] = "sigma.npz"
    cfg["data"] |= {"bootstrap": False, "witness_rollouts": 500, "falsifier_samples": 2000}
    cfg["invariant"] = {"hidden": [8]}
    cfg["learner"] |= {"epochs": 100, "warm_epochs": 20, "batch_size": 1024, "learning_rate": 0.02}
    (tmp_path / "c.toml").write_text(dump_toml(cfg))
    run = certify_run(load_config(tmp_path / "c.toml"), tmp_path / "c.toml", tmp_path / "out")
    cert = run.certificate
    assert cert.verdict == "SAFE", cert.result.reason
    roles = {e.role for e in cert.inputs.files} | {e.role for e in cert.inputs.evidence}
    assert {"sigma", "sigma-copy"} <= roles
    assert cert.result.epsilon.sigma == 0.5
    # the box's widest half-width per layer: 0.5 · max σ of the Bayesian layer
    assert cert.result.epsilon.absolute == [0.0, pytest.approx(0.5 * arrays["W1"].max())]
    assert check(cert, Evidence(run.path)).ok
    np.savez(run.path.parent / "sigma.npz", **(arrays | {"W1": arrays["W1"] * 2}))
    report = check(cert, Evidence(run.path))
    assert not report.ok and any("sigma-copy" in c.name for c in report.failed)
    np.savez(tmp_path / "sigma.npz", W0=arrays["W0"], b0=arrays["b0"])
    with pytest.raises(ConfigError, match="bayesian.sigma_file"):
        certify_run(load_config(tmp_path / "c.toml"), tmp_path / "c.toml", tmp_path / "out2")
