"""What the fleet's limits cost a job: the store's side of one start (a scope's ledger and the fleet's counted, the
day's tokens read before and added after, a scope's fleet-wide lease taken and released), against BullMQ's own
`Queue.add` of the same job, measured in the same run on the same redis-server.

Each round times N jobs' limit path, one after another, and N `Queue.add`s, interleaved round by round so a busy
machine's drift hits both alike; it also counts the store commands one limit path sends (INFO commandstats, the
scripts' own commands included). It prints the per-job medians, the ratio's median and range over the rounds, and
the commands per job.

Usage: python bench/limits.py [--jobs 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.budget import WindowCaps, scope_ledger, scope_slot_prefix
from pi_dispatch.demo.store import EmbeddedValkey
from pi_dispatch.fleet.budgets import Ledger, add_tokens, reserve, tokens_spent
from pi_dispatch.fleet.lease import FleetLease
from pi_dispatch.testing.jobs import forge_job

SCOPE = "acme/web"
LEDGERS = [
    Ledger(scope_ledger(SCOPE), WindowCaps(day=10**9, week=10**9), scope=SCOPE),
    Ledger("budget", WindowCaps(10**9, 10**9, 10**9), 90),
]


async def limit_path(client: aioredis.Redis, lease: FleetLease, job_id: str) -> None:
    """One job's limits, as the worker takes them around its container."""
    held = await lease.acquire(scope_slot_prefix(SCOPE), 4, job_id, 2_100_000)
    now = int(time.time() * 1000)
    await tokens_spent(client, now)
    await reserve(client, LEDGERS, now)
    await add_tokens(client, 600, now)
    if held is not None:
        await lease.release(held)


async def commands(client: aioredis.Redis) -> int:
    stats: dict[str, Any] = await client.info("commandstats")
    return sum(int(value["calls"]) for name, value in stats.items() if name != "cmdstat_info")


async def one_round(url: str, jobs: int, tag: int) -> tuple[float, float, float]:
    client = aioredis.from_url(url)
    queue = Queue("pi-jobs", {"connection": url})
    lease = FleetLease(client, "bench")
    try:
        await client.config_resetstat()
        started = time.perf_counter()
        for index in range(jobs):
            await limit_path(client, lease, f"gh-{tag}-{index}")
        limits = (time.perf_counter() - started) / jobs
        sent = (await commands(client)) / jobs
        started = time.perf_counter()
        for index in range(jobs):
            await queue.add("github", forge_job(index), {"jobId": f"add-{tag}-{index}"})
        added = (time.perf_counter() - started) / jobs
    finally:
        await queue.close()
        await client.aclose()
    return limits, added, sent


async def main(jobs: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pi-bench-limits-") as folder:
        store = EmbeddedValkey(Path(folder))
        store.start()
        try:
            figures = [await one_round(store.url, jobs, tag) for tag in range(rounds)]
        finally:
            store.stop()
    limits = [limit for limit, _, _ in figures]
    added = [add for _, add, _ in figures]
    ratios = [limit / add for limit, add, _ in figures]
    print(f"limit path per job: median {statistics.median(limits) * 1000:.3f} ms over {rounds} rounds of {jobs}")
    print(f"Queue.add per job:  median {statistics.median(added) * 1000:.3f} ms")
    spread = f"range {min(ratios):.2f}-{max(ratios):.2f}x"
    print(f"ratio (limits / Queue.add): median {statistics.median(ratios):.2f}x, {spread}")
    print(f"store commands per job's limit path: {statistics.median(sent for _, _, sent in figures):.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.jobs, arguments.rounds))
