"""One container per job, through the Docker SDK.

The job's folder (its event as `event.json`, its non-secret fields as `job.json`) is mounted
read-only at `/job`; resolved secrets go in as environment variables through the API, never on a
command line and never in a file. Every container carries labels naming its job and this
host, so the boot reaper removes this host's strays and no one else's. The SDK is synchronous: its
calls run on a private thread pool sized for the host's job slots, so a long wait never starves them.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig

from pi_dispatch.core.reasons import ExitCode
from pi_dispatch.core.runusage import StdoutTail
from pi_dispatch.infra.dockerclient import DockerUnreachable, docker_client
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import STORE_FAULTS
from pi_dispatch.worker.prepare.jobspec import ImageFacts, network_hardening
from pi_dispatch.worker.run.attachstream import following, hand_over
from pi_dispatch.worker.run.outcomes import ContainerEnd, DockerUnavailable, ImageMissing

if TYPE_CHECKING:
    from pi_dispatch.worker.prepare.jobspec import ContainerSpec
    from pi_dispatch.worker.run.output import AttemptOutput

LABEL_JOB: Final = "dev.pi-dispatch.job"
LABEL_HOST: Final = "dev.pi-dispatch.host"
LABEL_ATTEMPT: Final = "dev.pi-dispatch.attempt"
LABEL_FLEET: Final = "dev.pi-dispatch.fleet"
LABEL_INSTANCE: Final = "dev.pi-dispatch.instance"  # which run of the worker process started it
STOP_GRACE_S: Final = 10
PIDS_LIMIT: Final = 4096
REATTACH_POLL_S: Final = 1.0
TIMEOUT_SLACK_S: Final = 0.5  # how early a dropped wait still counts as the job's own timeout
FOLLOW_GRACE_S: Final = 10.0  # how long the last of a container's output may take to arrive after its end


T = TypeVar("T")
Started = Callable[[str], Awaitable[None]]  # told the id of a job's container once it has started
Sink = Callable[[bytes], object]  # takes a container's output as it comes


def _log_config(spec: ContainerSpec) -> LogConfig:
    """Docker's own copy of the output, capped, only when the worker keeps none: a copy that the container's
    removal deletes would only cost the daemon the time to write it."""
    if not spec.docker_log:
        return LogConfig(type=LogConfig.types.NONE)
    return LogConfig(type=LogConfig.types.JSON, config={"max-size": f"{spec.log_mb}m", "max-file": "1"})


def listed_labels(container: Any) -> dict[str, str]:
    """A listed container's labels (a sparse listing has them at the top, as the daemon's list gives them)."""
    labels = container.attrs.get("Labels")
    return labels if isinstance(labels, dict) else {}


@dataclass
class StopRequest:
    """Asks a job's running container to stop: after a grace (a drain), or at once (a fenced job)."""

    requested: asyncio.Event = field(default_factory=asyncio.Event)
    grace_s: float = STOP_GRACE_S

    def request(self, grace_s: float) -> None:
        """Ask for a stop; the shortest grace asked for wins."""
        self.grace_s = min(self.grace_s, grace_s) if self.requested.is_set() else grace_s
        self.requested.set()


@dataclass
class ContainerRuntime:
    """This host's job containers: run one, reap strays, look up an image."""

    client: Any
    host: str
    slots: int = 3
    fleet: str = ""  # which fleet (Valkey) the host belongs to: a demo's workers never reap a real fleet's
    log: EventLog = discard
    instance: str = field(default_factory=lambda: secrets.token_hex(6))
    _pool: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        # two threads per slot (a wait and a stop), plus the reaper and image lookups
        self._pool = ThreadPoolExecutor(max_workers=2 * self.slots + 4, thread_name_prefix="docker")

    @classmethod
    def connect(cls, host: str, slots: int, log: EventLog = discard, fleet: str = "") -> ContainerRuntime:
        """A runtime on the daemon DOCKER_HOST names (the local socket by default). Raises DockerUnavailable."""
        try:
            client = docker_client()
        except DockerUnreachable as unreachable:
            raise DockerUnavailable(str(unreachable)) from unreachable
        return cls(client, host, slots, fleet, log)

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(function, *args, **kwargs))

    async def ping(self, timeout_s: float = 5.0) -> bool:
        """Whether the daemon answers within timeout_s."""
        try:
            await asyncio.wait_for(self._call(self.client.ping), timeout_s)
        except (TimeoutError, docker.errors.DockerException, requests.exceptions.RequestException):
            return False
        return True

    async def image_id(self, image: str) -> str | None:
        """The local image id (`sha256:…`), or None when the image is not here or Docker is down."""
        found = await self._image(image)
        return str(found.id) if found is not None else None

    async def image_facts(self, image: str) -> ImageFacts | None:
        """The local image's labels and user, read once per job; None when it is not here or Docker is down."""
        found = await self._image(image)
        if found is None:
            return None
        config = found.attrs.get("Config") if isinstance(found.attrs, dict) else None
        user = config.get("User") if isinstance(config, dict) else None
        return ImageFacts(dict(found.labels or {}), user if isinstance(user, str) else "")

    async def _image(self, image: str) -> Any:
        try:
            return await self._call(self.client.images.get, image)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return None

    async def _fleet_containers(self, *labels: str) -> list[Any]:
        """The fleet's containers with these labels, from the daemon's listing alone (`sparse`: without it docker-py
        inspects each one it lists, a round trip per container, and one removed meanwhile fails the whole list)."""
        try:
            found: list[Any] = await self._call(
                self.client.containers.list,
                all=True,
                sparse=True,
                filters={"label": [f"{LABEL_FLEET}={self.fleet}", *labels]},
            )
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable("the Docker daemon did not list containers") from error
        return found

    async def reap(self) -> int:
        """Remove every container labelled as this host's, running or not; returns how many."""
        return await self._remove_all(await self._fleet_containers(f"{LABEL_HOST}={self.host}"))

    async def sweep_orphans(
        self, live_hosts: set[str], confirm: Callable[[set[str]], Awaitable[set[str]]] | None = None
    ) -> int:
        """Remove the fleet's containers on this daemon that nobody is waiting for: this host's from an earlier run
        of its worker, and any host's whose worker is not live (`confirm`, given the hosts that look gone, says
        which of them are live after all). Each may still hold its job's secrets in its environment, and run
        beside the job's next attempt. Returns how many; never raises."""
        try:
            containers = await self._fleet_containers()
        except DockerUnavailable:
            return 0
        orphans, gone = [], set()
        for container in containers:
            labels = listed_labels(container)
            host = labels.get(LABEL_HOST)
            if host == self.host and labels.get(LABEL_INSTANCE) != self.instance:
                orphans.append(container)
            elif host not in live_hosts | {self.host}:
                orphans.append(container)
                gone.add(str(host))
        if gone and confirm is not None:
            try:
                back = await confirm(gone)
            except STORE_FAULTS:
                return 0  # not knowing whether a host is live is not knowing its containers are orphans
            orphans = [c for c in orphans if listed_labels(c).get(LABEL_HOST) not in back]
        return await self._remove_all(orphans)

    async def _remove_all(self, strays: list[Any]) -> int:
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

    def _create(self, spec: ContainerSpec) -> Any:
        return self.client.containers.create(
            spec.image,
            # Removed by us once its end is read, never auto-removed: a daemon restarting with live-restore kills
            # and drops an auto-remove container, where a plain one keeps running and is found again.
            # A real PID 1 forwards the stop signal to the job and reaps its zombies, so a stop takes effect
            # at once instead of after STOP_GRACE_S
            init=True,
            environment=dict(spec.environment),
            labels={
                LABEL_JOB: spec.job_id,
                LABEL_HOST: self.host,
                LABEL_FLEET: self.fleet,
                LABEL_ATTEMPT: str(spec.attempt),
                LABEL_INSTANCE: self.instance,
            },
            mem_limit=f"{spec.memory_mb}m",
            network_mode=spec.network,
            nano_cpus=round(spec.cpus * 1e9),
            pids_limit=PIDS_LIMIT,
            security_opt=["no-new-privileges"],
            cap_drop=["ALL"],
            log_config=_log_config(spec),
            read_only=spec.read_only,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=256m"} if spec.read_only else None,  # noqa: S108 - in the container
            **({"user": spec.user} if spec.user else {}) | ({"runtime": spec.runtime} if spec.runtime else {}),
            **network_hardening(spec),
            volumes={
                str(spec.job_dir): {"bind": "/job", "mode": "ro"},
                **{str(source): {"bind": where, "mode": mode} for where, (source, mode) in spec.mounts.items()},
                **({str(spec.resolver): {"bind": "/etc/resolv.conf", "mode": "ro"}} if spec.resolver else {}),
            },
            **({"shm_size": f"{spec.shm_mb}m"} if spec.shm_mb else {}),
            # a key on stdin: the SDK asks for StdinOnce (stdin closed at the end of what we write) only in a
            # config that is not detached; the container is still started and followed as any other
            detach=spec.stdin_key is None,
            stdin_open=spec.stdin_key is not None,
        )

    async def run(
        self, spec: ContainerSpec, *, output: AttemptOutput | None, stop: StopRequest, started: Started | None = None
    ) -> ContainerEnd:
        """Create, start and wait for the job's container, then remove it.

        The timeout stops the container (SIGTERM, then SIGKILL after STOP_GRACE_S); so does a stop request,
        after its own grace (none for a fenced job). A daemon that goes away mid-job is waited for until the job's
        timeout, and the container found again (live-restore) rather than left running beside a retry. Raises
        ImageMissing, or DockerUnavailable for a daemon failure.
        """
        try:
            container = await self._call(self._create, spec)
        except docker.errors.ImageNotFound as error:
            raise ImageMissing(f"the image {spec.image} is not on this host") from error
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable(f"the container could not be created ({type(error).__name__})") from error
        try:
            return await self._run_created(container, spec, output=output, stop=stop, started=started)
        finally:
            await self._remove(container, spec)

    async def _remove(self, container: Any, spec: ContainerSpec) -> None:
        try:
            await self._call(container.remove, force=True)
        except docker.errors.NotFound:
            pass  # gone already (a daemon restarted without live-restore drops its containers)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            self.log("container_remove_failed", {"jobId": spec.job_id})

    async def _run_created(
        self,
        container: Any,
        spec: ContainerSpec,
        *,
        output: AttemptOutput | None,
        stop: StopRequest,
        started: Started | None,
    ) -> ContainerEnd:
        tail = StdoutTail()  # attached with no output kept too: the exit line is read from it either way
        follower = await self._attach(container, output.write if output is not None else None, tail.feed, spec)
        try:
            await self._call(container.start)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable(f"the container could not be started ({type(error).__name__})") from error
        if started is not None:
            await started(container.id)
        deadline = asyncio.get_running_loop().time() + spec.timeout_s
        status, timed_out, stopped = await self._await_end(container, spec, deadline, stop)
        if follower is not None:  # the stream ends with the container; a lost daemon may leave it open
            await asyncio.to_thread(follower.join, FOLLOW_GRACE_S)
        code = status.get("StatusCode") if isinstance(status, Mapping) else None
        code = code if isinstance(code, int) else None
        oom = code not in (ExitCode.OK, ExitCode.POLICY) and not (timed_out or stopped) and await self._oom(container)
        if oom:
            self.log("job_oom_killed", {"jobId": spec.job_id, "memoryMb": spec.memory_mb, "exitCode": code})
        return ContainerEnd(code, timed_out=timed_out, aborted=stopped, oom_killed=oom, stdout_tail=tail.text)

    async def _oom(self, container: Any) -> bool:
        """Whether the kernel killed a process of the ended container for its memory limit (Docker's OOMKilled)."""
        try:
            await self._call(container.reload)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return False  # not known: read as the plain exit it is
        state = container.attrs.get("State") if isinstance(container.attrs, Mapping) else None
        return isinstance(state, Mapping) and state.get("OOMKilled") is True

    async def _attach(
        self, container: Any, write: Sink | None, stdout: Sink, spec: ContainerSpec
    ) -> threading.Thread | None:
        """A thread handing the container's output, in order, to the attempt's sink and its stdout to the tail.

        Attached before the start, so nothing is missed; the attach stream carries the output as the container
        writes it, in large frames, where the logs endpoint would decode the log driver's file line by line
        (measured: 10 MiB of lines cost a job 3-7% of its time this way, about 100% that way)."""
        params = {"stdout": 1, "stderr": 1, "stream": 1} | ({"stdin": 1} if spec.stdin_key is not None else {})
        try:
            sock = await self._call(container.attach_socket, params=params)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            self.log("container_logs_unreadable", {"jobId": spec.job_id})
            return None
        if spec.stdin_key is not None:  # the runner reads its stdin to the end before anything else
            await self._call(hand_over, sock, f"{spec.stdin_key}\n".encode())
        lost = partial(self.log, "container_logs_unreadable", {"jobId": spec.job_id})
        return following(sock, write, stdout, lost, name=f"output-{spec.job_id[:32]}")

    async def _await_end(
        self, container: Any, spec: ContainerSpec, deadline: float, stop: StopRequest
    ) -> tuple[Mapping[str, Any], bool, bool]:
        """The container's end status, whether the timeout ended it, and whether a stop request did."""
        loop = asyncio.get_running_loop()
        stopped = False
        while True:
            waiting = asyncio.ensure_future(self._call(container.wait, timeout=max(0.1, deadline - loop.time())))
            if not stopped:
                stopping = asyncio.ensure_future(stop.requested.wait())
                try:
                    await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopping.cancel()
                if not waiting.done():
                    stopped = True
                    await self._stop(container, stop.grace_s)
            try:
                return await waiting, False, stopped
            except requests.exceptions.RequestException as error:
                # The SDK reports a read timeout on the wait as a connection error; before the job's timeout a
                # dropped wait (refused, reset, cut short) is the daemon going away, which is not the job's end.
                if loop.time() >= deadline - TIMEOUT_SLACK_S:
                    await self._stop(container, STOP_GRACE_S)
                    return await self._final_status(container), not stopped, stopped
                found = await self._reattach(container, spec, deadline, error)
                if found is not None:
                    return found, False, stopped
            except docker.errors.DockerException as error:
                raise DockerUnavailable(f"the container's end was not seen ({type(error).__name__})") from error

    async def _reattach(
        self, container: Any, spec: ContainerSpec, deadline: float, lost: Exception
    ) -> Mapping[str, Any] | None:
        """Wait for the daemon to answer again: None when the container still runs (wait for it again), its
        status when it ended meanwhile. Raises DockerUnavailable when it is gone, or the daemon is not back by
        the job's timeout."""
        loop = asyncio.get_running_loop()
        self.log("docker_lost_mid_job", {"jobId": spec.job_id, "reason": type(lost).__name__})
        while loop.time() < deadline:
            await asyncio.sleep(REATTACH_POLL_S)
            try:
                found = await self._call(self.client.containers.get, container.id)
            except docker.errors.NotFound as error:
                raise DockerUnavailable("the job's container did not survive the daemon's restart") from error
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                continue
            state = found.attrs.get("State") if isinstance(found.attrs, Mapping) else None
            self.log("container_reattached", {"jobId": spec.job_id})
            if isinstance(state, Mapping) and state.get("Running"):
                return None
            return {"StatusCode": state.get("ExitCode") if isinstance(state, Mapping) else None}
        raise DockerUnavailable("the Docker daemon did not come back before the job's timeout") from lost

    async def _stop(self, container: Any, grace_s: float) -> None:
        try:
            await self._call(container.stop, timeout=grace_s)
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
