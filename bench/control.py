"""Working with jobs, measured: cancel latency, `logs -f` latency, and what keeping a job's output costs it.

Everything real: a private redis-server, the machine's Docker daemon, `pi-dispatch worker` processes, and each
command run as a separate process, as an operator on another machine runs it. Each figure has its anchor,
measured in the same run:
- cancel: `pi-dispatch cancel JOB` until the job's container is gone, against `docker stop` of such a container
  (the same TERM, grace, KILL with no fleet in between). Goal: median at most 2 s.
- logs -f: from the time at the head of a line (when the worker, or for the anchor the daemon, got it from the
  container) to the moment another process printing `pi-dispatch logs JOB -f` shows it, against
  `docker logs -f --timestamps` in another process. Goal: median at most 1 s.
- capture: a job that prints 10 MiB, run by a worker that keeps its output (masked, in its file and the store's
  copy) against one with PI_CAPTURE_JOB_LOGS=0, in interleaved rounds. Goal: at most 5% of the job's time.
It prints each median with its range over the rounds.

Usage: python bench/control.py [--rounds 10] [--output-kb 10240]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
from bullmq import Queue

from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE, build_example_image
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import UNCAPPED, RedisServer
from pi_dispatch.worker.run.containers import LABEL_JOB

TICKS = 5


def worker_env(url: str, folder: Path, name: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "VALKEY_URL": url,
        "PI_WORKER_NAME": name,
        "PI_LOGS_DIR": str(folder / name / "logs"),
        "PI_JOBS_DIR": str(folder / name / "jobs"),
        "PI_JOB_IMAGE": EXAMPLE_IMAGE,
        "PI_CONCURRENCY": "2",
        "PI_METRICS_ADDR": "",
        "PI_EGRESS": "0",
        "PI_DAILY_CAP": UNCAPPED,
        "PI_JOB_CONTRACT": "event",  # the example image runs no agent
        **extra,
    }


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "pi_dispatch", "worker"], env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 60
    while b"worker_started" not in log.read_bytes():
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit(f"the worker did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)
    return process


async def state_of(queue: Queue, job_id: str, states: tuple[str, ...], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while await queue.getJobState(job_id) not in states:
        if time.monotonic() > deadline:
            raise SystemExit(f"{job_id} never reached {states}")
        await asyncio.sleep(0.05)


def container_of(client: Any, job_id: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = client.containers.list(filters={"label": f"{LABEL_JOB}={job_id}", "status": "running"})
        if running:
            return running[0]
        time.sleep(0.05)
    raise SystemExit(f"no container for {job_id}")


def gone(client: Any, job_id: str) -> None:
    while client.containers.list(all=True, filters={"label": f"{LABEL_JOB}={job_id}"}):
        time.sleep(0.02)


async def cancel_round(url: str, queue: Queue, client: Any, number: int) -> tuple[float, float]:
    """(pi-dispatch cancel, docker stop) seconds, each to the container gone."""
    job_id = f"gh-cancel-{number}"
    await queue.add("github", forge_job(number, trigger={"demoSleep": 120}), {"jobId": job_id})
    await state_of(queue, job_id, ("active",))
    container_of(client, job_id)
    began = time.monotonic()
    command = [sys.executable, "-m", "pi_dispatch", "cancel", job_id, "--valkey-url", url]
    subprocess.run(command, capture_output=True, check=False)
    gone(client, job_id)
    cancel_s = time.monotonic() - began
    anchor = client.containers.run(EXAMPLE_IMAGE, detach=True, init=True, environment={"PI_JOB_ID": "x"},
                                   entrypoint=["sleep", "120"])  # fmt: skip
    began = time.monotonic()
    anchor.stop(timeout=10)
    anchor.remove(force=True)
    return cancel_s, time.monotonic() - began


def stamp_of(line: bytes) -> float:
    """The time at the head of a line, as Docker (nanoseconds) or the worker (milliseconds) writes it."""
    whole, _, fraction = line.split(b" ", 1)[0].decode().rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{fraction[:6].ljust(6, '0')}+00:00").timestamp()


def line_lags(command: list[str], needle: bytes, count: int) -> list[float]:
    """Seconds from each matching line's Docker timestamp to the moment `command` printed it."""
    lags = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as follower:
        assert follower.stdout is not None
        for line in follower.stdout:
            shown = time.time()
            if needle in line:
                lags.append(shown - stamp_of(line))
                if len(lags) == count:
                    follower.kill()
                    break
    return lags


async def follow_round(url: str, queue: Queue, client: Any, number: int) -> tuple[list[float], list[float]]:
    """(pi-dispatch logs -f, docker logs -f) lags of tick lines: the job's, and a plain container's printing alike."""
    job_id = f"gh-follow-{number}"
    await queue.add("github", forge_job(1000 + number, trigger={"demoTicks": TICKS}), {"jobId": job_id})
    command = [sys.executable, "-m", "pi_dispatch", "logs", job_id, "-f", "--valkey-url", url]
    ours = await asyncio.to_thread(line_lags, command, b" tick ", TICKS)
    script = f"i=0; while [ $i -lt {TICKS} ]; do i=$((i + 1)); echo tick $i; sleep 1; done"
    plain = client.containers.run(EXAMPLE_IMAGE, entrypoint=["sh", "-c", script], detach=True)
    try:
        anchor = ["docker", "logs", "-f", "--timestamps", plain.id]
        theirs = await asyncio.to_thread(line_lags, anchor, b" tick ", TICKS - 1)
    finally:
        plain.remove(force=True)
    return ours, theirs


async def capture_round(on: Queue, off: Queue, number: int, output_kb: int) -> tuple[float, float]:
    """Seconds of the job's run (BullMQ's processedOn to finishedOn) with its output kept, and without."""
    seconds = []
    for queue, side in ((on, "on"), (off, "off")):
        job_id = f"gh-capture-{side}-{number}"
        await queue.add("github", forge_job(2000 + number, trigger={"demoOutputKb": output_kb}), {"jobId": job_id})
        await state_of(queue, job_id, ("completed", "failed"), 600)
        job = await queue.getJob(job_id)
        seconds.append((job.finishedOn - job.processedOn) / 1000)
    return seconds[0], seconds[1]


def spread(values: list[float], unit: str = "s", scale: float = 1.0) -> str:
    median = statistics.median(values) * scale
    return f"median {median:.3f} {unit} (range {min(values) * scale:.3f}–{max(values) * scale:.3f}, n={len(values)})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--output-kb", type=int, default=10_240, help="what the capture job prints, in KiB")
    arguments = parser.parse_args()
    client = docker.from_env()
    build_example_image(client)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "redis").mkdir()
        store = RedisServer(folder / "redis")
        store.start()
        workers = [
            start_worker(worker_env(store.url, folder, "keeps"), folder / "keeps.out"),
            start_worker(worker_env(store.url, folder, "bare", PI_CAPTURE_JOB_LOGS="0"), folder / "bare.out"),
        ]
        keeps, bare = (
            Queue("pi-jobs@keeps", {"connection": store.url}),
            Queue("pi-jobs@bare", {"connection": store.url}),
        )
        cancels, stops, ours, theirs, kept, plain = [], [], [], [], [], []
        try:
            for number in range(arguments.rounds):
                cancel_s, stop_s = await cancel_round(store.url, keeps, client, number)
                lags, anchor_lags = await follow_round(store.url, keeps, client, number)
                on_s, off_s = await capture_round(keeps, bare, number, arguments.output_kb)
                cancels.append(cancel_s)
                stops.append(stop_s)
                ours += lags
                theirs += anchor_lags
                kept.append(on_s)
                plain.append(off_s)
                lag, anchor_lag = statistics.median(lags), statistics.median(anchor_lags)
                print(f"  round {number + 1}: cancel {cancel_s:.2f} s (docker stop {stop_s:.2f} s); "
                      f"logs -f {lag:.3f} s (docker logs -f {anchor_lag:.3f} s); "
                      f"output job {on_s:.2f} s kept, {off_s:.2f} s not")  # fmt: skip
        finally:
            await keeps.close()
            await bare.close()
            for process in workers:
                process.terminate()
            for process in workers:
                process.wait(60)
            store.stop()
    overheads = [on / off - 1 for on, off in zip(kept, plain, strict=True)]
    print(f"cancel, command to container gone:   {spread(cancels)}; goal ≤ 2 s")
    print(f"  anchor: docker stop                {spread(stops)}")
    print(f"logs -f, line printed to line shown: {spread(ours)}; goal ≤ 1 s")
    print(f"  anchor: docker logs -f             {spread(theirs)}")
    print(f"capture of {arguments.output_kb} KiB, the job's time:  kept {spread(kept)}, not {spread(plain)}")
    print(f"  overhead                           {spread(overheads, '%', 100)}; goal ≤ 5%")
    whole = statistics.median(kept) / statistics.median(plain) - 1
    print(f"  overhead of the medians            {whole * 100:.3f} % (the rounds' pairs are noisy on a busy machine)")


if __name__ == "__main__":
    asyncio.run(main())
