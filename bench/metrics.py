"""What the worker's Prometheus metrics cost per job: the same jobs through a worker with metrics off and on.

Both sides run in the same run, on the same redis-server and Docker daemon, in interleaved rounds (off, on,
off, on, ...) so a busy machine's drift hits both alike. Each round: N jobs through a worker with two slots,
from enqueue to every record written; with metrics on, a scraper reads /metrics every second meanwhile (a
harsher rate than Prometheus' default 15 s). It prints the per-job medians, the ratio's median and range over
the rounds (target: at most 1.01x), and the metric hooks' own CPU per job measured apart, as a share of a job.

Usage: python bench/metrics.py [--jobs 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import docker
from bullmq import Queue

from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import load_settings
from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE, build_example_image
from pi_dispatch.demo.store import EmbeddedValkey, free_port
from pi_dispatch.infra.events import discard
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import UNCAPPED
from pi_dispatch.worker.lifecycle import Worker
from pi_dispatch.worker.metrics import WorkerMetrics
from pi_dispatch.worker.run.containers import ContainerRuntime


class Scraper(threading.Thread):
    """GET /metrics every second until stopped; counts the answers."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address, self.stopped, self.scrapes = address, threading.Event(), 0

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            try:
                with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=5) as answer:
                    answer.read()
                self.scrapes += 1
            except OSError:
                pass


async def round_per_job(url: str, folder: Path, jobs: int, tag: str, metrics: bool) -> tuple[float, int]:
    """Seconds per job for one round, and how many scrapes answered meanwhile."""
    address = f"127.0.0.1:{free_port()}" if metrics else ""
    env = {
        "VALKEY_URL": url,
        "PI_WORKER_NAME": "bench",
        "PI_LOGS_DIR": str(folder / tag / "logs"),
        "PI_JOBS_DIR": str(folder / tag / "jobs"),
        "PI_JOB_IMAGE": EXAMPLE_IMAGE,
        "PI_CONCURRENCY": "2",
        "PI_JOB_MEMORY_MB": "64",
        "PI_JOB_CPUS": "0.5",
        "PI_METRICS_ADDR": address,
        "PI_EGRESS": "0",
        "PI_DAILY_CAP": UNCAPPED,
        "PI_JOB_CONTRACT": "event",  # the example image runs no agent
    }
    settings = load_settings(environment=lambda: env, facts=HostFacts("bench", None, os.geteuid()))
    runtime = ContainerRuntime.connect("bench", 2)
    stop = asyncio.Event()
    task = asyncio.ensure_future(Worker(settings, runtime, discard).run(stop))
    queue = Queue("pi-jobs@bench", {"connection": url})
    await asyncio.sleep(3)  # boot is not per-job cost
    scraper = Scraper(address) if metrics else None
    if scraper is not None:
        scraper.start()
    records = [folder / tag / "logs" / f"gh-{tag}-{index}.json" for index in range(jobs)]
    started = time.perf_counter()
    for index in range(jobs):
        await queue.add("github", forge_job(index), {"jobId": f"gh-{tag}-{index}"})
    while not all(record.exists() for record in records):
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    if scraper is not None:
        scraper.stopped.set()
        scraper.join()
    await queue.close()
    stop.set()
    await task
    return elapsed / jobs, scraper.scrapes if scraper else 0


def hooks_per_job(iterations: int = 20_000) -> float:
    """CPU seconds of what metrics add to one job: its end counted from the log, its run timed, both gates timed,
    and a share of the per-beat reads (one beat per job, a generous rate)."""
    metrics = WorkerMetrics()
    log = metrics.observe(lambda event, fields: None)
    depth = {"waiting": 3, "delayed": 0, "active": 2, "prioritized": 0, "failed": 1}
    fields = {"jobId": "gh-1", "queue": "pi-jobs", "outcome": "completed", "reason": None}
    started = time.process_time()
    for _ in range(iterations):
        with metrics.timed_gate("resolver"):
            pass
        with metrics.timed_gate("wait check"):
            pass
        metrics.ran("completed", 1.5)
        log("job_started", fields)
        log("job_done", fields)
        metrics.beat(time.time())
        metrics.polled(time.time())
        metrics.depth("pi-jobs", depth)
        metrics.depth("pi-jobs@bench", depth)
    return (time.process_time() - started) / iterations


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20, help="jobs per round and side")
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    build_example_image(docker.from_env())
    off, on, ratios, scrapes = [], [], [], 0
    with EmbeddedValkey() as valkey, tempfile.TemporaryDirectory() as scratch:
        for number in range(arguments.rounds):
            per_off, _ = await round_per_job(valkey.url, Path(scratch), arguments.jobs, f"off{number}", False)
            per_on, scraped = await round_per_job(valkey.url, Path(scratch), arguments.jobs, f"on{number}", True)
            off.append(per_off)
            on.append(per_on)
            ratios.append(per_on / per_off)
            scrapes += scraped
            print(f"  round {number + 1}: off {per_off * 1000:6.0f} ms/job, on {per_on * 1000:6.0f} ms/job")
    hooks = hooks_per_job()
    print(f"jobs ({arguments.rounds} interleaved rounds of {arguments.jobs} per side, two slots, medians):")
    print(f"  metrics off        {statistics.median(off) * 1000:8.0f} ms/job")
    print(f"  metrics on         {statistics.median(on) * 1000:8.0f} ms/job ({scrapes} scrapes answered meanwhile)")
    print(
        f"  ratio              {statistics.median(ratios):8.3f}×  (range {min(ratios):.3f}×–{max(ratios):.3f}×;"
        " target ≤ 1.01×)"
    )
    share = hooks / statistics.median(off) * 100
    print(f"  hooks' own CPU     {hooks * 1e6:8.1f} µs/job = {share:.4f}% of a job (the noise-free part)")


if __name__ == "__main__":
    asyncio.run(main())
