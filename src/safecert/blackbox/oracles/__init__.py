"""Policy oracles: the only way safecert talks to a vendor's policy.

A policy is named by one string (docs/architecture.md, "Policy oracles"):

- ``python:module:attr`` — a callable ``act(observations) -> actions`` on batches; the module is
  importable from the config's folder. ``batched=False`` wraps a per-observation function.
  It runs in a policy worker, a child process (:mod:`.worker`), never in safecert's own.
- ``exec:program arg ...`` — a program started without a shell, speaking newline-delimited JSON on
  stdin/stdout; restarted after a crash (:mod:`.exec_oracle`).
- ``http://host:port/path`` / ``https://...`` — ``POST`` of a JSON batch, retries with backoff
  (:mod:`.http_oracle`).
- ``onnx:path/model.onnx`` — an onnxruntime session on float32 batches (:mod:`.onnx_oracle`),
  in a policy worker (onnxruntime parsing a vendor's model bytes is C++ we did not write).
- ``sb3:path/model.zip`` — a Stable-Baselines3 PPO/A2C/SAC/TD3/DQN model, algorithm read from the
  file, deterministic ``predict`` row by row (:mod:`.sb3_oracle`; the ``sb3`` extra), in a policy
  worker (unpickling the zip runs code).
- ``torchscript:path/model.pt`` — a TorchScript module, row by row (:mod:`.torchscript_oracle`),
  in a policy worker.

Model files (ONNX, SB3, TorchScript) are the policy's artifacts, hashed into the certificate.

Trust (``trust`` in the run config): ``"isolated"`` (the default) runs ``python:``, ``onnx:``,
``sb3:`` and ``torchscript:`` policies in a policy worker that speaks the ``exec:`` protocol;
``"in-process"`` — for users who own the policy's code and model files — loads them into the
rollout worker itself. ``exec:`` and HTTP policies are other processes already.

:func:`parse_oracle_spec` checks the string up front (one :class:`ConfigError` line, field
``policy``) and returns a frozen, picklable :class:`OracleSpec`; :func:`make_oracle` builds the
oracle in the process that uses it (worker processes, Ray tasks), so nothing unpicklable crosses a
process boundary.

Example::

    spec = parse_oracle_spec("onnx:vendors/cheetah_fast.onnx", base_dir=Path("examples"))
    oracle = make_oracle(spec)
    oracle.probe()
    actions = oracle.act(observations)      # (B, obs_dim) -> (B, act_dim)
    oracle.close()
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Literal, cast

from safecert.blackbox.oracles.base import (
    Calls,
    Oracle,
    OracleFailure,
    check_actions,
    decode_reply,
    each_call,
    encode_request,
)
from safecert.errors import ConfigError
from safecert.extras import POLICY_SCHEMES, require_extra
from safecert.usercode import INTERPRETERS, command_program, split_command

__all__ = [
    "Calls",
    "Oracle",
    "OracleFailure",
    "OracleSpec",
    "check_actions",
    "decode_reply",
    "encode_request",
    "expand_env",
    "lockstep_calls",
    "make_oracle",
    "parse_oracle_spec",
]

OracleKind = Literal["python", "exec", "http", "onnx", "sb3", "torchscript"]
Trust = Literal["isolated", "in-process"]
#: kinds whose loading runs code we did not write (the vendor's module, an unpickled zip, a
#: TorchScript or ONNX parser fed the vendor's bytes): a policy worker runs them unless trusted
_WORKER_KINDS = ("python", "onnx", "sb3", "torchscript")
#: schemes whose target is one model file: scheme → what the file is
_MODEL_FILES = {
    "onnx": "ONNX model",
    "sb3": "Stable-Baselines3 model",
    "torchscript": "TorchScript module",
}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: an HTTP header name: a token of RFC 9110 (section 5.6.2)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(frozen=True)
class OracleSpec:
    """Everything needed to build an oracle in another process (frozen, picklable).

    ``target`` is ``module:attr`` (python), the URL (http) or the absolute model path (onnx);
    ``argv`` is the resolved command line (exec), or the policy worker's (python, onnx, sb3,
    torchscript with ``trust = "isolated"``; empty when trusted in-process). ``headers`` keep their ``${VAR}`` references
    unexpanded (secrets are not copied into certificates); they are expanded when the oracle is
    built. ``artifacts`` are the files that identify the policy (model, program, module source), for
    hashing into the certificate's ``policy_sha256``.
    """

    kind: OracleKind
    policy: str
    target: str
    base_dir: str
    argv: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0
    retries: int = 3
    batched: bool = True
    artifacts: tuple[str, ...] = ()
    trust: Trust = "isolated"

    @property
    def in_worker(self) -> bool:
        """True when a policy worker (a child process) runs this policy's code."""
        return self.kind in _WORKER_KINDS and self.trust == "isolated"


def expand_env(value: str, *, field: str) -> str:
    """Replace ``${VAR}`` by the environment variable; a missing one is a ConfigError naming it."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigError(
                f"environment variable {name} is not set", field=field, fix=f"export {name}=..."
            )
        return os.environ[name]

    return _ENV_REF.sub(sub, value)


def parse_oracle_spec(
    policy: str,
    *,
    base_dir: Path,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
    retries: int = 3,
    batched: bool = True,
    trust: Trust = "isolated",
) -> OracleSpec:
    """Check a policy string and resolve its paths against ``base_dir`` (the config's folder).

    No code of the policy runs here: a ``python:`` module is located on disk, not imported (its
    attribute is checked by the policy's health check, in its worker). Raises :class:`ConfigError` (field ``policy``) for an unknown scheme, a missing file or module,
    and (fields ``timeout_s`` / ``retries`` / ``headers.NAME``) for invalid options.
    """
    base = Path(base_dir).resolve()
    if not isinstance(policy, str) or not policy.strip():
        raise ConfigError("is empty", field="policy", fix='e.g. policy = "onnx:model.onnx"')
    if not timeout_s > 0:
        raise ConfigError(f"must be > 0 (got {timeout_s})", field="timeout_s")
    if retries < 0:
        raise ConfigError(f"must be >= 0 (got {retries})", field="retries")
    header_items = tuple((str(k), str(v)) for k, v in (headers or {}).items())
    for name, value in header_items:
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigError(
                f"{name!r} is not an HTTP header name",
                field="headers",
                fix="use letters, digits and -, e.g. Authorization or X-Api-Key",
            )
        if any(c in expand_env(value, field=f"headers.{name}") for c in "\r\n\0"):
            raise ConfigError(
                "holds a line break or NUL, which would end the header early",
                field=f"headers.{name}",
                fix="give the value on one line",
            )
    scheme, _, rest = policy.partition(":")
    template = OracleSpec(
        kind="python",
        policy=policy,
        target="",
        base_dir=str(base),
        timeout_s=float(timeout_s),
        retries=int(retries),
        trust=trust,
    )
    if scheme == "python":
        module, attr, artifact = _check_python_target(rest, base)
        return _with_worker(
            replace(template, target=f"{module}:{attr}", batched=batched, artifacts=artifact)
        )
    if scheme == "exec":
        argv, artifacts = _resolve_command(rest, base)
        return replace(template, kind="exec", target=rest, argv=argv, artifacts=artifacts)
    if scheme in ("http", "https"):
        _check_url(policy)
        return replace(template, kind="http", target=policy, headers=header_items)
    if scheme in _MODEL_FILES:
        require_extra(POLICY_SCHEMES[scheme])
        path = _existing_file(rest, base, what=_MODEL_FILES[scheme])
        if scheme == "sb3":
            from safecert.blackbox.oracles.sb3_oracle import sb3_algorithm

            sb3_algorithm(path)  # a zip of another kind is one error now, not in a worker
        return _with_worker(
            replace(
                template, kind=cast(OracleKind, scheme), target=str(path), artifacts=(str(path),)
            )
        )
    raise ConfigError(
        f"unknown policy scheme {scheme!r} in {policy!r}",
        field="policy",
        fix="use python:module:attr, exec:program, http(s)://host/path, onnx:model.onnx, "
        "sb3:model.zip or torchscript:model.pt",
    )


def _with_worker(spec: OracleSpec) -> OracleSpec:
    """``spec`` with its policy worker's command line when its code runs in one."""
    if not spec.in_worker:
        return spec
    from safecert.isolation import worker_command

    argv = worker_command(
        "safecert.blackbox.oracles.worker",
        spec.kind,
        spec.target,
        spec.base_dir,
        "1" if spec.batched else "0",
        "gated",  # the policy loads on the first request: after the run has hashed it
    )
    return replace(spec, argv=argv)


def make_oracle(spec: OracleSpec) -> Oracle:
    """Build the oracle described by ``spec`` (heavy libraries are imported here, lazily).

    ``python:``, ``onnx:``, ``sb3:`` and ``torchscript:`` policies get a policy worker (a
    supervised child speaking the ``exec:`` protocol) unless ``spec.trust`` is ``"in-process"``."""
    if spec.in_worker:
        from safecert.blackbox.oracles.exec_oracle import ExecOracle

        return ExecOracle(spec, what="policy worker", label=f"policy {spec.policy!r}")
    if spec.kind == "python":
        from safecert.blackbox.oracles.python_oracle import PythonOracle

        return PythonOracle(spec)
    if spec.kind == "exec":
        from safecert.blackbox.oracles.exec_oracle import ExecOracle

        return ExecOracle(spec)
    if spec.kind == "http":
        from safecert.blackbox.oracles.http_oracle import HttpOracle

        return HttpOracle(spec)
    if spec.kind == "onnx":
        from safecert.blackbox.oracles.onnx_oracle import OnnxOracle

        return OnnxOracle(spec)
    if spec.kind == "sb3":
        from safecert.blackbox.oracles.sb3_oracle import Sb3Oracle

        return Sb3Oracle(spec)
    if spec.kind == "torchscript":
        from safecert.blackbox.oracles.torchscript_oracle import TorchScriptOracle

        return TorchScriptOracle(spec)
    raise ConfigError(f"unknown oracle kind {spec.kind!r}", field="policy")


def lockstep_calls(oracle: Oracle) -> Calls:
    """How a lockstep step reaches ``oracle``: every call of the step in one round trip to a
    policy worker (:meth:`.exec_oracle.ExecOracle.act_calls`), else one ``act`` per call."""
    act_calls = getattr(oracle, "act_calls", None)
    if act_calls is not None:
        return act_calls
    return partial(each_call, oracle.act)


def _check_python_target(rest: str, base: Path) -> tuple[str, str, tuple[str, ...]]:
    """``module:attr`` → (module, attr, (the module's file,)), found without importing it."""
    from safecert.isolation import locate_module

    module_name, sep, attr = rest.partition(":")
    names_ok = all(p.isidentifier() for p in module_name.split(".")) and all(
        p.isidentifier() for p in attr.split(".")
    )
    if not sep or not module_name or not attr or not names_ok:
        raise ConfigError(f"{rest!r} is not module:attr", field="policy", fix="e.g. mypkg.pol:act")
    source = locate_module(module_name, base)
    if source is None:
        raise ConfigError(
            f"cannot import module {module_name!r} (no such module)",
            field="policy",
            fix=f"make it importable from {base}",
        )
    return module_name, attr, (str(source),)


def _existing_file(name: str, base: Path, *, what: str) -> Path:
    if not name:
        raise ConfigError(f"names no {what}", field="policy")
    path = Path(name).expanduser()
    path = path if path.is_absolute() else base / path
    if not path.is_file():
        state = (
            "is a folder"
            if path.is_dir()
            else "is not a regular file (a device, a FIFO or a socket)"
            if path.exists()
            else "does not exist"
        )
        raise ConfigError(
            f"{what} {path} {state}",
            field="policy",
            fix=f"name the {what}'s file (relative paths resolve from the config's folder)",
        )
    return path.resolve()


def _resolve_command(command: str, base: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``shlex.split`` the command; resolve the program and, for interpreters, the script.

    Artifacts (hashed into the certificate): the program when given by path, the script of an
    interpreter, and every argument (or ``--opt=VALUE`` value) that names an existing file — so
    ``exec:node vendor.js`` and ``exec:awk -f vendor.awk`` identify the vendor's code.

    ``python``/``python3`` mean the running interpreter (``sys.executable``), so a vendor script
    sees the same environment as safecert; give an absolute path to choose another interpreter.
    """
    argv = split_command(command, field="policy", example="exec:python3 vendor.py")
    program = command_program(command)
    artifacts: list[str] = []
    if program in INTERPRETERS:
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        if script is not None and not {"-m", "-c"} & set(argv[1 : argv.index(script)]):
            path = _existing_file(script, base, what="vendor script")
            argv[argv.index(script)] = str(path)
            artifacts.append(str(path))
    elif "/" in program or program.startswith("~"):
        path = _existing_file(program, base, what="vendor program")
        argv[0] = str(path)
        artifacts.append(str(path))
    else:
        found = shutil.which(program)
        if found is None:
            raise ConfigError(f"program {program!r} is not on PATH", field="policy")
        argv[0] = found
    for arg in argv[1:]:
        value = arg.partition("=")[2] if arg.startswith("-") else arg
        named = _named_file(value, base)
        if named is None and _looks_like_file(value):
            raise ConfigError(
                f"the argument {value!r} of {command!r} names a file that does not exist "
                f"({base / Path(value).expanduser()})",
                field="policy",
                fix="check the path (relative paths resolve from the config's folder)",
            )
        if named is not None and str(named) not in artifacts:
            artifacts.append(str(named))
    return tuple(argv), tuple(artifacts)


#: suffixes of code and model files: an ``exec:`` argument ending in one names a file that must
#: exist (a vendor that cannot find its script or weights fails only at its health check, and
#: says why in a stack trace of its own)
_FILE_SUFFIXES = frozenset(
    ".py .js .mjs .cjs .ts .rb .pl .php .lua .r .jl .sh .bash .awk .jar .wasm .exe .onnx .pt "
    ".pth .pb .h5 .keras .ckpt .safetensors .zip .pkl .pickle .joblib .npz .npy .bin .so".split()
)


def _looks_like_file(arg: str) -> bool:
    """An argument that names a file: a path (``./``, ``../``, ``~/``) or a code or model file
    (:data:`_FILE_SUFFIXES`); never a URL, a phrase or a ``scheme:value`` spec the vendor reads
    itself (``onnx:model.onnx`` may resolve from the vendor's own folder)."""
    if not arg or any(c.isspace() for c in arg) or "://" in arg:
        return False
    if ":" in arg.split("/", 1)[0]:
        return False
    return arg.startswith(("./", "../", "~/")) or Path(arg).suffix.lower() in _FILE_SUFFIXES


def _named_file(arg: str, base: Path) -> Path | None:
    """The existing file an argument names (relative to the config's folder), if any."""
    if not arg:
        return None
    path = Path(arg).expanduser()
    path = path if path.is_absolute() else base / path
    try:
        return path.resolve() if path.is_file() else None
    except OSError:
        return None


def _check_url(url: str) -> None:
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ConfigError(f"invalid URL {url!r} ({exc})", field="policy") from None
    if not parsed.host:
        raise ConfigError(f"URL {url!r} has no host", field="policy", fix="http://host:port/path")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise ConfigError(
            f"URL {url!r} has port {parsed.port}, outside 1-65535",
            field="policy",
            fix="give the port the vendor's server listens on, e.g. http://127.0.0.1:8000/act",
        )
