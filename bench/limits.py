"""What the fleet's limits cost a job: the store's side of one start (a scope's ledger and the fleet's counted, the
day's tokens read before and added after, a scope's fleet-wide lease taken and released), and its dollar path (its
cap held in the fleet's, a scope's and a model's dollar windows with the open-hold record, then settled to a metered
cost), each against BullMQ's own `Queue.add` of the same job, measured in the same run on the same redis-server.

Each round times N jobs' limit path, N dollar paths and N `Queue.add`s, one after another, interleaved round by round
so a busy machine's drift hits all alike; it also counts the store commands each path sends (INFO commandstats, the
scripts' own commands included). It prints the per-job medians, the ratios' median and range over the rounds, and the
commands per job.

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
from pi_dispatch.core.dollarplan import USD_PREFIX, DollarLedger, usd_model_prefix, usd_scope_prefix
from pi_dispatch.demo.store import EmbeddedValkey
from pi_dispatch.fleet.budgets import Ledger, add_tokens, reserve, tokens_spent
from pi_dispatch.fleet.dollars import DollarHold, hold_dollars, settle
from pi_dispatch.fleet.lease import FleetLease
from pi_dispatch.testing.jobs import forge_job

SCOPE = "acme/web"
LEDGERS = [
    Ledger(scope_ledger(SCOPE), WindowCaps(day=10**9, week=10**9), scope=SCOPE),
    Ledger("budget", WindowCaps(10**9, 10**9, 10**9), 90),
]
ROOM = 10**15  # micro-dollars: no window refuses
DOLLAR_LEDGERS = [
    DollarLedger(USD_PREFIX, WindowCaps(ROOM, ROOM, ROOM)),
    DollarLedger(usd_scope_prefix(SCOPE), WindowCaps(day=ROOM), "scope"),
    DollarLedger(usd_model_prefix("openai/gpt-5"), WindowCaps(month=ROOM), "model", "openai/gpt-5"),
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


async def dollar_path(client: aioredis.Redis, job_id: str) -> None:
    """One job's dollars, as the worker holds them before its container and settles them after it."""
    hold = await hold_dollars(client, DOLLAR_LEDGERS, 2_000_000, int(time.time() * 1000), hold_id=f"bench#{job_id}#1",
                              lease_ms=3_900_000)  # fmt: skip
    assert isinstance(hold, DollarHold)
    await settle(client, hold, [123_456] * len(hold.ledgers))


async def commands(client: aioredis.Redis) -> int:
    stats: dict[str, Any] = await client.info("commandstats")
    return sum(int(value["calls"]) for name, value in stats.items() if name != "cmdstat_info")


Figures = tuple[float, float, float, float, float]  # limit path, Queue.add, its commands, dollar path, its commands


async def one_round(url: str, jobs: int, tag: int) -> Figures:
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
        await client.config_resetstat()
        started = time.perf_counter()
        for index in range(jobs):
            await dollar_path(client, f"gh-{tag}-{index}")
        dollars = (time.perf_counter() - started) / jobs
        dollar_sent = (await commands(client)) / jobs
        started = time.perf_counter()
        for index in range(jobs):
            await queue.add("github", forge_job(index), {"jobId": f"add-{tag}-{index}"})
        added = (time.perf_counter() - started) / jobs
    finally:
        await queue.close()
        await client.aclose()
    return limits, added, sent, dollars, dollar_sent


async def main(jobs: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pi-bench-limits-") as folder:
        store = EmbeddedValkey(Path(folder))
        store.start()
        try:
            figures = [await one_round(store.url, jobs, tag) for tag in range(rounds)]
        finally:
            store.stop()
    limits = [figure[0] for figure in figures]
    added = [figure[1] for figure in figures]
    dollars = [figure[3] for figure in figures]
    print(f"limit path per job:  median {statistics.median(limits) * 1000:.3f} ms over {rounds} rounds of {jobs}")
    print(f"dollar path per job: median {statistics.median(dollars) * 1000:.3f} ms (hold + settle)")
    print(f"Queue.add per job:   median {statistics.median(added) * 1000:.3f} ms")
    for name, index in (("limits", 0), ("dollars", 3)):
        ratios = [figure[index] / figure[1] for figure in figures]
        spread = f"range {min(ratios):.2f}-{max(ratios):.2f}x"
        print(f"ratio ({name} / Queue.add): median {statistics.median(ratios):.2f}x, {spread}")
    print(f"store commands per job's limit path: {statistics.median(figure[2] for figure in figures):.1f}")
    print(f"store commands per job's dollar path: {statistics.median(figure[4] for figure in figures):.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.jobs, arguments.rounds))
