"""Per-job overhead of the worker over a bare `docker run --rm`, and routed enqueue over plain BullMQ `add`.

Both references are measured in the same run, on the same redis-server and Docker daemon:
- jobs: N jobs through a worker with one slot (enqueue → record file written), per job, against N
  sequential `docker run --rm` of the same image with the same event mounted. Target: at most 1.05x.
- enqueue: M forge jobs routed by `Enqueuer` (registry cache, job id, dedup) against M plain
  `Queue.add` calls with the same options. Target (issue 24): at least 0.95x the rate.

Usage: python bench/worker.py [--jobs N] [--adds M]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import docker
from bullmq import Queue

from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import load_settings
from pi_dispatch.core.jscompat import js_json
from pi_dispatch.demo.jobimage import build_example_image
from pi_dispatch.demo.store import EmbeddedValkey
from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, forge_job_options, registry_reader
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.infra.events import discard
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import UNCAPPED
from pi_dispatch.worker.lifecycle import Worker
from pi_dispatch.worker.run.containers import ContainerRuntime


def bare_docker_runs(image: str, count: int, folder: Path) -> list[float]:
    event = folder / "event.json"
    event.write_text(js_json(forge_job(1)["trigger"]) + "\n")
    command = ["docker", "run", "--rm", "--memory", "64m", "--cpus", "0.5", "-v", f"{event}:/job/event.json:ro", image]
    times = []
    for _ in range(count):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


async def worker_runs(url: str, image: str, count: int, folder: Path) -> float:
    env = {
        "VALKEY_URL": url,
        "PI_WORKER_NAME": "bench",
        "PI_LOGS_DIR": str(folder / "logs"),
        "PI_JOBS_DIR": str(folder / "jobs"),
        "PI_JOB_IMAGE": image,
        "PI_CONCURRENCY": "1",
        "PI_JOB_MEMORY_MB": "64",
        "PI_JOB_CPUS": "0.5",
        "PI_EGRESS": "0",  # against a plain `docker run`: bench/egress.py measures egress's cost
        "PI_DAILY_CAP": UNCAPPED,
        "PI_JOB_CONTRACT": "event",  # the example image runs no agent
    }
    settings = load_settings(environment=lambda: env, facts=HostFacts("bench", None, os.geteuid()))
    runtime = ContainerRuntime.connect("bench", 1)
    worker = Worker(settings, runtime, discard)
    stop = asyncio.Event()
    task = asyncio.ensure_future(worker.run(stop))
    queue = Queue("pi-jobs", {"connection": url})
    await asyncio.sleep(3)  # let it boot: boot is not per-job cost
    records = [folder / "logs" / f"gh-b{index}.json" for index in range(count)]
    started = time.perf_counter()
    for index in range(count):
        await queue.add("github", forge_job(index), {"jobId": f"gh-b{index}"})
    while not all(record.exists() for record in records):
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    await queue.close()
    stop.set()
    await task
    return elapsed / count


async def enqueue_rates(url: str, count: int, rounds: int = 5) -> tuple[float, float]:
    """Median rates over interleaved rounds, so drift on a busy machine hits both sides alike."""
    client = connect(url)
    await client.flushdb()
    for name, caps in (("mini1", "s:prod"), ("mini2", "")):
        registry = HostRegistry(client, name)
        await registry.start({"caps": caps, "routes": "true"})
    plain_queue = Queue("pi-jobs@mini1", {"connection": url})
    enqueuer = Enqueuer(StoreAddress(url), ForgeRouter(registry_reader(client)))
    plain_rates, routed_rates = [], []
    for round_number in range(rounds):
        base = round_number * count
        jobs = [forge_job(base + index, secretsProfile="prod") for index in range(count)]
        started = time.perf_counter()
        for job in jobs:
            options = forge_job_options("github", job)
            await plain_queue.add("github", job, {**options, "jobId": f"plain-{options['jobId']}"})
        plain_rates.append(count / (time.perf_counter() - started))
        started = time.perf_counter()
        for job in jobs:
            await enqueuer.enqueue_forge_job("github", job)
        routed_rates.append(count / (time.perf_counter() - started))
    await plain_queue.close()
    await enqueuer.close()
    await client.aclose()
    return statistics.median(plain_rates), statistics.median(routed_rates)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--adds", type=int, default=500, help="forge jobs per round (5 rounds each side)")
    arguments = parser.parse_args()
    image = "pi-dispatch-example-job:latest"
    build_example_image(docker.from_env())
    with EmbeddedValkey() as valkey, tempfile.TemporaryDirectory() as folder:
        bare = bare_docker_runs(image, arguments.jobs, Path(folder))
        per_job = await worker_runs(valkey.url, image, arguments.jobs, Path(folder))
        bare_mean = statistics.mean(bare)
        print(f"jobs ({arguments.jobs}, one slot, same image and event):")
        print(f"  docker run --rm   {bare_mean * 1000:8.0f} ms/job (median {statistics.median(bare) * 1000:.0f})")
        print(f"  worker            {per_job * 1000:8.0f} ms/job (enqueue → record written)")
        print(f"  ratio             {per_job / bare_mean:8.2f}×  (target ≤ 1.05×)")
        plain, routed = await enqueue_rates(valkey.url, arguments.adds)
        print(f"enqueue (5 interleaved rounds of {arguments.adds} forge jobs needing s:prod, medians):")
        print(f"  Queue.add         {plain:8.0f} jobs/s")
        print(f"  routed enqueue    {routed:8.0f} jobs/s")
        print(f"  ratio             {routed / plain:8.2f}×  (target ≥ 0.95×)")


if __name__ == "__main__":
    asyncio.run(main())
