"""Real `pi-dispatch worker` processes on one store, supervised as systemd would, and a watch on the job containers
they start: what the fault benches and the scenario tests share."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from pi_dispatch.testing.services import worker_process_env
from pi_dispatch.worker.after.history import read_records
from pi_dispatch.worker.run.containers import LABEL_FLEET, LABEL_HOST, LABEL_JOB, listed_labels


class Overlaps:
    """Polls a daemon for running job containers: the most that ran at once per job, and who ran each."""

    def __init__(self, base_url: str | None = None, fleet: str | None = None) -> None:
        self.client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        # one fleet's containers alone: tests and molecule's hosts run jobs on the same daemon meanwhile
        self.labels = [LABEL_JOB, *([f"{LABEL_FLEET}={fleet}"] if fleet else [])]
        self.most: dict[str, int] = defaultdict(int)
        self.hosts: dict[str, set[str]] = defaultdict(set)
        self.first_seen: dict[tuple[str, str], float] = {}  # (job, host) -> when its container was first seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
                seen: dict[str, int] = defaultdict(int)
                # sparse: the listing alone; docker-py otherwise inspects each container, and one that ends in
                # between fails the whole poll, so under load short jobs went unseen
                for container in self.client.containers.list(sparse=True, filters={"label": self.labels}):
                    labels = listed_labels(container)
                    job, host = labels.get(LABEL_JOB, ""), labels.get(LABEL_HOST, "")
                    seen[job] += 1
                    self.hosts[job].add(host)
                    self.first_seen.setdefault((job, host), time.monotonic())
                for job, count in seen.items():
                    self.most[job] = max(self.most[job], count)
            self._stop.wait(0.1)

    def first_seen_by_host(self) -> dict[str, list[float]]:
        """When each host's job containers were first seen, host by host."""
        found: dict[str, list[float]] = defaultdict(list)
        for (_, host), seen in self.first_seen.items():
            found[host].append(seen)
        return found

    def __enter__(self) -> Overlaps:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()


RESTART_S = 10.0  # the unit's RestartSec


@dataclass
class Fleet:
    """Worker processes on one store, each with its own folders, restarted as systemd's unit would restart them
    (on any failure, RESTART_S later, without limit) unless buried for good."""

    root: Path
    url: str
    image: str
    extra: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    buried: set[str] = field(default_factory=set)
    extras: dict[str, dict[str, str]] = field(default_factory=dict)
    restarts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    _stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread(target=self._supervise, daemon=True).start()

    def _supervise(self) -> None:
        failed_at: dict[str, float] = {}
        while not self._stopping.wait(0.2):
            for name, process in list(self.processes.items()):
                code = process.poll()
                if code in (None, 0, 2) or name in self.buried:
                    failed_at.pop(name, None)
                    continue
                failed_at.setdefault(name, time.monotonic())
                if time.monotonic() - failed_at[name] >= RESTART_S and not self._stopping.is_set():
                    failed_at.pop(name)
                    with contextlib.suppress(RuntimeError):
                        self.start(name)
                        self.restarts[name].append(time.monotonic())

    def env(self, name: str, **extra: str) -> dict[str, str]:
        return worker_process_env(self.root, self.url, self.image, name, **{**self.extra, **extra})

    def start(self, name: str, **extra: str) -> None:
        extra = self.extras.setdefault(name, extra)  # a restart keeps what the first start was given
        log = (self.root / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "pi_dispatch", "worker"], env=self.env(name, **extra), stdout=log, stderr=log
        )
        log.close()
        deadline = time.monotonic() + 60
        while "worker_started" not in (self.root / f"{name}.log").read_text(errors="replace"):
            if time.monotonic() > deadline or self.processes[name].poll() is not None:
                raise RuntimeError(f"worker {name} did not start: {(self.root / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def kill(self, name: str, *, for_good: bool = False) -> None:
        if for_good:
            self.buried.add(name)
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait()

    def stop_all(self) -> None:
        self._stopping.set()
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(60)
            if process.poll() is None:
                process.kill()

    def records(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for folder in self.root.iterdir():
            if (folder / "logs").is_dir():
                for record in read_records(folder / "logs"):
                    if record.get("outcome") == "completed":
                        found[str(record["jobId"])] = record
        return found
