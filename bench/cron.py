"""What cron costs and how it behaves under faults, against a real redis-server and real BullMQ.

1. Reconcile cost: N cron entries reconciled by the worker (`CronSchedules.reconcile`: publish, read the peers,
   upsert each, list and prune) against plain BullMQ doing only the upserts and the listing, in the same run,
   interleaved. Prints the median ratio over the rounds and its range.
2. Idempotence: the unchanged file reconciled again and again (as every boot and every spurious file event
   does): pending jobs before and after, duplicates.
3. A store outage mid-reconcile: the store is stopped while a reconcile runs, and started again (an
   append-only file, so what was written survives); the next beat's retry must converge on exactly the
   file's schedulers, with none twice and none stale.
4. Firing: an entry that fires every second, taken for ten seconds by a BullMQ worker set up as the worker's
   consumers are: runs, how late each was taken after its instant (median and worst), any instant taken twice.

Usage: python bench/cron.py [--entries 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bullmq import Queue, Worker

from pi_dispatch.demo.store import EmbeddedValkey, server_binary
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import connect
from pi_dispatch.triggers.file import Trigger, parse_triggers
from pi_dispatch.triggers.schedules import LOCAL_JOB_NAME, LOCAL_JOB_OPTIONS, schedules_of
from pi_dispatch.worker.host.cron import CronSchedules

QUEUE = "pi-jobs@bench"


def entries(count: int, pattern: str = "0 3 * * *") -> list[Trigger]:
    raw = [
        {
            "on": {"type": "cron", "id": f"entry-{index}", "pattern": pattern},
            "run": {"kind": "local", "folder": f"/srv/app{index}", "flow": "tidy", "task": "tidy up"},
        }
        for index in range(count)
    ]
    return parse_triggers(json.dumps({"triggers": raw}), "bench.json")


async def no_peers() -> bool:
    return True


def schedules(client: Any, url: str, triggers: list[Trigger], log: Recorder | None = None) -> CronSchedules:
    return CronSchedules(client, StoreAddress(url), QUEUE, "UTC", "bench", False, no_peers, triggers, log or Recorder())


async def plain_upserts(url: str, triggers: list[Trigger]) -> None:
    queue = Queue(QUEUE, {"connection": url})
    try:
        for schedule in schedules_of(triggers):
            await queue.upsertJobScheduler(
                schedule.scheduler_id,
                {"pattern": schedule.pattern, "tz": "UTC"},
                LOCAL_JOB_NAME,
                dict(schedule.data),
                dict(LOCAL_JOB_OPTIONS),
            )
        await queue.getJobSchedulers(0, -1)
    finally:
        await queue.close()


async def reconcile_cost(url: str, count: int, rounds: int) -> None:
    client = connect(url)
    triggers = entries(count)
    ratios, ours_s, plain_s = [], [], []
    for _ in range(rounds):
        await client.flushdb()
        start = time.perf_counter()
        await plain_upserts(url, triggers)
        plain = time.perf_counter() - start
        await client.flushdb()
        cron = schedules(client, url, triggers)
        start = time.perf_counter()
        assert await cron.reconcile()
        ours = time.perf_counter() - start
        await cron.close()
        ratios.append(ours / plain)
        ours_s.append(ours)
        plain_s.append(plain)
    await client.aclose()
    print(
        f"reconcile {count} entries | ours {statistics.median(ours_s) * 1000:.0f} ms | plain upserts "
        f"{statistics.median(plain_s) * 1000:.0f} ms | ratio median {statistics.median(ratios):.2f}x "
        f"(range {min(ratios):.2f}-{max(ratios):.2f}x over {rounds} rounds)"
    )


async def pending(client: Any) -> list[str]:
    return [member.decode() for member in await client.zrange(f"bull:{QUEUE}:delayed", 0, -1)]


async def idempotence(url: str, count: int) -> None:
    client = connect(url)
    await client.flushdb()
    cron = schedules(client, url, entries(count))
    await cron.reconcile()
    before = await pending(client)
    for _ in range(20):
        await cron.reconcile()
    after = await pending(client)
    await cron.close()
    await client.aclose()
    duplicates = len(after) - len({job_id.rsplit(":", 1)[0] for job_id in after})
    print(
        f"idempotence: 20 more reconciles of {count} entries | pending jobs {len(before)} -> {len(after)} | "
        f"changed {len(set(before) ^ set(after))} | duplicates {duplicates}"
    )


async def outage(count: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = EmbeddedValkey(Path(folder), server_binary()[0], persist=True)
        store.start()
        client = connect(store.url)
        log = Recorder()
        stale = schedules(client, store.url, entries(count + 10))  # a file with ten entries since deleted
        assert await stale.reconcile()
        await stale.close()
        cron = schedules(client, store.url, entries(count), log)
        reconciling = asyncio.ensure_future(cron.reconcile())
        await asyncio.sleep(0.05)
        store.stop()
        finished = await reconciling
        down_at = time.monotonic()
        store.start()
        retries = 0
        while cron.pending:
            retries += 1
            await cron.retry()
            if cron.pending:
                await asyncio.sleep(0.5)
        back_s = time.monotonic() - down_at
        found = await pending(client)
        ids = {job_id.rsplit(":", 1)[0].removeprefix("repeat:") for job_id in found}
        wanted = {f"entry-{index}" for index in range(count)}
        await cron.close()
        await client.aclose()
        store.stop()
    print(
        f"store outage mid-reconcile: first reconcile {'done' if finished else 'failed, kept pending'} | "
        f"converged after {retries} retries, {back_s:.1f} s | schedulers {len(ids)}/{len(wanted)} | "
        f"stale {len(ids - wanted)} | missing {len(wanted - ids)} | duplicates {len(found) - len(ids)}"
    )


async def firing(url: str) -> None:
    client = connect(url)
    await client.flushdb()
    cron = schedules(client, url, entries(1, "* * * * * *"))
    await cron.reconcile()
    late_ms: list[float] = []
    instants: list[int] = []

    async def take(job: Any, token: str) -> None:
        instant = int(str(job.id).rsplit(":", 1)[1])
        instants.append(instant)
        late_ms.append(time.time() * 1000 - instant)

    consumer = Worker(QUEUE, take, {"connection": url, "autorun": False})
    await consumer.blockingRedisConnection.getRedisVersion()  # as the worker does: delays then fire to the ms,
    await consumer.redisConnection.getRedisVersion()  # not on whole seconds
    running = asyncio.ensure_future(consumer.run())
    await asyncio.sleep(10)
    await consumer.close()
    running.cancel()
    await cron.close()
    await client.aclose()
    print(
        f"firing every second for 10 s: runs {len(instants)} | taken late median {statistics.median(late_ms):.0f} ms, "
        f"worst {max(late_ms):.0f} ms | instants taken twice {len(instants) - len(set(instants))}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = EmbeddedValkey(Path(folder), server_binary()[0])
        store.start()
        try:
            await reconcile_cost(store.url, args.entries, args.rounds)
            await idempotence(store.url, args.entries)
            await firing(store.url)
        finally:
            store.stop()
    await outage(args.entries)


if __name__ == "__main__":
    asyncio.run(main())
