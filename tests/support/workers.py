"""Helpers for tests that run real workers: settings, workers in this process or as children, job polling."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import WorkerSettings, load_settings
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.valkey import fleet_id
from pi_dispatch.testing.services import UNCAPPED
from pi_dispatch.worker.entry import frozen_settings
from pi_dispatch.worker.lifecycle import Worker
from pi_dispatch.worker.run.containers import ContainerRuntime

# How long a wait on an event (a log line, a job's state) may take before it is called a hang: far past what a loaded
# machine needs (pytest in two processes and molecule's hosts beside it), well inside pytest's per-test timeout.
CEILING_S = 180.0


def worker_env(tmp: Path, valkey_url: str, image: str, name: str | None, **extra: str) -> dict[str, str]:
    """A worker's environment: its logs under tmp/<name>, fast locks, short drains; extra wins."""
    env = {
        "VALKEY_URL": valkey_url,
        "PI_LOGS_DIR": str(tmp / (name or "unnamed") / "logs"),
        "PI_JOBS_DIR": str(tmp / (name or "unnamed") / "jobs"),
        "PI_JOB_IMAGE": image,
        "PI_CONCURRENCY": "2",
        "PI_LOCK_DURATION_MS": "2000",
        "PI_DRAIN_GRACE_MS": "20000",
        "PI_JOB_MEMORY_MB": "64",
        "PI_JOB_CPUS": "0.5",
        "PI_METRICS_ADDR": "",  # off: test workers would otherwise share the default port
        "PI_EGRESS": "0",  # a test of egress turns it on with an egress network and proxy of its own
        "PI_DAILY_CAP": UNCAPPED,  # a test of the limits sets its own caps
        "PI_JOB_CONTRACT": "event",  # the example image runs no agent; a test of the reference's contract sets it
    }
    if name:
        env["PI_WORKER_NAME"] = name
    env.update(extra)
    return env


def settings_of(env: Mapping[str, str], hostname: str = "testhost") -> WorkerSettings:
    """The settings a worker runs with, in the one form production hands it (`worker.entry.frozen_settings`)."""
    return frozen_settings(load_settings(environment=lambda: env, facts=HostFacts(hostname, None, os.geteuid())))


@dataclass
class RunningWorker:
    worker: Worker
    events: Recorder
    stop: asyncio.Event
    task: asyncio.Task[int]

    @property
    def logs_dir(self) -> Path:
        return self.worker.settings.logs_dir


@contextlib.asynccontextmanager
async def running_worker(settings: WorkerSettings, **options: Any) -> AsyncIterator[RunningWorker]:
    """A worker in this process, stopped (drained) on exit."""
    events = Recorder()
    runtime = ContainerRuntime.connect(
        settings.worker_name, settings.concurrency, events, fleet_id(settings.valkey_url)
    )
    worker = Worker(settings, runtime, events, **options)
    stop = asyncio.Event()
    task = asyncio.ensure_future(worker.run(stop))
    deadline = time.monotonic() + CEILING_S
    while "worker_started" not in events.names():
        if task.done():
            task.result()
        if time.monotonic() > deadline:
            raise TimeoutError("the worker did not start")
        await asyncio.sleep(0.05)
    try:
        yield RunningWorker(worker, events, stop, task)
    finally:
        stop.set()
        await asyncio.wait_for(task, 120)


def start_worker_process(env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`python -m pi_dispatch worker` as a child with exactly this environment (plus PATH and HOME)."""
    child_env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **env}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pi_dispatch", "worker"], env=child_env, stdout=out, stderr=subprocess.STDOUT
        )


async def wait_for_line(log: Path, needle: str, timeout_s: float = CEILING_S) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{needle!r} not in the worker's log:\n{log.read_text(errors='replace')[-3000:]}")
        await asyncio.sleep(0.2)


async def finished_job(queue: Any, job_id: str, timeout_s: float = CEILING_S) -> Any:
    """The job once it is completed or has failed for good."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = await queue.getJobState(job_id)
        if state in ("completed", "failed"):
            return await queue.getJob(job_id)
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} is still {state}")
        await asyncio.sleep(0.1)


async def job_in_state(queue: Any, job_id: str, states: tuple[str, ...], timeout_s: float = CEILING_S) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := await queue.getJobState(job_id)) not in states:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} is {state}, not one of {states}")
        await asyncio.sleep(0.1)
    return str(state)


class ContainerWatch:
    """Polls the daemon for a job's running containers, so a test can say none ever ran twice at once."""

    def __init__(self, docker_client: Any, job_id: str, interval_s: float = 0.1, label: str | None = None) -> None:
        from pi_dispatch.worker.run.containers import LABEL_JOB

        self.docker, self.interval_s = docker_client, interval_s
        self.label = label or f"{LABEL_JOB}={job_id}"  # or any label: every container carrying it
        self.most = self.samples = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                running = self.docker.containers.list(  # sparse: one call, no race with a container that ends
                    sparse=True, filters={"label": self.label, "status": "running"}
                )
                self.samples += 1
                self.most = max(self.most, len(running))
                self.seen.update(container.id for container in running)
            self._stop.wait(self.interval_s)

    async def started(self, timeout_s: float = CEILING_S) -> None:
        """Once a watched container has been seen running."""
        deadline = time.monotonic() + timeout_s
        while not self.seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no container with {self.label} ran")
            await asyncio.sleep(0.05)

    def __enter__(self) -> ContainerWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


@contextlib.asynccontextmanager
async def open_queues(url: str, names: Sequence[str]) -> AsyncIterator[dict[str, Any]]:
    """BullMQ queues by name, closed on exit."""
    from bullmq import Queue

    opened = {name: Queue(name, {"connection": url}) for name in names}
    try:
        yield opened
    finally:
        for queue in opened.values():
            await queue.close()


@contextlib.asynccontextmanager
async def registered_hosts(client: Any, caps_by_host: Mapping[str, str]) -> AsyncIterator[None]:
    """Live, routing registry rows, one per host with its capability tokens, removed on exit."""
    from pi_dispatch.fleet.registry import HostRegistry

    rows = [HostRegistry(client, name) for name in caps_by_host]
    for row, caps in zip(rows, caps_by_host.values(), strict=True):
        await row.start({"routes": "true", "caps": caps})
    try:
        yield
    finally:
        for row in rows:
            await row.close()


FAST_RETRY: dict[str, Any] = {
    "attempts": 2,
    "backoff": {"type": "fixed", "delay": 200},
}  # a retried job's backoff, short enough for a test


def record_of(logs_dir: Path, job_id: str) -> dict[str, Any]:
    """The record a worker wrote for a job in its logs folder."""
    return json.loads((logs_dir / f"{job_id}.json").read_text())
