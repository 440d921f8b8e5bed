"""RayBackend against a real local Ray instance: same records and certificates as local."""

from __future__ import annotations

import pytest

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.certify import certify, make_context, open_store
from safecert.blackbox.plan import plan_run
from safecert.blackbox.sequential import certify_sequential
from safecert.certificate import content_sha256
from tests.blackbox.pipeline_helpers import cartpole_run
from tests.blackbox.streaming_helpers import Watched, check_overshoot, coin_run

pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_backend():
    from safecert.blackbox.ray_backend import RayBackend

    backend = RayBackend(num_cpus=2)
    yield backend
    backend.close()
    import ray

    assert not ray.is_initialized()


def test_unreachable_address_is_one_config_error():
    import socket

    from safecert.blackbox.ray_backend import RayBackend
    from safecert.errors import ConfigError

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigError, match="^address: "):
        RayBackend(f"127.0.0.1:{port}")


def test_records_identical_to_local(ray_backend, tmp_path):
    config = cartpole_run(tmp_path, episodes=12, batch_size=3)
    plan = plan_run(config)
    with open_store(plan, tmp_path / "o", resume=False) as store:
        ctx = make_context(plan, store)
    jobs = plan.all_jobs()

    def key(r):
        return (r.cell, r.index)

    local = sorted(LocalBackend(1).run(jobs, ctx), key=key)
    remote = sorted(ray_backend.run(jobs, ctx), key=key)
    assert len(remote) == len(jobs) == 48
    assert remote == local
    again = sorted(ray_backend.run(jobs[:5], ctx), key=key)  # actors are reused across calls
    assert again == local[:5]


def test_sequential_overshoot_on_ray_is_at_most_the_episodes_in_flight(ray_backend, tmp_path):
    """Two actors, batch 3, slow episodes: at most 2 × 3 episodes of a cell start past its
    decision point, and the certificate equals the local one (decided in episode-index order)."""
    config = coin_run(tmp_path, batch_size=3, slow_p=0.1)
    watched = Watched(ray_backend)
    cert = certify_sequential(config, tmp_path / "ray", watched, False, False)
    check_overshoot(tmp_path / "ray", cert, watched.issued, 2 * 3)
    local = certify_sequential(config, tmp_path / "local", LocalBackend(1), False, False)
    assert content_sha256(cert) == content_sha256(local)


# full validation; Ray = local is also shown, faster, by test_records_identical_to_local
@pytest.mark.slow
def test_equal_certificates_fixed_and_sequential(ray_backend, tmp_path):
    config = cartpole_run(tmp_path, episodes=16)
    a = certify(config, tmp_path / "local", backend=LocalBackend(1), progress=False)
    b = certify(config, tmp_path / "ray", backend=ray_backend, progress=False)
    assert content_sha256(a) == content_sha256(b)
    seq_config = cartpole_run(tmp_path / "s", episodes=150)
    c = certify_sequential(seq_config, tmp_path / "s" / "local", LocalBackend(1), False, False)
    d = certify_sequential(seq_config, tmp_path / "s" / "ray", ray_backend, False, False)
    assert content_sha256(c) == content_sha256(d)
    assert c.result.sequential.episodes_used < 4 * 150
