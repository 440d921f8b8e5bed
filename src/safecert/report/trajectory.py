"""Trajectories of counterexamples: replay a stored episode step by step and plot it.

The episode store keeps totals only, so a trajectory is re-created by replaying the episode with
its seed (the same path as ``safecert certify --replay``: the run's config, the cell's wrapped
environment, the stored observation ranges, a fresh oracle) under a :class:`Recorder`, the
outermost wrapper, which records at every step the *true* observation (before observation noise,
what the spec judges), the action sent, the reward and the step cost evaluated with the run's own
``spec.cost``. The replayed totals are compared with the stored record and the report says whether
they match: a policy that is not deterministic, or an environment that changed, shows up here.

For MuJoCo tasks the worst counterexample is also rendered as a short GIF when an offscreen
backend is asked for (``MUJOCO_GL=egl`` or ``osmesa``); otherwise the report says why there is
no clip.
"""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from safecert.blackbox.jobs import EpisodeRecord

#: offscreen MuJoCo backends (``MUJOCO_GL``) a clip can be rendered with
OFFSCREEN = ("egl", "osmesa")
CLIP_SIZE = (240, 160)
CLIP_FRAMES = 40


class Recorder(gym.Wrapper):
    """Records ``(true obs, action, reward, step cost)`` per step and, with ``frame_every`` > 0,
    every ``frame_every``-th rendered frame; passes everything through."""

    def __init__(self, env: gym.Env, spec: Any, frame_every: int = 0) -> None:
        super().__init__(env)
        self.cost_spec = spec
        self.frame_every = frame_every
        self.obs: list[np.ndarray] = []
        self.costs: list[float] = []
        self.rewards: list[float] = []
        self.frames: list[np.ndarray] = []

    def _frame(self) -> None:
        if not self.frame_every or len(self.costs) % self.frame_every:
            return
        # the free camera looks at a fixed point: follow the first body so the robot stays in view
        sim: Any = self.env.unwrapped
        viewer = getattr(getattr(sim, "mujoco_renderer", None), "viewer", None)
        if viewer is not None and sim.data.xpos.shape[0] > 1:
            viewer.cam.lookat[:] = sim.data.xpos[1]
        self.frames.append(np.array(self.env.render(), copy=True))  # the buffer is reused

    @property
    def true_obs(self) -> np.ndarray | None:
        return getattr(self.env, "true_obs", None)

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        from safecert.blackbox.rollout import true_observation

        obs, info = self.env.reset(**kwargs)
        self.obs = [np.asarray(true_observation(self.env, obs), dtype=float).ravel()]
        self.costs, self.rewards, self.frames = [], [], []
        self._frame()
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        from safecert.blackbox.rollout import true_observation
        from safecert.blackbox.spec import step_scope
        from safecert.expressions import EvalError

        obs, reward, terminated, truncated, info = self.env.step(action)
        true = true_observation(self.env, obs)
        scope = step_scope(
            true, action, float(reward), info, terminated, truncated, len(self.costs)
        )
        try:
            cost = self.cost_spec.step_cost(scope)
        except EvalError:
            cost = float("nan")  # the replayed episode ends as a spec failure; shown as a gap
        self.obs.append(np.asarray(true, dtype=float).ravel())
        self.costs.append(cost)
        self.rewards.append(float(reward))
        self._frame()
        return obs, reward, terminated, truncated, info


@dataclass(frozen=True)
class Trajectory:
    """One replayed episode: observations ``(T+1, d)``, step costs ``(T,)``, and both records."""

    obs: np.ndarray
    costs: np.ndarray
    replayed: EpisodeRecord
    stored: EpisodeRecord
    frames: list[np.ndarray]

    @property
    def matches(self) -> bool:
        return self.replayed == self.stored


def clip_unavailable(plan: Any) -> str | None:
    """Why no clip of this run's episodes can be rendered, or None when one can: the environment
    must be a MuJoCo one and ``MUJOCO_GL`` must name an offscreen backend (``egl`` or
    ``osmesa``, from Debian's libegl-mesa0 / libosmesa6) — set it to ask for clips."""
    from safecert.blackbox.rollout import make_base_env

    env = make_base_env(plan.config, plan.base_dir)
    try:
        mujoco = hasattr(env.unwrapped, "mujoco_renderer")
    finally:
        env.close()
    if not mujoco:
        return "not a MuJoCo environment"
    if os.environ.get("MUJOCO_GL") not in OFFSCREEN:
        return "offscreen rendering not requested (set MUJOCO_GL=egl or MUJOCO_GL=osmesa)"
    return None


def replay_trajectory(
    plan: Any,
    record: EpisodeRecord,
    obs_ranges: list[float] | None,
    *,
    clip: bool = False,
    oracle: Any = None,
) -> Trajectory:
    """Replay ``record`` (cell, index, seed) of the run ``plan``
    (:func:`safecert.blackbox.plan.plan_run`) with ``obs_ranges`` as stored, asking ``oracle``
    (one built from ``plan.oracle`` when None; the caller closes its own).
    With ``clip`` (MuJoCo, offscreen backend: :func:`clip_unavailable`) also keep at most
    :data:`CLIP_FRAMES` evenly spaced frames."""
    from safecert.blackbox.backends import RunContext, Worker
    from safecert.blackbox.jobs import EpisodeJob
    from safecert.blackbox.rollout import build_cell_env, episode_spec

    config = plan.config.model_copy(update={"batch_size": 1})
    every = 0
    if clip:
        width, height = CLIP_SIZE
        kwargs = {**config.env_kwargs, "render_mode": "rgb_array", "width": width, "height": height}
        config = config.model_copy(update={"env_kwargs": kwargs})
        every = max(1, -(-record.steps // CLIP_FRAMES))
    ranges = None if obs_ranges is None else tuple(obs_ranges)
    ctx = RunContext(config, str(plan.base_dir), plan.cells, ranges, plan.oracle)
    worker = Worker(ctx, oracle=oracle)
    try:
        env = build_cell_env(
            config,
            plan.base_dir,
            plan.cells[record.cell],
            None if ranges is None else np.asarray(ranges, dtype=float),
            worker.oracle.act,
        )
        recorder = Recorder(env, episode_spec(config), every)
        worker.envs[record.cell] = [recorder]
        replayed = worker.run([EpisodeJob(record.cell, record.index, record.seed)])[0]
    finally:
        worker.close()
    return Trajectory(
        np.array(recorder.obs), np.array(recorder.costs), replayed, record, recorder.frames
    )


def clip_gif(frames: list[np.ndarray], fps: float = 8.0) -> bytes:
    """An animated GIF of ``frames`` (Pillow, looping)."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    buf = io.BytesIO()
    images[0].save(
        buf, format="GIF", save_all=True, append_images=images[1:], duration=1000 / fps, loop=0
    )
    return buf.getvalue()


def crossing_step(costs: np.ndarray, budget: float) -> int | None:
    """The first step after which the cumulative cost exceeds ``budget`` (``None``: never)."""
    over = np.flatnonzero(np.cumsum(costs) > budget)
    return int(over[0]) + 1 if over.size else None


def trajectory_png(t: Trajectory, budget: float, title: str = "") -> bytes:
    """The quantity the spec constrains first — cumulative cost with the budget line and the
    step it is crossed — then the true state components (the first 8) over time. ``title`` is
    drawn only when given (a report's figure caption already names the episode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from safecert.report.html import FAIL_COLOUR

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(6.4, 4.6), sharex=True, dpi=100, gridspec_kw={"height_ratios": [3, 2]}
    )
    steps = np.arange(len(t.obs))
    cum = np.concatenate([[0.0], np.cumsum(t.costs)])
    top.plot(np.arange(len(cum)), cum, color=FAIL_COLOUR, lw=2, label="cumulative cost")
    top.axhline(budget, color="#000", ls="--", lw=1.2, label=f"budget d = {budget:g}")
    crossed = crossing_step(np.asarray(t.costs), budget)
    if crossed is not None:
        top.axvline(crossed, color="#555", ls=":", lw=1, label=f"exceeds d at step {crossed}")
    top.set_ylabel("cumulative cost\n(spec: ≤ d)")
    top.legend(fontsize=7, loc="upper left")
    dims = t.obs.shape[1] if t.obs.ndim == 2 else 0
    for d in range(min(dims, 8)):
        bottom.plot(steps, t.obs[:, d], lw=1, label=f"obs[{d}]")
    bottom.set_ylabel("true observation")
    bottom.set_xlabel("step")
    if dims:
        bottom.legend(fontsize=6, ncol=4, loc="upper left")
    if dims > 8:
        bottom.set_title(f"first 8 of {dims} observation components", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()
