"""The Python front door: each engine as one function that returns its typed certificate.

Every function runs the engine, writes the certificate and its evidence into ``out`` and then the
report beside it (``report=False`` skips the report), exactly as the command line does; the
command line is a thin layer over these. Errors are :class:`safecert.errors.SafecertError`
subclasses whose one-line message names the parameter (``epsilon``, ``config.spec.p_star``), not a
command-line flag; a missing optional dependency is a :class:`safecert.extras.MissingExtraError`
naming the extra to install, raised before anything is written.

>>> from safecert import certify_blackbox, verify                     # doctest: +SKIP
>>> cert = certify_blackbox("examples/cartpole_sb3.toml", "runs/cartpole")  # doctest: +SKIP
>>> cert.verdict, verify("runs/cartpole/certificate.json").ok          # doctest: +SKIP
('PASS', True)

See ``docs/python-api.md`` for worked examples of all three engines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safecert.errors import ConfigError
from safecert.extras import require_extra

if TYPE_CHECKING:
    from safecert.blackbox.backends import Backend
    from safecert.blackbox.config import RunConfig
    from safecert.bnn.config import BnnConfig
    from safecert.certificate import (
        BlackboxCertificate,
        BnnCertificate,
        Certificate,
        SequentialCertificate,
        ShieldCertificate,
    )
    from safecert.shield.counts import CountTable
    from safecert.shield.plan import VisitPlan
    from safecert.verification import VerificationReport

__all__ = [
    "certify_blackbox",
    "certify_shield",
    "count_logs",
    "load_certificate",
    "plan_shield",
    "synthesize_shield",
    "verify",
    "verify_bnn",
]

#: the name of a config given as a dictionary or model, written into the run's folder
CONFIG_FILE = "config.toml"


def certify_blackbox(
    config: str | Path | Mapping[str, Any] | RunConfig,
    out: str | Path,
    *,
    base_dir: str | Path | None = None,
    workers: int | None = None,
    backend: Backend | None = None,
    resume: bool = False,
    progress: bool | None = None,
    sign_key: str | Path | None = None,
    report: bool = True,
) -> BlackboxCertificate | SequentialCertificate:
    """Certify an opaque policy (fixed-N, or sequential when the config has a ``[sequential]``
    table) and return the certificate written to ``out/certificate.json``.

    ``config``: a TOML file, or the same content as a dictionary or a
    :class:`safecert.blackbox.config.RunConfig` — written to ``out/config.toml`` first, so the
    certificate hashes and ``verify`` re-reads it like any config file. Relative paths in the config
    resolve from ``base_dir`` (default: the config file's folder; for a dictionary, the current
    folder). ``workers``/``backend``: where episodes run (default: the config's ``workers``, local
    processes). ``progress``: progress on stderr (default: when it is a terminal).

    Guarantee (docs/blackbox.md): with probability ≥ 1 − δ jointly over the family, every cell
    marked PASS has a failure probability ≤ p*, under the stated environment and envelope and
    independent episodes."""
    require_extra("blackbox")  # before anything is written
    from safecert.blackbox.backends import LocalBackend
    from safecert.blackbox.certify import certify as run_fixed
    from safecert.blackbox.config import RunConfig
    from safecert.blackbox.sequential import certify_sequential
    from safecert.certificate import BlackboxCertificate, SequentialCertificate

    out = Path(out)
    config_path, root = _config_file(config, out, base_dir, RunConfig)
    from safecert.blackbox.config import load_run_config

    run_config, _, _ = load_run_config(config_path)
    key = None if sign_key is None else Path(sign_key)
    runner = backend or LocalBackend(workers or run_config.workers)
    cert: BlackboxCertificate | SequentialCertificate
    if run_config.sequential is not None:
        made = certify_sequential(
            config_path, out, runner, resume, progress, sign_key=key, base_dir=root
        )
        assert isinstance(made, SequentialCertificate)
        cert = made
    else:
        cert = run_fixed(
            config_path,
            out,
            backend=runner,
            resume=resume,
            progress=progress,
            sign_key=key,
            base_dir=root,
        )
        assert isinstance(cert, BlackboxCertificate)
    _report(out / "certificate.json", report)
    return cert


def synthesize_shield(
    model: str | Path,
    logs: str | Path | None,
    *,
    epsilon: float,
    out: str | Path,
    method: str = "greedy",
    rho_min: float = 1e-3,
    sign_key: str | Path | None = None,
    anytime: bool = False,
    counts: Sequence[str | Path] = (),
    report: bool = True,
) -> ShieldCertificate:
    """Synthesize the least-restrictive shield whose certified bound V̄_T(s0) is ≤ ``epsilon``
    from a model (TOML) and ordinary logs (JSON Lines), and return its certificate.

    ``method``: ``greedy`` (the paper's Alg. 1), ``additive`` or ``robust_q``. Guarantee
    (docs/shield.md): with confidence 1 − δ, every controller the shield admits reaches an unsafe
    state within T calls with probability ≤ V̄_T(s0) ≤ ε, if the logs are Markov in the model's
    abstraction (``safecert shield diagnose`` tests that).

    ``counts``: count tables written by :func:`count_logs`, instead of or beside ``logs`` (then
    confidence sets are anytime, ``anytime=True``: counts keep no order for the committed rule)."""
    require_extra("shield")  # before anything is written
    from safecert.shield.certify import synthesize_shield as run

    made = run(
        Path(model),
        _optional_path(logs),
        Path(out),
        epsilon=epsilon,
        method=method,
        rho_min=rho_min,
        sign_key=_optional_path(sign_key),
        anytime=anytime,
        counts=[Path(c) for c in counts] or None,
    )
    _report(Path(out) / "certificate.json", report)
    return made.certificate


def certify_shield(
    model: str | Path,
    logs: str | Path | None,
    *,
    out: str | Path,
    shield: str | Path | None = None,
    epsilon: float | None = None,
    sign_key: str | Path | None = None,
    anytime: bool = False,
    counts: Sequence[str | Path] = (),
    report: bool = True,
) -> ShieldCertificate:
    """Certify a given shield (``shield.json`` or a shield certificate; default: the full shield)
    and return its certificate: verdict PASS/FAIL against ``epsilon``, BOUND without one. Same
    guarantee, ``anytime`` and ``counts`` as :func:`synthesize_shield`."""
    require_extra("shield")  # before anything is written
    from safecert.shield.certify import certify_shield as run

    made = run(
        Path(model),
        _optional_path(logs),
        Path(out),
        shield_path=_optional_path(shield),
        epsilon=epsilon,
        sign_key=_optional_path(sign_key),
        anytime=anytime,
        counts=[Path(c) for c in counts] or None,
    )
    _report(Path(out) / "certificate.json", report)
    return made.certificate


def plan_shield(
    model: str | Path,
    logs: str | Path | None,
    *,
    epsilon: float,
    shield: str | Path | None = None,
    anytime: bool = False,
    counts: Sequence[str | Path] = (),
) -> VisitPlan:
    """How many more logged visits each (state, action) row needs for the shield (default: the
    full shield) to certify V̄_T(s0) ≤ ``epsilon``, read from the logs as :func:`certify_shield`
    reads them; ``plan.bound_if_met`` is the bound certify would give on logs with the planned
    counts. Writes nothing."""
    require_extra("shield")
    from safecert.shield.plan import plan_shield as run

    return run(
        Path(model),
        _optional_path(logs),
        epsilon,
        shield_path=_optional_path(shield),
        anytime=anytime,
        counts=[Path(c) for c in counts] or None,
    )


def count_logs(model: str | Path, logs: Sequence[str | Path], out: str | Path) -> CountTable:
    """Count the transitions of ``logs`` (JSON Lines or Parquet, read out of core) for ``model``
    into a mergeable Parquet count table at ``out``; pass it to :func:`certify_shield` as
    ``counts``. Nothing is written when a file is refused."""
    require_extra("shield")
    from safecert.shield.counts import count_files

    return count_files(Path(model), [Path(p) for p in logs], Path(out))


def _optional_path(path: str | Path | None) -> Path | None:
    return None if path is None else Path(path)


def verify_bnn(
    config: str | Path | Mapping[str, Any] | BnnConfig | None,
    out: str | Path,
    *,
    benchmark: str | None = None,
    sign_key: str | Path | None = None,
    report: bool = True,
) -> BnnCertificate:
    """Prove infinite-horizon safety of a BNN policy (a TOML file, a dictionary or a
    :class:`safecert.bnn.config.BnnConfig`; or ``config=None, benchmark="lds"`` for a published
    system) and return the certificate: SAFE only on a proof of all three conditions for the
    certified ε (docs/bnn.md); paths in a dictionary resolve from the current folder."""
    require_extra("bnn")  # before anything is written
    from safecert.bnn.certify import certify_run
    from safecert.bnn.config import BnnConfig
    from safecert.bnn.setup import benchmark_config, check_config, load_config
    from safecert.config import parse_model

    if (config is None) == (benchmark is None):
        raise ConfigError(
            "give exactly one of config and benchmark", field="config", fix="e.g. benchmark='lds'"
        )
    config_path: Path | None = None
    if benchmark is not None:
        cfg = benchmark_config(benchmark)
    elif isinstance(config, BnnConfig):
        cfg = config
        check_config(cfg)
    elif isinstance(config, Mapping):
        cfg = parse_model(BnnConfig, dict(config))
        check_config(cfg)
    else:
        config_path = Path(str(config))
        cfg = load_config(config_path)
    run = certify_run(
        cfg, config_path, Path(out), sign_key=None if sign_key is None else Path(sign_key)
    )
    _report(run.path, report)
    return run.certificate


def verify(
    path: str | Path,
    *,
    logs: str | Path | None = None,
    data: str | Path | None = None,
    inputs: str | Path | None = None,
    pubkey: str | Path | None = None,
    resimulate: int = 0,
) -> VerificationReport:
    """Re-derive the certificate at ``path`` from its parameters and evidence, as
    ``safecert verify`` does, and return the report (``report.ok``, ``report.checks``).

    ``pubkey``: also require ``PATH.sig`` to be a valid Ed25519 signature by that key (checked
    first; a bad signature ends there). ``inputs``/``data``: where the input and evidence folders
    are now; ``logs``: a shield's logs; ``resimulate``: re-run that many stored black-box episodes.
    Every digest is checked before any input code runs; vendor code runs in child processes."""
    from safecert.audit import Evidence, verify_certificate
    from safecert.certificate import read_certificate, read_certificate_bytes
    from safecert.verification import VerificationReport

    path = Path(path)
    if not 0 <= resimulate <= 1_000_000:
        raise ConfigError(f"{resimulate} is out of range", field="resimulate", fix="0 … 1000000")
    raw = None
    signature = []
    if pubkey is not None:
        from safecert.signing import check_signature

        raw = read_certificate_bytes(path)
        signature = check_signature(path, Path(pubkey), raw)
        if not all(c.ok for c in signature):
            return VerificationReport("signature", signature)
    cert = read_certificate(path, raw)
    if resimulate and cert.kind not in ("blackbox", "sequential"):
        raise ConfigError(
            f"a {cert.kind} certificate has no episodes to re-run", field="resimulate"
        )
    report = verify_certificate(
        cert,
        Evidence(
            path,
            logs=None if logs is None else Path(logs),
            data_dir=None if data is None else Path(data),
            inputs_dir=None if inputs is None else Path(inputs),
            resimulate=resimulate,
        ),
    )
    report.checks.extend(signature)
    report.verdict = cert.verdict
    return report


def load_certificate(path: str | Path) -> Certificate:
    """Read and validate a certificate (any kind) into its typed model; one-line
    :class:`safecert.errors.DataError` for a missing field, an unknown key or a wrong type."""
    from safecert.certificate import read_certificate

    return read_certificate(Path(path))


def _config_file(
    config: str | Path | Mapping[str, Any] | Any,
    out: Path,
    base_dir: str | Path | None,
    model: type,
) -> tuple[Path, Path | None]:
    """(the config file to run, the folder its relative paths resolve from or None for its own)."""
    from pydantic import BaseModel

    if isinstance(config, str | Path):
        return Path(config), None if base_dir is None else Path(base_dir)
    if isinstance(config, BaseModel):
        data = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif isinstance(config, Mapping):
        from safecert.config import parse_model

        parse_model(model, dict(config))  # every mistake named before anything is written
        data = dict(config)
    else:
        raise ConfigError(
            f"is a {type(config).__name__}",
            field="config",
            fix="pass a TOML path, a dictionary or a RunConfig",
        )
    from safecert.config import dump_toml

    out.mkdir(parents=True, exist_ok=True)
    path = out / CONFIG_FILE
    text = dump_toml(data)
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise ConfigError(
            f"{path} holds another config",
            field="out",
            fix="choose a new out folder (a resumed run must be given the same config)",
        )
    path.write_text(text, encoding="utf-8")
    return path, Path(base_dir) if base_dir is not None else Path.cwd()


def _report(cert_path: Path, wanted: bool) -> None:
    if wanted:
        from safecert.report import write_run_report

        write_run_report(cert_path)
