"""``safecert certify`` and ``safecert rejudge``: black-box certification from the command line."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from safecert import procs
from safecert.cli.collector import importing
from safecert.cli.output import (
    EventsOpt,
    JunitOpt,
    SignKeyOpt,
    as_flags,
    command_events,
    console,
    emit_json,
    table,
    write_junit_for,
)
from safecert.errors import ConfigError, SafecertError

if TYPE_CHECKING:
    from safecert.blackbox.backends import Backend
    from safecert.blackbox.oracles import Oracle, OracleSpec
    from safecert.certificate import Certificate
    from safecert.events import Events


def _verdict_table(cert, command: str = "safecert certify") -> None:
    """The console summary: one row per cell, the stage-1 line, out-of-space actions, verdict.
    A sequential cell shows its decision's own counts and e-process bounds (episodes run after
    the decision are only counted in "stored")."""
    from safecert.blackbox.grid import cell_label

    res = cert.result
    if cert.kind == "sequential":
        columns = ["cell", "params", "N at decision", "failures", "e-process LB", "e-process UB"]
        columns += ["decision", "N stored"]
        rows = [
            [
                str(i),
                cell_label(c.params),
                c.episodes_used,
                c.failures_used,
                float(c.lower_bound),
                float(c.upper_bound),
                c.decision,
                c.episodes,
            ]
            for i, c in enumerate(res.cells)
        ]
    else:
        columns = ["cell", "params", "N", "task", "safety", "unified", "upper", "decision"]
        rows = [
            [
                str(i),
                cell_label(c.params),
                c.episodes,
                c.task_failures,
                c.safety_failures,
                c.failures,
                float(c.upper_bound),
                c.decision,
            ]
            for i, c in enumerate(res.cells)
        ]
    console.print(
        table(
            f"{command}: p* = {res.p_star}, confidence {res.confidence}, M = {res.family_size}",
            columns,
            rows,
        )
    )
    s1 = res.stage1
    counts = (
        f"{s1.failures_used}/{s1.episodes_used} at the decision, e-process upper"
        if cert.kind == "sequential"
        else f"{s1.failures}/{s1.episodes}, upper"
    )
    console.print(
        f"stage 1 (nominal): {s1.decision} ({counts} {s1.upper_bound:.5f}); "
        f"ODD: {len(res.odd)}/{len(res.cells)} cells"
    )
    for line in _failure_lines(res):
        console.print(line, markup=False, highlight=False)
    colour = {"PASS": "green", "FAIL": "red"}.get(cert.verdict, "yellow")
    console.print(f"[bold {colour}]{cert.verdict}[/]")


#: what each kind of failed episode means, for the console summary
_FAILURE_WORDS = {
    "action_out_of_space": "ended by an action outside the action space",
    "action_shape": "ended by an action of the wrong type or shape",
    "spec": "ended because spec.cost or spec.goal could not be evaluated",
    "oracle_call": "ended by a failed policy call (no valid reply in time)",
}
_FAILURE_FIX = {
    "action_out_of_space": "return actions inside the space (a Box action may instead be clipped: "
    'spec.action_out_of_space = "clip")',
    "action_shape": "return one action of the environment's action space per observation",
    "spec": "read only what the environment provides, or give info.get a default",
    "oracle_call": "see the example; replay one episode with --replay CELL:INDEX",
}


def _failure_lines(res) -> list[str]:
    """Why episodes failed, one line per kind: how many of all stored episodes, what the kind
    means, its first example, and — when every episode failed so — what to change."""
    total = sum(c.episodes for c in res.cells)
    if res.stage1.cell >= len(res.cells):  # a separate stage-1 cell, not in the grid
        total += res.stage1.episodes
    lines = []
    for kind, seen in sorted(res.oracle_failures.kinds.items(), key=lambda kv: -kv[1].count):
        rule = (
            f" (action_out_of_space = {res.action_out_of_space})"
            if kind == "action_out_of_space"
            else ""
        )
        every = f"; every episode failed so: {_FAILURE_FIX[kind]}" if seen.count >= total else ""
        lines.append(
            f"failed episodes: {seen.count}/{total} {_FAILURE_WORDS.get(kind, kind)}{rule}, "
            f"e.g. {seen.example}{every}"
        )
    return lines


def _parse_replay(text: str) -> tuple[int, int]:
    cell, sep, index = text.partition(":")
    numbers = (cell, index)
    if not sep or not all(n.isascii() and n.isdigit() and len(n) <= 18 for n in numbers):
        raise ConfigError(
            f"{text[:40]!r} is not CELL:INDEX (two whole numbers of at most 18 digits)",
            field="--replay",
            fix="e.g. --replay 3:17",
        )
    return int(cell), int(index)


def _backend(backend: str, address: str | None, workers: int | None):
    if backend == "local":
        if address is not None:
            raise ConfigError("--address needs --backend ray", field="--address")
        from safecert.blackbox.backends import LocalBackend

        return LocalBackend(workers)
    if backend == "ray":
        try:
            from safecert.blackbox.ray_backend import RayBackend
        except ModuleNotFoundError as exc:
            if exc.name != "safecert.blackbox.ray_backend":
                raise
            raise ConfigError("the Ray backend is not available yet", field="--backend") from None
        return RayBackend(address)
    raise ConfigError(f"unknown backend {backend!r}", field="--backend", fix="use local or ray")


def certify(
    config: Annotated[Path, typer.Argument(help="Run config (TOML).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("runs/certify"),
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Worker processes (default: the config's workers, else cores)."),
    ] = None,
    backend: Annotated[str, typer.Option(help="local or ray.")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (with --backend ray).")
    ] = None,
    sequential: Annotated[
        bool, typer.Option("--sequential", help="Anytime-valid sequential certification.")
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the run stored in --out.")
    ] = False,
    replay: Annotated[
        str | None, typer.Option(help="Rerun one episode CELL:INDEX and print it.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the certificate as JSON.")
    ] = False,
    sign_key: SignKeyOpt = None,
    junit: JunitOpt = None,
    events: EventsOpt = None,
) -> None:
    """Certify a black-box policy over its envelope grid; exit 1 when the verdict is not PASS.

    Writes DIR/certificate.json, DIR/episodes.sqlite, DIR/report.html, DIR/report.md and PNG ODD maps.

    Example: safecert certify examples/demo.toml --out runs/demo
    """
    if replay is not None:
        _replay(config, out, *_parse_replay(replay), json_out)
        return
    with procs.reaping(), ExitStack() as stack:
        with importing():  # the start-up, the policy worker's included (safecert.cli.collector)
            started = stack.enter_context(_policy_started_early(config, sequential))
            for module in ("safecert.blackbox.certify", "safecert.report"):  # used by _run
                importlib.import_module(module)
            from safecert.blackbox.progress import ProgressBar

            runner = _backend(backend, address, workers)
        with (
            command_events(events, ProgressBar, quiet=json_out) as progress,
            as_flags("out", "resume", "address"),
        ):
            cert = _run(config, out, runner, sequential, resume, progress, sign_key, started)
    write_junit_for(junit, f"safecert certify {config}", cert, "certify")
    if json_out:
        emit_json(cert.model_dump(mode="json"))
    else:
        _verdict_table(cert)
        console.print(f"certificate: {out / 'certificate.json'}\nreport: {out / 'report.html'}")
    if cert.verdict != "PASS":
        raise typer.Exit(1)


def _run(
    config: Path,
    out: Path,
    runner: Backend,
    sequential: bool,
    resume: bool,
    progress: Events,
    sign_key: Path | None,
    started: tuple[OracleSpec, Oracle] | None = None,
) -> Certificate:
    """One certification; vendors it starts are reaped by the caller's :func:`procs.reaping`.
    ``started``: :func:`_policy_started_early` (a fixed-N run takes it over)."""
    if sequential or _config_wants_sequential(config):
        try:
            from safecert.blackbox.sequential import certify_sequential
        except ModuleNotFoundError as exc:
            if exc.name != "safecert.blackbox.sequential":
                raise
            raise ConfigError(
                "sequential certification is not available yet", field="--sequential"
            ) from None
        cert: Certificate = certify_sequential(
            config, out, runner, resume, progress, sign_key=sign_key
        )
    else:
        from safecert.blackbox.certify import certify as run_certify

        cert = run_certify(
            config,
            out,
            backend=runner,
            resume=resume,
            progress=progress,
            sign_key=sign_key,
            started=started,
        )
    from safecert.report import write_run_report

    write_run_report(out / "certificate.json")
    return cert


@contextmanager
def _policy_started_early(
    config: Path, sequential: bool
) -> Iterator[tuple[OracleSpec, Oracle] | None]:
    """A fixed-N run's policy worker, started before the engine is imported, so that its
    start-up (an interpreter, NumPy, safecert's worker: about 0.25 s of CPU) runs beside the
    judge's own imports instead of before the first episode; closed when the block ends unless
    the run took it over (:func:`safecert.blackbox.certify.lent_oracle`).

    Only what the policy's oracle needs is read here, from the raw TOML (``policy``, ``trust``,
    ``batched``, ``timeout_s``, ``retries``); the run compares this oracle's spec with the one of
    its validated plan and starts its own when they differ. Anything unusual (a config that does
    not parse, a sequential run, a policy that runs in process or does not exist) starts nothing:
    the run reports it as it always has. The worker loads the policy's code on its first request,
    which comes after the plan has hashed that code (:mod:`safecert.blackbox.oracles.worker`)."""
    started = None if sequential else _start_policy_worker(config)
    try:
        yield started
    finally:
        if started is not None:
            started[1].close()


def _start_policy_worker(config: Path) -> tuple[OracleSpec, Oracle] | None:
    from safecert.blackbox.oracles import make_oracle, parse_oracle_spec
    from safecert.config import read_toml

    try:
        data = read_toml(config)
    except SafecertError:
        return None
    policy = data.get("policy")
    options = {k: data[k] for k in ("timeout_s", "retries", "batched", "trust") if k in data}
    numbers = [options.get("timeout_s", 1.0), options.get("retries", 1)]
    if (
        "sequential" in data
        or not isinstance(policy, str)
        or options.get("trust", "isolated") != "isolated"
        or not isinstance(options.get("batched", True), bool)
        or not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers)
    ):
        return None
    try:
        spec = parse_oracle_spec(policy, base_dir=Path(config).resolve().parent, **options)
    except SafecertError:
        return None
    if not spec.in_worker:
        return None
    oracle = make_oracle(spec)
    oracle.start()  # type: ignore[attr-defined]
    return spec, oracle


def _config_wants_sequential(config: Path) -> bool:
    from safecert.config import read_toml

    return "sequential" in read_toml(config)


def _replay(config: Path, out: Path, cell: int, index: int, json_out: bool) -> None:
    from safecert.blackbox.certify import replay as run_replay
    from safecert.blackbox.store import EpisodeStore

    with as_flags("replay"):
        record = run_replay(config, cell, index)
    stored = None
    if (out / "episodes.sqlite").is_file():
        with EpisodeStore(out / "episodes.sqlite", create=False) as store:
            stored = next((r for r in store.records(cell) if r.index == index), None)
    data = {
        "replayed": record.as_dict(),
        "stored": None if stored is None else stored.as_dict(),
        "matches_stored": None if stored is None else stored == record,
    }
    if json_out:
        emit_json(data)
        return
    console.print(
        table(
            f"replay of episode {cell}:{index} (seed {record.seed})",
            ["name", "replayed", "stored"],
            [
                [k, str(v), "" if stored is None else str(getattr(stored, k))]
                for k, v in record.as_dict().items()
            ],
        )
    )
    if stored is not None:
        console.print(
            "[green]matches the stored episode[/]"
            if stored == record
            else "[red]DIFFERS from the stored episode[/]"
        )


def rejudge(
    run_dir: Annotated[Path, typer.Argument(help="Folder of a safecert certify run.")],
    budget: Annotated[float, typer.Option(help="Cost budget d.")],
    p_star: Annotated[float, typer.Option("--p-star", help="Failure-probability threshold p*.")],
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default DIR/rejudge_d…_p…).")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the certificate as JSON.")
    ] = False,
    sign_key: SignKeyOpt = None,
    junit: JunitOpt = None,
) -> None:
    """Re-judge stored episodes at another budget and p* (no new episodes); exit 1 on FAIL.

    Example: safecert rejudge runs/demo --budget 25 --p-star 0.1
    """
    from safecert.blackbox.rejudge import rejudge as run_rejudge
    from safecert.report import write_run_report

    with as_flags("budget", "p_star", "out"):
        cert, where = run_rejudge(run_dir, budget, p_star, out, sign_key=sign_key)
    write_run_report(where / "certificate.json")
    write_junit_for(junit, f"safecert rejudge {run_dir}", cert, "rejudge")
    if json_out:
        emit_json(cert.model_dump(mode="json"))
    else:
        _verdict_table(cert, "safecert rejudge (post hoc)")
        console.print(f"certificate: {where / 'certificate.json'}\nreport: {where / 'report.html'}")
    if cert.verdict != "PASS":
        raise typer.Exit(1)
