"""The certificate envelope: typed kinds, canonical bytes, strict parsing, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safecert.blackbox.certify import blackbox_result
from safecert.blackbox.config import RunConfig, certified_parameters
from safecert.blackbox.grid import Family
from safecert.blackbox.jobs import EpisodeRecord, episode_seed
from safecert.blackbox.sequential import sequential_result
from safecert.blackbox.store import EpisodeStore
from safecert.certificate import (
    Inputs,
    canonical_json,
    certificate_bytes,
    content_sha256,
    make_certificate,
    parse_certificate,
    read_certificate,
    write_certificate,
)
from safecert.document import durable_write, sha256_file
from safecert.errors import DataError
from tests import certprops

CONFIG = {
    "policy": "python:p:f",
    "env": "CartPole-v1",
    "episodes": 30,
    "seed": 4,
    "max_steps": 50,
    "spec": {"budget": 1.0, "p_star": 0.2},
    "envelope": {"act_noise": {"levels": [0.0, 0.1]}, "delay": {"levels": [1, 2]}},
}


def _records(config: RunConfig, family: Family) -> list[EpisodeRecord]:
    rng = np.random.default_rng(1)
    return [
        EpisodeRecord(
            c,
            i,
            episode_seed(config.seed, c, i),
            float(rng.normal(40, 5)),
            float(rng.exponential(0.5)),
            bool(rng.random() > 0.05 * c),
            False,
            True,
            50,
            None,
        )
        for c in range(family.size)
        for i in range(config.episodes)
    ]


def _inputs() -> Inputs:
    return Inputs(root="/nowhere", files=[], evidence=[])


def blackbox_cert():
    config = RunConfig.model_validate(CONFIG)
    family = Family.of(config.envelope, config.spec.confidence)
    verdict, result = blackbox_result(
        config,
        family,
        _records(config, family),
        cost_range=(0.0, 50.0),
        return_range=None,
        obs_ranges=None,
        rejudged=None,
    )
    return make_certificate(
        "blackbox",
        verdict,
        parameters=certified_parameters(config),
        inputs=_inputs(),
        seed=config.seed,
        result=result,
    )


def sequential_cert(tmp_path):
    config = RunConfig.model_validate({**CONFIG, "sequential": {"method": "betting"}})
    family = Family.of(config.envelope, config.spec.confidence)
    with EpisodeStore(tmp_path / "episodes.sqlite") as store:
        store.add(_records(config, family))
        verdict, result = sequential_result(
            config, family, store, cost_range=(0.0, 50.0), return_range=None
        )
    return make_certificate(
        "sequential",
        verdict,
        parameters=certified_parameters(config),
        inputs=_inputs(),
        seed=config.seed,
        result=result,
    )


def test_roundtrip_and_canonical(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    path = write_certificate(blackbox_cert(), tmp_path / "c.json")
    again = write_certificate(blackbox_cert(), tmp_path / "d.json")
    assert path.read_bytes() == again.read_bytes()
    cert = read_certificate(path)
    assert cert.created_utc == "1970-01-01T00:00:00Z"
    assert certificate_bytes(cert) == path.read_bytes()
    assert list(json.loads(path.read_text())) == sorted(json.loads(path.read_text()))
    assert content_sha256(cert) == content_sha256(blackbox_cert())
    assert (path.stat().st_mode & 0o777) == 0o644  # meant to be shared


def test_kinds_and_verdict_vocabularies(tmp_path):
    assert blackbox_cert().kind == "blackbox"
    seq = sequential_cert(tmp_path)
    assert seq.kind == "sequential" and seq.result.sequential.method == "betting"
    data = json.loads(certificate_bytes(blackbox_cert()))
    for verdict in ("SAFE", "BOUND", "INCONCLUSIVE", "MAYBE"):
        with pytest.raises(DataError, match="certificate.verdict"):
            parse_certificate({**data, "verdict": verdict}, source="test")


def test_sha256_file(tmp_path):
    import hashlib

    p = tmp_path / "f"
    p.write_bytes(b"x" * 3_000_000)
    assert sha256_file(p) == hashlib.sha256(b"x" * 3_000_000).hexdigest()


def test_nan_rejected():
    with pytest.raises(DataError):
        canonical_json({"a": float("nan")})


def test_durable_write_replaces_atomically(tmp_path):
    target = tmp_path / "f.json"
    durable_write(target, "one")
    durable_write(target, b"two")
    assert target.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temporary left behind


@pytest.mark.parametrize("make", ["blackbox", "sequential"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_valid_certificates_round_trip_byte_identically(tmp_path, make, seed):
    base = blackbox_cert() if make == "blackbox" else sequential_cert(tmp_path)
    certprops.assert_round_trips(
        certprops.perturb_numbers(json.loads(certificate_bytes(base)), seed)
    )


@pytest.mark.parametrize("make", ["blackbox", "sequential"])
def test_every_field_deletion_and_type_change_is_one_data_error(tmp_path, make):
    base = blackbox_cert() if make == "blackbox" else sequential_cert(tmp_path)
    certprops.assert_every_mutation_is_one_line(json.loads(certificate_bytes(base)), 100)


def test_unreadable_inputs_are_one_line(tmp_path):
    p = tmp_path / "c.json"
    for content in (b"\xff\xfe", b"[" * 200 + b"]" * 200, b"[1, 2]", b"{"):
        p.write_bytes(content)
        with pytest.raises(DataError) as err:
            read_certificate(p)
        assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="does not exist"):
        read_certificate(tmp_path / "missing.json")


def _union_error(data: object) -> str:
    """The first error of the four kinds' discriminated union (what ``parse_certificate`` used to
    validate against, every kind's models built), as :func:`parse_certificate` words it."""
    from typing import Annotated

    from pydantic import Field, TypeAdapter, ValidationError

    from safecert.certificate import (
        BlackboxCertificate,
        BnnCertificate,
        SequentialCertificate,
        ShieldCertificate,
    )
    from safecert.verification import short_repr

    union = Annotated[
        BlackboxCertificate | SequentialCertificate | ShieldCertificate | BnnCertificate,
        Field(discriminator="kind"),
    ]
    try:
        TypeAdapter(union).validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        assert not err["loc"], err  # a tag error: the kind itself
        return f"certificate: {err['msg']} (got {short_repr(err.get('input'))})"
    raise AssertionError("the union accepted it")


@pytest.mark.parametrize(
    "kind", [None, 3, 1.5, True, "x", "Blackbox", "", ["blackbox"], {"kind": "bnn"}, "missing"]
)
def test_a_missing_or_unknown_kind_is_worded_as_the_union_words_it(kind):
    """A certificate's model is chosen by its kind (its module imported then); a kind no model
    has is the same one line the discriminated union of all kinds gave."""
    data = json.loads(certificate_bytes(blackbox_cert()))
    if kind == "missing":
        del data["kind"]
    else:
        data["kind"] = kind
    with pytest.raises(DataError) as err:
        parse_certificate(data, source="test")
    assert str(err.value) == _union_error(data) + "; regenerate the certificate with safecert"


def test_a_field_error_names_the_same_path_as_the_union_did():
    data = json.loads(certificate_bytes(blackbox_cert()))
    data["result"]["p_star"] = "0.05"
    with pytest.raises(DataError, match=r"^certificate\.result\.p_star: "):
        parse_certificate(data, source="test")
    data = {**json.loads(certificate_bytes(blackbox_cert())), "extra": 1}
    with pytest.raises(DataError, match=r"^certificate\.extra: is not a certificate field"):
        parse_certificate(data, source="test")


def test_reading_a_blackbox_certificate_builds_no_shield_or_bnn_model(tmp_path):
    """Each kind's models are imported when that kind is read; naming a class imports its kind."""
    import subprocess
    import sys

    path = write_certificate(blackbox_cert(), tmp_path / "c.json")
    probe = (
        "import sys\n"
        "from safecert.certificate import read_certificate\n"
        f"cert = read_certificate({str(path)!r})\n"
        "engines = ('safecert.shield', 'safecert.bnn', 'safecert.certificate.')\n"
        "print(cert.kind, sorted(m for m in sys.modules if m.startswith(engines)))\n"
        "from safecert.certificate import ShieldCertificate\n"
        "print(ShieldCertificate.__module__, 'safecert.bnn.result' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == [
        "blackbox ['safecert.certificate.blackbox']",
        "safecert.certificate.shield False",
    ]
