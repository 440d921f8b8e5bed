"""``sb3:`` and ``torchscript:`` policies with no user code: a PPO trained here, its greedy network
exported to TorchScript, both certified; the two runtimes of one network must agree exactly."""

from __future__ import annotations

import hashlib
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

sb3 = pytest.importorskip("stable_baselines3", reason="the sb3 extra is not installed")
torch = pytest.importorskip("torch")

from safecert.blackbox.oracles import parse_oracle_spec  # noqa: E402
from safecert.blackbox.oracles.sb3_oracle import Sb3Oracle, sb3_algorithm  # noqa: E402
from safecert.errors import ConfigError, OracleError  # noqa: E402
from safecert.extras import MissingExtraError  # noqa: E402
from tests.conftest import REPO  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """A PPO trained briefly on CartPole (seeded, CPU) and its greedy network as TorchScript."""
    folder = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    model = sb3.PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=256,
        batch_size=128,
        n_epochs=2,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [32, 32]},
    )
    model.learn(512)
    model.save(folder / "ppo.zip")

    class Greedy(torch.nn.Module):
        def __init__(self, policy) -> None:
            super().__init__()
            self.body, self.head = policy.mlp_extractor.policy_net, policy.action_net

        def forward(self, obs):
            return torch.argmax(self.head(self.body(obs)), dim=1)

    with warnings.catch_warnings():  # TorchScript is deprecated in torch ≥ 2.10, still loads
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(Greedy(model.policy).eval(), torch.zeros(2, 4))
        torch.jit.save(traced, str(folder / "greedy.pt"))
    return folder


CONFIG = """
policy = "{policy}"
env = "CartPole-v1"
episodes = 6
seed = 2
max_steps = 80
[spec]
cost = "abs(obs[0]) > 0.3"
budget = 4.0
p_star = 0.5
[envelope]
obs_noise = {{ levels = [0.0, 0.05] }}
obs_ranges = [[-4.8, 4.8], [-3.0, 3.0], [-0.42, 0.42], [-3.0, 3.0]]
"""


def _certify(cli_here, folder: Path, policy: str, name: str):
    config = folder / f"{name}.toml"
    config.write_text(textwrap.dedent(CONFIG.format(policy=policy)))
    return cli_here("certify", config, "--out", folder / name, "--workers", "1", "--json")


def test_sb3_and_torchscript_policies_certify_with_no_user_code(cli_here, models):
    sb = _certify(cli_here, models, "sb3:ppo.zip", "sb3run")
    assert sb.code in (0, 1), sb.stderr
    ts = _certify(cli_here, models, "torchscript:greedy.pt", "tsrun")
    assert ts.code in (0, 1), ts.stderr
    a, b = sb.json(), ts.json()
    assert a["result"] == b["result"]  # one network, two runtimes: the same episodes
    assert sum(c["episodes"] for c in a["result"]["cells"]) == 12
    for cert, name in ((a, "ppo.zip"), (b, "greedy.pt")):
        [policy] = [f for f in cert["inputs"]["files"] if f["role"] == "policy"]
        assert policy["path"] == name
        assert policy["sha256"] == hashlib.sha256((models / name).read_bytes()).hexdigest()
    verify = cli_here("verify", models / "sb3run/certificate.json", "--resimulate", "2")
    assert verify.code == 0, verify.stdout


@pytest.mark.parametrize(
    ("algo", "env"),
    [
        ("PPO", "CartPole-v1"),
        ("A2C", "CartPole-v1"),
        ("DQN", "CartPole-v1"),
        ("SAC", "Pendulum-v1"),
        ("TD3", "Pendulum-v1"),
    ],
)
def test_algorithm_is_read_from_the_file_and_actions_are_deterministic(tmp_path, algo, env):
    model = getattr(sb3, algo)("MlpPolicy", env, seed=1, device="cpu")
    path = tmp_path / f"{algo}.zip"
    model.save(path)
    assert sb3_algorithm(path) == algo
    spec = parse_oracle_spec(f"sb3:{path.name}", base_dir=tmp_path)
    assert spec.kind == "sb3" and spec.artifacts == (str(path.resolve()),)
    oracle = Sb3Oracle(spec)
    obs = np.random.default_rng(0).uniform(-1, 1, (5, *model.observation_space.shape))
    try:
        got = oracle.act(obs)
        again = oracle.act(obs)
    finally:
        oracle.close()
    rows = obs.astype(np.float32)  # row by row: a batch of 5 may round differently (SAC, TD3)
    expected = np.concatenate(
        [model.predict(rows[i : i + 1], deterministic=True)[0] for i in range(len(rows))]
    )
    assert np.array_equal(got, np.asarray(expected).reshape(got.shape)) and np.array_equal(
        got, again
    )
    assert got.shape[0] == 5


def test_files_that_are_not_models_are_one_line(tmp_path, cli_here):
    (tmp_path / "notzip.zip").write_text("hello")
    with pytest.raises(ConfigError, match="is not a Stable-Baselines3 model zip"):
        parse_oracle_spec("sb3:notzip.zip", base_dir=tmp_path)
    state_dict = REPO / "examples/vendors/cheetah_fast.pt"  # torch.save of weights, not a module
    config = tmp_path / "run.toml"
    config.write_text(
        f'policy = "torchscript:{state_dict}"\nenv = "HalfCheetah-v5"\nepisodes = 1\n'
        '[spec]\ncost = "0"\n'
    )
    res = cli_here("certify", config, "--out", tmp_path / "o", "--workers", "1")
    assert res.code == 2 and "cannot load TorchScript module" in res.stderr
    assert "\n" not in res.stderr.strip()


def test_missing_extra_is_named(monkeypatch, models):
    oracle = Sb3Oracle(parse_oracle_spec("sb3:ppo.zip", base_dir=models))
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'safecert\[sb3\]'"):
        parse_oracle_spec("sb3:ppo.zip", base_dir=models)  # up front, before a run starts
    with pytest.raises(OracleError, match=r"pip install 'safecert\[sb3\]'"):
        oracle.probe()  # and in the policy worker


EXAMPLES = REPO / "examples"


@pytest.mark.parametrize(
    "name", ["cartpole_expressions.toml", "cartpole_sb3.toml", "cartpole_torchscript.toml"]
)
def test_bundled_examples_plan(name):
    from safecert.blackbox.plan import plan_run

    plan = plan_run(EXAMPLES / name)
    assert plan.config.envelope.obs_ranges is not None


@pytest.mark.slow  # 40–100 s on 2 cores (measured with --durations); runs in make test-all
def test_bundled_sb3_and_torchscript_vendors_agree(cli_here, tmp_path):
    results = []
    for name in ("cartpole_sb3.toml", "cartpole_torchscript.toml"):
        text = (EXAMPLES / name).read_text()
        text = (
            text.replace("episodes = 100", "episodes = 4")
            .replace('"sb3:vendors/', f'"sb3:{EXAMPLES}/vendors/')
            .replace('"torchscript:vendors/', f'"torchscript:{EXAMPLES}/vendors/')
        )
        config = tmp_path / name
        config.write_text(text)
        res = cli_here("certify", config, "--out", tmp_path / name[:-5], "--workers", "1", "--json")
        assert res.code in (0, 1), res.stderr
        results.append(res.json()["result"])
    assert results[0] == results[1]
