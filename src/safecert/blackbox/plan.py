"""The plan of a black-box run: the validated config, its family of cells and its inputs.

:func:`plan_run` reads and validates the config, the policy string and the environment, builds
every grid cell's wrapped environment once (an envelope the environment cannot take is one
ConfigError before any episode), finds the stage-1 (nominal) cell and records the digest of every
file the outcome depends on (:func:`input_digests`). Nothing here plays an episode: that is
:mod:`safecert.blackbox.certify`, which runs a :class:`RunPlan`; :mod:`safecert.blackbox.check`
re-derives the Hoeffding ranges and the episode bound from the same pure functions
(:func:`kpi_ranges`, :func:`episode_limit`).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from safecert.blackbox.config import RunConfig, load_run_config
from safecert.blackbox.grid import NOMINAL, Family
from safecert.blackbox.jobs import EpisodeJob, make_jobs
from safecert.blackbox.oracles import OracleSpec, parse_oracle_spec
from safecert.config import require_regular_file
from safecert.document import FileDigest, file_digest
from safecert.errors import ConfigError

if TYPE_CHECKING:
    import gymnasium as gym


@dataclass(frozen=True)
class RunPlan:
    """A validated run: config, where its paths resolve, its family and the inputs' digests.

    ``unused_env``: the base environment :func:`plan_run` built to read its spaces and time limit
    — never reset nor stepped, so as good as a new one — kept for :meth:`fresh_base_env` when
    the caller asked for it (``keep_env``, a run whose pre-run check takes it; an in-process
    environment only, an environment worker is closed at once). A MuJoCo model is
    milliseconds to build: the pre-run check takes this one instead of building a second."""

    config_path: Path
    config: RunConfig
    base_dir: Path
    oracle: OracleSpec
    family: Family
    cost_range: tuple[float, float] | None
    return_range: tuple[float, float] | None
    inputs: tuple[FileDigest, ...]
    reference: OracleSpec | None = None
    unused_env: list[gym.Env] = field(default_factory=list, compare=False, repr=False)

    def fresh_base_env(self) -> gym.Env:
        """A base environment that was never reset nor stepped: the plan's own the first time
        (see the class docstring), else a new one; the caller closes it."""
        if self.unused_env:
            return self.unused_env.pop()
        from safecert.blackbox.rollout import make_base_env

        return make_base_env(self.config, self.base_dir)

    @property
    def cells(self) -> tuple[dict[str, Any], ...]:
        return self.family.cells

    @property
    def grid_size(self) -> int:
        return self.family.grid_size

    @property
    def stage1_cell(self) -> int:
        return self.family.stage1

    @property
    def has_workers(self) -> bool:
        """:func:`has_workers` of this run."""
        return has_workers(self.config, self.oracle)

    @property
    def needs_obs_ranges(self) -> bool:
        return any(c.get("obs_noise", 0.0) > 0 for c in self.cells)

    def all_jobs(self, done: AbstractSet[tuple[int, int]] = frozenset()) -> list[EpisodeJob]:
        """Every job not in ``done``: stage 1 first, then the grid in order."""
        order = [self.stage1_cell] + [i for i in range(len(self.cells)) if i != self.stage1_cell]
        jobs: list[EpisodeJob] = []
        for cell in order:
            jobs.extend(make_jobs(self.config.seed, cell, self.config.episodes, done))
        return jobs


def has_workers(config: RunConfig, oracle: OracleSpec) -> bool:
    """True when a rollout of this run meets worker processes of safecert's own: a policy worker
    (``oracle.in_worker``) or an environment worker (an untrusted ``python:`` environment). Such
    a rollout takes strict turns with them, so it runs on one CPU with them
    (:func:`safecert.isolation.colocated`); one with nothing to meet is never pinned."""
    from safecert.envs import in_worker

    return oracle.in_worker or in_worker(config.env, trusted=config.trust == "in-process")


def oracle_spec(config: RunConfig, base_dir: Path) -> OracleSpec:
    """The policy's oracle with the config's options (headers, timeout, retries, batching)."""
    return parse_oracle_spec(
        config.policy,
        base_dir=base_dir,
        headers=config.headers,
        timeout_s=config.timeout_s,
        retries=config.retries,
        batched=config.batched,
        trust=config.trust,
    )


def plan_run(config_path: Path, base_dir: Path | None = None, *, keep_env: bool = False) -> RunPlan:
    """Validate the run at ``config_path``; relative paths in it resolve from ``base_dir``
    (default: the config's own folder), which becomes the certificate's ``inputs.root``.
    ``keep_env``: the caller runs the pre-run check (:func:`safecert.blackbox.certify.make_context`),
    which takes the environment built here (:attr:`RunPlan.unused_env`); without it the
    environment is closed before this returns, as one in a worker always is."""
    config, own_dir, _ = load_run_config(config_path)
    base_dir = own_dir if base_dir is None else Path(base_dir).resolve()
    oracle = oracle_spec(config, base_dir)
    from safecert.blackbox.rollout import make_base_env
    from safecert.envs import in_worker

    env = make_base_env(config, base_dir)
    try:
        plan = _plan(config_path, config, base_dir, oracle, env)
    except BaseException:
        env.close()
        raise
    if not keep_env or in_worker(config.env, trusted=config.trust == "in-process"):
        env.close()  # not needed, or a worker process: not kept idle
    else:
        plan.unused_env.append(env)
    return plan


def _plan(
    config_path: Path, config: RunConfig, base_dir: Path, oracle: OracleSpec, env: gym.Env
) -> RunPlan:
    limit = config.max_steps or (env.spec.max_episode_steps if env.spec else None)
    obs_space = env.observation_space
    family = Family.of(config.envelope, config.spec.confidence)
    _check_cells(config, base_dir, list(family.grid), obs_space.shape)
    needs_ranges = any(c.get("obs_noise", 0.0) > 0 for c in family.cells)
    if isinstance(config.envelope.obs_ranges, list) or (
        needs_ranges and config.envelope.obs_ranges is None
    ):
        from safecert.blackbox.ranges import fixed_ranges

        fixed_ranges(config, obs_space)
    reference = reference_spec(config, base_dir)
    cost_range, return_range = kpi_ranges(config, limit)
    return RunPlan(
        Path(config_path).resolve(),
        config,
        base_dir,
        oracle,
        family,
        cost_range,
        return_range,
        input_digests(Path(config_path), config, base_dir, oracle, reference),
        reference,
    )


def reference_spec(config: RunConfig, base_dir: Path) -> OracleSpec | None:
    """The oracle of ``envelope.reference_policy`` (None for ``"random"`` or when unset); the
    policy under test cannot be its own reference."""
    name = config.envelope.reference_policy
    if name is None:
        return None
    from safecert.blackbox.ranges import RANDOM_REFERENCE

    if name == RANDOM_REFERENCE:
        return None
    if name.strip() == config.policy.strip():
        raise ConfigError(
            "is the policy under test: its ranges would scale its own noise",
            field="envelope.reference_policy",
            fix='name a fixed reference policy (e.g. "random") shared by every vendor you compare',
        )
    return parse_oracle_spec(
        name, base_dir=base_dir, timeout_s=config.timeout_s, trust=config.trust
    )


def kpi_ranges(
    config: RunConfig, limit: int | None
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """(cost range, return range) for the Hoeffding bounds: declared in ``[kpis]``, else the cost
    range ``[0, limit * max_step_cost]`` when the episode length is bounded, else none."""
    kpis = config.kpis
    if kpis.cost is not None:
        cost_range: tuple[float, float] | None = (kpis.cost.lower, kpis.cost.upper)
    elif limit is not None:
        cost_range = (0.0, float(limit) * config.spec.max_step_cost)
    else:
        cost_range = None
    return_range = None if kpis.return_ is None else (kpis.return_.lower, kpis.return_.upper)
    return cost_range, return_range


def episode_limit(config: RunConfig, base_dir: Path) -> int | None:
    """The episode length bound: ``max_steps``, else the environment's own time limit."""
    if config.max_steps is not None:
        return config.max_steps
    from safecert.blackbox.rollout import make_base_env

    env = make_base_env(config, base_dir)
    try:
        return env.spec.max_episode_steps if env.spec else None
    finally:
        env.close()


def input_digests(
    config_path: Path,
    config: RunConfig,
    base_dir: Path,
    oracle: OracleSpec,
    reference: OracleSpec | None = None,
) -> tuple[FileDigest, ...]:
    """Digests of every file the run's outcome depends on: the config, the policy's artifacts
    (an ONNX, SB3 or TorchScript file; an ``exec:`` program, script and every argument naming a
    file; a ``python:`` policy's module), the reference policy's artifacts (role ``reference``),
    the config's ``artifacts`` (what a wrapper loads) and a ``python:`` env factory's module.
    When any of the policy, the reference policy or the environment is ``python:`` code, every
    other file Python can import from the config's folder is hashed too (role ``code``), with the
    folder's listing (:func:`safecert.isolation.listing_digest`): a module added next to the policy
    after the run (a package ``__init__.py``, a sibling) fails ``safecert verify``.
    Paths are recorded relative to the config's folder."""
    found: dict[str, FileDigest] = {}

    def add(role: str, path: Path) -> None:
        key = str(Path(path).resolve())
        if key not in found:
            found[key] = file_digest(role, Path(path), base_dir)

    add("config", Path(config_path))
    for artifact in oracle.artifacts:
        add("policy", Path(artifact))
    for artifact in reference.artifacts if reference is not None else ():
        add("reference", Path(artifact))
    for i, name in enumerate(config.artifacts):
        path = Path(name).expanduser()
        path = path if path.is_absolute() else base_dir / path
        require_regular_file(
            path,
            field=f"artifacts[{i}]",
            what="file the policy loads (relative to the config's folder)",
        )
        add("artifact", path)
    module = env_module_file(config, base_dir)
    if module is not None:
        add("env", module)
    if runs_python_code(config):
        from safecert.isolation import listing_digest, loadable_code

        for path in loadable_code(base_dir):
            add("code", path)
        listing = listing_digest(base_dir)
        found["<listing>"] = FileDigest(role="code", path=".", sha256=listing, digest_of="listing")
    return tuple(found.values())


def runs_python_code(config: RunConfig) -> bool:
    """True when the policy, the reference policy or the environment is ``python:`` code from
    the config's folder (its whole importable listing is then part of the inputs)."""
    names = (config.policy, config.env, config.envelope.reference_policy or "")
    return any(name.strip().startswith("python:") for name in names)


def env_module_file(config: RunConfig, base_dir: Path) -> Path | None:
    """The source file of a ``python:module:factory`` environment, located without importing it
    (ConfigError on ``env`` when there is none)."""
    if not config.env.startswith("python:"):
        return None
    from safecert.isolation import locate_module

    name = config.env[len("python:") :].partition(":")[0]
    found = locate_module(name, Path(base_dir).resolve())
    if found is None:
        raise ConfigError(
            f"cannot import module {name!r} (no such module)",
            field="env",
            fix=f"make it importable from {base_dir}",
        )
    return found


def _check_cells(
    config: RunConfig,
    base_dir: Path,
    cells: list[dict[str, Any]],
    obs_shape: tuple[int, ...] | None,
) -> None:
    """Build every cell's wrapped env once, so that an envelope the environment cannot take
    (no mass to shift, no layouts, an L∞ action adversary on a discrete space) is one ConfigError
    before the run — not an error inside a worker."""
    from safecert.blackbox.rollout import build_cell_env

    ranges = np.ones(obs_shape) if obs_shape else None
    for params in cells:
        if any(v != NOMINAL[k] for k, v in params.items()):
            build_cell_env(config, base_dir, params, ranges, _no_policy).close()


def _no_policy(observations: np.ndarray) -> np.ndarray:  # pragma: no cover - never called
    raise AssertionError("the envelope check runs no episode")
