"""RayBackend against a real local Ray instance: same records and certificates as local."""

from __future__ import annotations

import pytest

from safecert.blackbox.backends import LocalBackend
from safecert.blackbox.certify import certify, make_context, open_store
from safecert.blackbox.plan import plan_run
from safecert.blackbox.sequential import certify_sequential
from safecert.certificate import content_sha256
from tests.blackbox.pipeline_helpers import cartpole_run

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
