"""One container per job, through the Docker SDK.

The job's folder (its event as `event.json`, its non-secret fields as `job.json`) is mounted
read-only at `/job`; resolved secrets go in as environment variables through the API, never on a
command line and never in a file. Every container carries labels naming its job and this
host, so the boot reaper removes this host's strays and no one else's. The SDK is synchronous: its
calls run on a private thread pool sized for the host's job slots, so a long wait never starves them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

import docker
import docker.errors
import requests.exceptions

from pi_dispatch.errors import PiDispatchError
from pi_dispatch.events import EventLog, discard

LABEL_JOB: Final = "dev.pi-dispatch.job"
LABEL_HOST: Final = "dev.pi-dispatch.host"
LABEL_ATTEMPT: Final = "dev.pi-dispatch.attempt"
LABEL_FLEET: Final = "dev.pi-dispatch.fleet"
STOP_GRACE_S: Final = 10
PIDS_LIMIT: Final = 4096

T = TypeVar("T")


class DockerUnavailable(PiDispatchError):
    """The Docker daemon cannot be reached; worth another attempt, never the job's fault."""


class ImageMissing(PiDispatchError):
    """The job's image is not on this host."""


@dataclass(frozen=True)
class ContainerSpec:
    """Everything one job's container is made from."""

    job_id: str
    attempt: int
    image: str
    job_dir: Path
    environment: Mapping[str, str]
    memory_mb: int
    cpus: float
    timeout_s: float


@dataclass(frozen=True)
class ContainerEnd:
    """How a job's container ended: its exit code, or why there is none worth reading."""

    exit_code: int | None
    timed_out: bool = False
    aborted: bool = False
    output: bytes = b""


@dataclass
class ContainerRuntime:
    """This host's job containers: run one, reap strays, look up an image."""

    client: Any
    host: str
    slots: int = 3
    fleet: str = ""  # which fleet (Valkey) the host belongs to: a demo's workers never reap a real fleet's
    log: EventLog = discard
    _pool: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        # two threads per slot (a wait and a stop), plus the reaper and image lookups
        self._pool = ThreadPoolExecutor(max_workers=2 * self.slots + 4, thread_name_prefix="docker")

    @classmethod
    def connect(cls, host: str, slots: int, log: EventLog = discard, fleet: str = "") -> ContainerRuntime:
        """A runtime on the daemon DOCKER_HOST names (the local socket by default). Raises DockerUnavailable."""
        client = None
        try:
            client = docker.from_env()
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            if client is not None:
                client.close()
            raise DockerUnavailable(f"the Docker daemon is not reachable ({type(error).__name__})") from error
        return cls(client, host, slots, fleet, log)

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(function, *args, **kwargs))

    async def image_id(self, image: str) -> str | None:
        """The local image id (`sha256:…`), or None when the image is not here or Docker is down."""
        try:
            found = await self._call(self.client.images.get, image)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return None
        return str(found.id)

    async def reap(self) -> int:
        """Remove every container labelled as this host's, running or not; returns how many."""
        try:
            strays = await self._call(
                self.client.containers.list,
                all=True,
                filters={"label": [f"{LABEL_HOST}={self.host}", f"{LABEL_FLEET}={self.fleet}"]},
            )
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable("the Docker daemon did not list containers") from error
        removed = 0
        for container in strays:
            try:
                await self._call(container.remove, force=True)
                removed += 1
            except docker.errors.NotFound:
                continue
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                self.log("container_reap_failed", {"container": container.short_id})
        if removed:
            self.log("containers_reaped", {"count": removed})
        return removed

    def _create(self, spec: ContainerSpec, *, keep: bool) -> Any:
        return self.client.containers.create(
            spec.image,
            # with no output to read back, the daemon removes the container as it exits: one call fewer
            auto_remove=not keep,
            # a real PID 1 forwards the stop signal to the job and reaps its zombies, so a stop takes effect
            # at once instead of after STOP_GRACE_S
            init=True,
            environment=dict(spec.environment),
            labels={
                LABEL_JOB: spec.job_id,
                LABEL_HOST: self.host,
                LABEL_FLEET: self.fleet,
                LABEL_ATTEMPT: str(spec.attempt),
            },
            mem_limit=f"{spec.memory_mb}m",
            nano_cpus=round(spec.cpus * 1e9),
            pids_limit=PIDS_LIMIT,
            security_opt=["no-new-privileges"],
            volumes={str(spec.job_dir): {"bind": "/job", "mode": "ro"}},
            detach=True,
        )

    async def run(self, spec: ContainerSpec, *, capture: bool, abort: asyncio.Event) -> ContainerEnd:
        """Create, start and wait for the job's container, then remove it.

        The timeout and an abort (the worker draining) both stop the container: SIGTERM, then SIGKILL
        after STOP_GRACE_S. Raises ImageMissing, or DockerUnavailable for a daemon failure.
        """
        try:
            container = await self._call(self._create, spec, keep=capture)
        except docker.errors.ImageNotFound as error:
            raise ImageMissing(f"the image {spec.image} is not on this host") from error
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable(f"the container could not be created ({type(error).__name__})") from error
        try:
            end = await self._run_created(container, spec, capture=capture, abort=abort)
        except BaseException:
            await self._remove(container, spec)
            raise
        if capture:
            await self._remove(container, spec)
        return end

    async def _remove(self, container: Any, spec: ContainerSpec) -> None:
        try:
            await self._call(container.remove, force=True)
        except docker.errors.NotFound:
            pass  # the daemon removed it as it exited
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            self.log("container_remove_failed", {"jobId": spec.job_id})

    async def _run_created(
        self, container: Any, spec: ContainerSpec, *, capture: bool, abort: asyncio.Event
    ) -> ContainerEnd:
        try:
            await self._call(container.start)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable(f"the container could not be started ({type(error).__name__})") from error
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.ensure_future(self._call(container.wait, timeout=spec.timeout_s))
        aborting = asyncio.ensure_future(abort.wait())
        try:
            await asyncio.wait({waiting, aborting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborting.cancel()
        timed_out = aborted = False
        if not waiting.done():
            aborted = True
            await self._stop(container)
        try:
            status = await waiting
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as error:
            # The SDK reports a read timeout on the wait as a connection error; a daemon that went away
            # before the timeout is an infra failure, not the job's.
            if loop.time() - started < spec.timeout_s * 0.9:
                raise DockerUnavailable(f"the container's end was not seen ({type(error).__name__})") from error
            timed_out = not aborted
            await self._stop(container)
            status = await self._final_status(container)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable(f"the container's end was not seen ({type(error).__name__})") from error
        code = status.get("StatusCode") if isinstance(status, Mapping) else None
        output = b""
        if capture:
            try:
                output = await self._call(container.logs, stdout=True, stderr=True)
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                self.log("container_logs_unreadable", {"jobId": spec.job_id})
        return ContainerEnd(
            code if isinstance(code, int) else None, timed_out=timed_out, aborted=aborted, output=output
        )

    async def _stop(self, container: Any) -> None:
        try:
            await self._call(container.stop, timeout=STOP_GRACE_S)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            self.log("container_stop_failed", {"container": container.short_id})

    async def _final_status(self, container: Any) -> Mapping[str, Any]:
        try:
            status: Mapping[str, Any] = await self._call(container.wait, timeout=STOP_GRACE_S * 2)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return {}
        return status

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
