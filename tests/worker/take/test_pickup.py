"""Slot-gated pickup and work stealing, with real workers, a real redis-server, real BullMQ and real containers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.keys import bull_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.jobhistory import read_attempts
from pi_dispatch.fleet.moves import NOT_WAITING, JobMover
from pi_dispatch.fleet.steal import Stealer, Waiting
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.worker.after.history import read_records
from pi_dispatch.worker.take.consumers import GuardedConsumer
from pi_dispatch.worker.take.pickup import Pickup
from tests.support.workers import RunningWorker, finished_job, open_queues, running_worker, settings_of, worker_env

pytestmark = [pytest.mark.redis]
SHARED, BUSY, IDLE = "pi-jobs", "pi-jobs@busy", "pi-jobs@idle"


@pytest.fixture
async def queues(valkey_url: str, client: aioredis.Redis) -> AsyncIterator[dict[str, Queue]]:
    async with open_queues(valkey_url, (SHARED, BUSY, IDLE)) as opened:
        yield opened


def env(tmp_path: Path, valkey_url: str, image: str, name: str | None, **extra: str) -> dict[str, str]:
    resolver = write_script(tmp_path / "prod-resolver", RESOLVER)
    # Locks with headroom: these tests are about where jobs run, and a 2 s lock on a loaded machine (CI runs the
    # molecule scenarios beside them) can be fenced by a starved event loop, failing a job for a reason of its own.
    return worker_env(
        tmp_path, valkey_url, image, name, PI_SECRET_PROFILES=f"prod:{resolver}", PI_STEAL_AFTER_MS="500",
        **{"PI_LOCK_DURATION_MS": "10000", **extra},
    )  # fmt: skip


@contextlib.contextmanager
def most_held(workers: Sequence[RunningWorker]) -> Iterator[dict[str, int]]:
    """Samples each worker's jobs in hand every 20 ms; yields the most each one held at once."""
    most = {w.worker.name: 0 for w in workers}

    async def sample() -> None:
        while True:
            for w in workers:
                most[w.worker.name] = max(most[w.worker.name], len(w.worker.pickup.held))
            await asyncio.sleep(0.02)

    task = asyncio.ensure_future(sample())
    try:
        yield most
    finally:
        task.cancel()


def records_by_job(*workers: RunningWorker) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for w in workers:
        for record in read_records(w.logs_dir):
            found.setdefault(record["jobId"], []).append(record)
    return found


@pytest.mark.docker
@pytest.mark.slow
async def test_a_busy_host_leaves_shared_jobs_to_a_host_that_can_start_them(
    tmp_path: Path, valkey_url: str, job_image: str, queues: dict[str, Queue]
) -> None:
    busy_env = env(tmp_path, valkey_url, job_image, "busy", PI_CONCURRENCY="1")
    idle_env = env(tmp_path, valkey_url, job_image, None, PI_CONCURRENCY="1")
    async with running_worker(settings_of(busy_env)) as busy, running_worker(settings_of(idle_env, "plain")) as idle:
        await queues[BUSY].add("github", forge_job(1, trigger={"demoSleep": 6}), {"jobId": "long"})
        while "long" not in busy.worker.running:
            await asyncio.sleep(0.05)
        with most_held([busy, idle]) as most:
            for number in range(2, 6):
                await queues[SHARED].add("github", forge_job(number), {"jobId": f"quick-{number}"})
                await finished_job(queues[SHARED], f"quick-{number}")
        await finished_job(queues[BUSY], "long")
    ran = records_by_job(busy, idle)
    assert {job_id: [r["host"] for r in runs] for job_id, runs in ran.items() if job_id != "long"} == {
        f"quick-{number}": ["plain"] for number in range(2, 6)
    }  # never taken by the host whose only slot was busy
    assert most == {"busy": 1, "plain": 1}  # no host ever held more jobs than its slots
    long_end = datetime.fromisoformat(ran["long"][0]["endedAt"])
    assert all(datetime.fromisoformat(ran[f"quick-{n}"][0]["endedAt"]) < long_end for n in range(2, 6))


@pytest.mark.docker
@pytest.mark.slow
async def test_a_host_serves_its_own_backlog_before_shared_work(
    tmp_path: Path, valkey_url: str, job_image: str, queues: dict[str, Queue]
) -> None:
    solo_env = env(tmp_path, valkey_url, job_image, "busy", PI_CONCURRENCY="1")
    async with running_worker(settings_of(solo_env)) as solo:
        await queues[BUSY].add("github", forge_job(1, trigger={"demoSleep": 2}), {"jobId": "first"})
        while "first" not in solo.worker.running:
            await asyncio.sleep(0.05)
        await queues[SHARED].add("github", forge_job(2), {"jobId": "shared-older"})
        await queues[BUSY].add("github", forge_job(3), {"jobId": "own-newer"})
        await finished_job(queues[SHARED], "shared-older")
        await finished_job(queues[BUSY], "own-newer")
    ran = records_by_job(solo)
    started = {job_id: datetime.fromisoformat(runs[0]["startedAt"]) for job_id, runs in ran.items()}
    assert started["first"] < started["own-newer"] < started["shared-older"]
    assert ran["own-newer"][0]["queue"] == BUSY and ran["shared-older"][0]["queue"] == SHARED


@pytest.mark.docker
@pytest.mark.slow
async def test_an_idle_capable_host_steals_a_busy_peers_backlog_and_each_job_runs_once(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    busy_env = env(tmp_path, valkey_url, job_image, "busy", PI_CONCURRENCY="1")
    idle_env = env(tmp_path, valkey_url, job_image, "idle", PI_CONCURRENCY="2")
    async with running_worker(settings_of(busy_env)) as busy, running_worker(settings_of(idle_env)) as idle:
        jobs = [f"prod-{number}" for number in range(5)]
        with most_held([busy, idle]) as most:
            for number, job_id in enumerate(jobs):  # routed to busy, as the hash might have it
                data = forge_job(number, secretsProfile="prod", trigger={"demoSleep": 3})
                await queues[BUSY].add("github", data, {"jobId": job_id})
            outcomes = []
            for job_id in jobs:
                for queue in (BUSY, IDLE):
                    if await queues[queue].getJobState(job_id) != "unknown":
                        done = await finished_job(queues[queue], job_id)
                        outcomes.append((done.returnvalue or {}).get("outcome") or f"failed: {done.failedReason}")
                        break
        assert outcomes == ["completed"] * len(jobs), (outcomes, busy.events.names(), idle.events.names())
        assert most["busy"] <= 1 and most["idle"] <= 2
        ran = records_by_job(busy, idle)
        assert sorted(ran) == jobs and all(len(runs) == 1 for runs in ran.values())  # once each, none lost
        stolen = {job_id for job_id, [run] in ran.items() if run["host"] == "idle"}
        assert len(stolen) >= 2, ran
        for job_id in stolen:
            assert ran[job_id][0]["queue"] == IDLE and ran[job_id][0]["routedTo"] == BUSY
            [attempt] = await read_attempts(client, record_stem(job_id))
            assert attempt["host"] == "idle" and attempt["routedTo"] == BUSY  # the job's history says so
        assert all(runs[0]["routedTo"] is None for job_id, runs in ran.items() if job_id not in stolen)
        assert idle.worker.pickup.steals == len(stolen) == idle.events.names().count("job_stolen")
        assert busy.worker.pickup.steals == 0


@pytest.mark.docker
@pytest.mark.slow
async def test_with_stealing_off_an_idle_capable_host_only_counts_its_idle_slots(
    tmp_path: Path, valkey_url: str, job_image: str, queues: dict[str, Queue]
) -> None:
    busy_env = env(tmp_path, valkey_url, job_image, "busy", PI_CONCURRENCY="1")
    idle_env = env(tmp_path, valkey_url, job_image, "idle", PI_CONCURRENCY="2", PI_STEAL="0")
    async with running_worker(settings_of(busy_env)) as busy, running_worker(settings_of(idle_env)) as idle:
        started = time.monotonic()
        for number in range(4):
            data = forge_job(number, secretsProfile="prod", trigger={"demoSleep": 2})
            await queues[BUSY].add("github", data, {"jobId": f"prod-{number}"})
        for number in range(4):
            await finished_job(queues[BUSY], f"prod-{number}")
        idle_capable_s, elapsed_s = idle.worker.pickup.idle_capable_s, time.monotonic() - started
        assert {run["host"] for runs in records_by_job(busy, idle).values() for run in runs} == {"busy"}
        assert idle.worker.pickup.steals == 0
        # what it could have run, counted for the metrics in slot-seconds: some, and never more than its two slots
        # for as long as the work waited (a count in milliseconds would be a thousand times that)
        assert 0 < idle_capable_s <= 2 * elapsed_s, (idle_capable_s, elapsed_s)


@pytest.mark.docker
@pytest.mark.slow
async def test_a_job_whose_container_started_cannot_be_stolen(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, queues: dict[str, Queue]
) -> None:
    busy_env = env(tmp_path, valkey_url, job_image, "busy", PI_CONCURRENCY="1")
    async with running_worker(settings_of(busy_env)) as busy:
        data = forge_job(1, secretsProfile="prod", trigger={"demoSleep": 2})
        await queues[BUSY].add("github", data, {"jobId": "running"})
        while "running" not in busy.worker.running:
            await asyncio.sleep(0.05)
        assert await JobMover(client).move(BUSY, IDLE, "running", "", steal=True) == NOT_WAITING
        assert (await finished_job(queues[BUSY], "running")).returnvalue["outcome"] == "completed"
    assert [run["host"] for run in records_by_job(busy)["running"]] == ["busy"]
    assert await queues[IDLE].getJobState("running") == "unknown"


async def test_a_marker_woken_on_but_not_acted_on_goes_back_for_the_next_host(
    valkey_url: str, client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    """Host X (one slot) blocks first, so the shared queue's marker wakes it; it serves its own backlog first, fills
    its slot, and must hand the marker on: host Y, idle on the shared queue with a minute-long poll, takes the job."""
    release = asyncio.Event()
    taken: dict[str, str] = {}

    def consumer(queue: str, host: str) -> GuardedConsumer:
        async def hold(job: Any, token: str) -> dict[str, object]:
            taken[str(job.id)] = host
            await release.wait()
            return {}

        options = {"connection": valkey_url, "autorun": False, "drainDelay": 60, "lockDuration": 30_000}
        return GuardedConsumer(queue, hold, dict(options, stalledInterval=30_000), lambda *_: None)

    x = Pickup([consumer(BUSY, "x"), consumer(SHARED, "x")], concurrency=1, idle_poll_s=60)
    y = Pickup([consumer(SHARED, "y")], concurrency=1, idle_poll_s=60)
    runs = [asyncio.ensure_future(x.run())]
    try:
        await blocked_on_markers(client, 1)
        runs.append(asyncio.ensure_future(y.run()))
        await blocked_on_markers(client, 2)
        await client.lpush(bull_key(BUSY, "wait"), "own")  # X's backlog, its marker long since taken
        await client.hset(bull_key(BUSY, "own"), mapping={"name": "github", "data": "{}", "opts": "{}", "timestamp": 1})
        await queues[SHARED].add("github", forge_job(1), {"jobId": "shared"})
        async with asyncio.timeout(10):  # far below Y's minute-long poll: only a handed-on marker wakes it in time
            while len(taken) < 2:
                await asyncio.sleep(0.02)
        assert taken == {"own": "x", "shared": "y"}
    finally:  # as the worker stops: every consumer paused (its jobs done), then closed
        release.set()
        consumers = [bull for pickup in (x, y) for bull in pickup.consumers]
        await asyncio.gather(*(bull.pause() for bull in consumers))
        for bull in consumers:
            await bull.close()
        await asyncio.gather(*runs, return_exceptions=True)


async def blocked_on_markers(client: aioredis.Redis, count: int) -> None:
    """Until `count` connections are blocked in a BZPOPMIN."""
    async with asyncio.timeout(10):
        while sum(1 for c in await client.client_list() if c.get("cmd") == "bzpopmin") < count:
            await asyncio.sleep(0.02)


async def test_a_consumer_closed_while_the_pickup_looks_at_peers_is_not_reopened_by_a_late_pop(
    valkey_url: str, client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    """The worker stops while its pickup reads its peers' backlogs: the pause and the close find no pop to cancel.
    The pickup must then end without a blocking pop, which would reopen the closed connection for a minute-long
    poll and leave it to the collector."""
    looking, go_on = asyncio.Event(), asyncio.Event()

    class LookingElsewhere(Stealer):
        async def find(self) -> list[Waiting]:
            looking.set()
            await go_on.wait()
            return await super().find()

    options = {"connection": valkey_url, "autorun": False, "drainDelay": 60, "lockDuration": 30_000}
    bull = GuardedConsumer(IDLE, lambda *_: {}, dict(options, stalledInterval=30_000), lambda *_: None)
    stealer = LookingElsewhere(client, "idle", 500, frozenset(), lambda _data: False, lambda: int(time.time() * 1000))
    run = asyncio.ensure_future(Pickup([bull], concurrency=1, idle_poll_s=60, stealer=stealer).run())
    try:
        async with asyncio.timeout(10):
            await looking.wait()
        await bull.pause()
        await bull.close()
        go_on.set()
        async with asyncio.timeout(10):  # far below the poll: a pop sent now would hold the pickup a minute
            await run
        assert bull.backend.blocking_connection.conn.connection is None  # nothing reopened the closed client
        assert bull.backend.connection.conn.connection is None
    finally:
        go_on.set()
        run.cancel()
        await bull.drop_connections()
