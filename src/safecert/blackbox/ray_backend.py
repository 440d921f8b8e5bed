"""Ray backend: episode chunks as tasks on Ray actors, on an existing cluster or a local Ray.

``RayBackend(address)`` connects with ``ray.init(address=...)`` ("auto", "ray://host:10001",
"host:6379"); with no address it starts a local Ray instance (``num_cpus`` CPUs, no dashboard,
quiet logs). Each actor holds one :class:`safecert.blackbox.backends.Worker` — it builds the
oracle and the env copies once from the picklable :class:`RunContext`, exactly as a local worker
process does — and runs chunks of jobs with the same lockstep rollout: a fixed list
(:meth:`RayBackend.run`) or the chunks a :class:`~safecert.blackbox.backends.JobSource` hands out
as actors free up (:meth:`RayBackend.stream`, the sequential scheduler). Because every episode's
outcome depends only on its seed, records are identical to the local backend's for the same
master seed, whatever the cluster size or completion order.

Requirement on a remote cluster: the nodes run the same safecert version and can read the
config's folder (for ``python:`` policies and ONNX files) at the same path.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Generator, Iterator, Sequence

from safecert.blackbox.backends import JobSource, ListSource, RunContext, Worker
from safecert.blackbox.jobs import EpisodeJob, EpisodeRecord
from safecert.errors import ConfigError, SafecertError
from safecert.extras import require_extra


class _ActorWorker:
    """Body of a Ray actor: one Worker, reused across chunks; closing it closes its vendors (each
    under its own supervisor, :class:`safecert.procs.VendorProcess`)."""

    def __init__(self, ctx: RunContext) -> None:
        self.worker = Worker(ctx)
        self.worker.stay_colocated()

    def run(self, jobs: list[EpisodeJob]) -> list[EpisodeRecord]:
        return self.worker.run(jobs)

    def close(self) -> None:
        self.worker.close()


def _check_reachable(address: str) -> None:
    """Fail fast (one line) when a ``host:port`` address refuses TCP; Ray itself retries for
    minutes. ``auto`` and other forms are left to ``ray.init``."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or address == "auto":
        return
    try:
        socket.create_connection((host, int(port)), timeout=5.0).close()
    except OSError as exc:
        raise ConfigError(
            f"cannot reach a Ray cluster at {address!r} ({exc})",
            field="address",
            fix="start one with 'ray start --head' or omit --address for a local Ray",
        ) from None


class RayBackend:
    """Backend protocol on Ray. ``close()`` shuts down a Ray instance this backend started."""

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        actors: int | None = None,
        chunk_episodes: int | None = None,
    ) -> None:
        require_extra("ray")
        if address is not None:
            _check_reachable(address)
        self.address = address
        self.num_cpus = num_cpus
        self.actors = actors
        self.chunk_episodes = chunk_episodes
        self._started = False
        self._pool: list = []
        self._pool_ctx: RunContext | None = None

    def _connect(self):
        import ray

        if ray.is_initialized():
            return ray
        kwargs: dict = {
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "log_to_driver": False,
        }
        if self.address is None:
            kwargs["num_cpus"] = self.num_cpus or os.cpu_count() or 1
            kwargs["object_store_memory"] = 256 * 1024 * 1024
        try:
            ray.init(address=self.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(
                f"cannot reach a Ray cluster at {self.address!r} ({str(exc).splitlines()[0]})",
                field="address",
                fix="start one with 'ray start --head' or omit --address for a local Ray",
            ) from None
        self._started = self.address is None
        return ray

    def worker_count(self, ctx: RunContext) -> int:
        return self.actors or max(1, int(self._connect().cluster_resources().get("CPU", 1)))

    def _actors(self, ray, ctx: RunContext) -> list:
        """The actor pool for ``ctx``, kept across calls (``run`` after ``run`` on one cluster)."""
        if self._pool and self._pool_ctx == ctx:
            return self._pool
        self._release()
        n = self.worker_count(ctx)
        actor_cls = ray.remote(num_cpus=1)(_ActorWorker)
        self._pool = [actor_cls.remote(ctx) for _ in range(n)]
        self._pool_ctx = ctx
        return self._pool

    def _release(self) -> None:
        if not self._pool:
            return
        import ray

        try:  # let each worker close its oracle (exec children, sessions) before the kill
            ray.get([a.close.remote() for a in self._pool], timeout=30)
        except Exception:  # noqa: BLE001 - best effort; the kill below always happens
            logging.getLogger(__name__).debug("Ray workers did not close cleanly")
        for actor in self._pool:
            ray.kill(actor)
        self._pool, self._pool_ctx = [], None

    def run(self, jobs: Sequence[EpisodeJob], ctx: RunContext) -> Iterator[EpisodeRecord]:
        size = self.chunk_episodes or max(8, 4 * ctx.config.batch_size)
        return self.stream(ListSource(jobs, size), ctx)

    def stream(self, source: JobSource, ctx: RunContext) -> Generator[EpisodeRecord]:
        """Each actor holds at most ``source.per_worker`` chunks; a freed actor gets the next."""
        first = source.take()
        if not first:
            return
        ray = self._connect()
        pool = self._actors(ray, ctx)
        owner: dict = {}
        held = [0] * len(pool)
        finished = False
        try:
            while True:
                for i in range(len(pool)):  # a chunk is taken only when an actor has room
                    while held[i] < source.per_worker and (chunk := first or source.take()):
                        first = []
                        owner[pool[i].run.remote(chunk)] = i
                        held[i] += 1
                if not owner:
                    break
                done, _ = ray.wait(list(owner), num_returns=1)
                held[owner.pop(done[0])] -= 1
                yield from self._get(ray, done[0])
            finished = True
        finally:
            if not finished:  # interrupted or failed: drop the actors and their queued work
                for actor in self._pool:
                    ray.kill(actor)
                self._pool, self._pool_ctx = [], None

    @staticmethod
    def _get(ray, ref) -> list[EpisodeRecord]:
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, SafecertError):
                raise cause from None
            raise

    def close(self) -> None:
        """Close the actors; shut down the Ray instance if this backend started it."""
        self._release()
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
