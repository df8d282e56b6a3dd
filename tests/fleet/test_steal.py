"""Work stealing against a real redis-server and real BullMQ: a waiting job moves once, whole, to one stealer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from bullmq import Queue
from bullmq import Worker as BullWorker

from pi_dispatch.core.keys import STEAL_OFFERS, bull_key
from pi_dispatch.fleet.control import Drain, request_drain
from pi_dispatch.fleet.moves import NOT_WAITING, ROUTED_FIELD, STOLEN_ALREADY, JobMover
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.fleet.steal import Stealer, offer, read_waiting
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import forge_job
from tests.support.workers import CEILING_S, open_queues

pytestmark = [pytest.mark.redis]
BUSY, IDLE, THIRD = "pi-jobs@busy", "pi-jobs@idle", "pi-jobs@third"


@pytest.fixture
async def queues(valkey_url: str, client: aioredis.Redis) -> AsyncIterator[dict[str, Queue]]:
    """The three hosts' queues, and the busy and third hosts' rows, live with `s:prod` (a steal reads its peers')."""
    peers = [HostRegistry(client, name) for name in ("busy", "third")]
    for peer in peers:
        await peer.start({"routes": "true", "caps": "s:prod"})
    async with open_queues(valkey_url, (BUSY, IDLE, THIRD)) as opened:
        yield opened
    for peer in peers:
        await peer.close()


def stealer(client: aioredis.Redis, name: str, *, after_ms: int = 0) -> Stealer:
    """A stealer serving `s:prod` only."""
    from pi_dispatch.core.capabilities import job_needs

    def refuses(data: object) -> bool:
        return not {"s:prod"}.issuperset(job_needs(data))

    return Stealer(client, name, after_ms, frozenset({"s:prod"}), refuses, wall_ms)


async def where(client: aioredis.Redis, job_id: str) -> list[str]:
    """Every queue whose wait list or job hash holds the job."""
    found = []
    for queue in (BUSY, IDLE, THIRD):
        if await client.exists(bull_key(queue, job_id)) or job_id.encode() in await client.lrange(
            bull_key(queue, "wait"), 0, -1
        ):
            found.append(queue)
    return found


async def test_a_backlog_is_offered_while_it_waits_and_withdrawn_once_empty(
    client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    assert await offer(client, BUSY, 1_000) == 0
    assert await client.zscore(STEAL_OFFERS, BUSY) is None
    await queues[BUSY].add("github", forge_job(1), {"jobId": "j1"})
    await queues[BUSY].add("github", forge_job(2), {"jobId": "j2"})
    assert await offer(client, BUSY, 1_000) == 2
    assert await offer(client, BUSY, 5_000) == 2
    assert await client.zscore(STEAL_OFFERS, BUSY) == 1_000  # since the backlog was first seen
    await client.delete(bull_key(BUSY, "wait"))
    assert await offer(client, BUSY, 9_000) == 0
    assert await client.zscore(STEAL_OFFERS, BUSY) is None


async def test_a_steal_takes_the_oldest_job_it_serves_once_and_says_where_it_was_routed(
    valkey_url: str, client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    await queues[BUSY].add("github", forge_job(1, secretsProfile="ops"), {"jobId": "needs-ops"})
    await queues[BUSY].add("github", forge_job(2, secretsProfile="prod"), {"jobId": "prod-old"})
    await queues[BUSY].add("github", forge_job(3, secretsProfile="prod"), {"jobId": "prod-new"})
    await queues[BUSY].add("cron", {"kind": "local", "command": "x"}, {"jobId": "local-one"})
    await offer(client, BUSY, wall_ms() - 1)
    idle = stealer(client, "idle")
    found = await idle.find()
    assert [job.job_id for job in found] == ["prod-old", "prod-new"]  # never one it would refuse, nor a local job
    assert await idle.take(found[0])
    assert await where(client, "prod-old") == [IDLE]
    assert (await client.lrange(bull_key(IDLE, "wait"), -1, -1)) == [b"prod-old"]  # next to be taken there
    assert await client.hget(bull_key(IDLE, "prod-old"), ROUTED_FIELD) == BUSY.encode()
    # once per wait: a third host cannot move it on before it has been taken
    mover = JobMover(client)
    assert await mover.move(IDLE, THIRD, "prod-old", "", steal=True) == STOLEN_ALREADY
    assert await where(client, "prod-old") == [IDLE]
    # taken, it may move again in a later wait
    worker = BullWorker(IDLE, None, {"connection": valkey_url})
    try:
        taken = await worker.moveToActive("tok")
        assert taken is not None and taken.id == "prod-old"
        await client.lrem(bull_key(IDLE, "active"), 0, "prod-old")
        await client.rpush(bull_key(IDLE, "wait"), "prod-old")
        assert await mover.move(IDLE, THIRD, "prod-old", "", steal=True) == "wait"
        assert await client.hget(bull_key(THIRD, "prod-old"), ROUTED_FIELD) == BUSY.encode()  # the router's choice
    finally:
        await worker.close()


async def test_a_job_its_host_has_taken_or_holds_is_never_stolen(
    valkey_url: str, client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    await queues[BUSY].add("github", forge_job(1, secretsProfile="prod"), {"jobId": "running"})
    await queues[BUSY].add("github", forge_job(2, secretsProfile="prod"), {"jobId": "held", "delay": 60_000})
    worker = BullWorker(BUSY, None, {"connection": valkey_url})
    try:
        assert (await worker.moveToActive("tok")).id == "running"
        mover = JobMover(client)
        assert await mover.move(BUSY, IDLE, "running", "", steal=True) == NOT_WAITING
        assert await mover.move(BUSY, IDLE, "held", "", steal=True) == NOT_WAITING
        assert await client.lrange(bull_key(BUSY, "active"), 0, -1) == [b"running"]
        assert await where(client, "running") == [BUSY] and await where(client, "held") == [BUSY]
    finally:
        await worker.close()


async def test_two_hosts_stealing_at_once_move_each_job_once(
    valkey_url: str, client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    jobs = [f"race-{number}" for number in range(60)]
    for number, job_id in enumerate(jobs):
        await queues[BUSY].add("github", forge_job(number, secretsProfile="prod"), {"jobId": job_id})
    first, second = connect(valkey_url), connect(valkey_url)
    try:
        # a race of 120 moves opening their connections at once: bounded by a ceiling only a hang reaches, not by the
        # product's per-call deadline, which a loaded CI machine can pass while connecting
        movers = (JobMover(first, timeout_s=CEILING_S), JobMover(second, timeout_s=CEILING_S))
        results = await asyncio.gather(
            *(mover.move(BUSY, target, job_id, "", steal=True) for job_id in jobs
              for mover, target in zip(movers, (IDLE, THIRD), strict=True))
        )  # fmt: skip
    finally:
        await first.aclose()
        await second.aclose()
    moved = [result for result in results if isinstance(result, str)]
    assert len(moved) == len(jobs)  # each job moved by exactly one of the two
    for job_id in jobs:
        assert len(await where(client, job_id)) == 1, job_id
    counts = [await client.llen(bull_key(queue, "wait")) for queue in (BUSY, IDLE, THIRD)]
    assert counts[0] == 0 and counts[1] + counts[2] == len(jobs)


async def test_a_steal_waits_for_the_delay_and_only_live_peers_are_offered(
    client: aioredis.Redis, queues: dict[str, Queue]
) -> None:
    await queues[BUSY].add("github", forge_job(1, secretsProfile="prod"), {"jobId": "fresh"})
    await offer(client, BUSY, wall_ms() - 1)
    patient = stealer(client, "idle", after_ms=60_000)
    [fresh] = await patient.find()
    assert not patient.stealable(fresh)
    idle = Stealer(client, "idle", 0, frozenset({"s:prod"}), lambda _: False, wall_ms)

    async def busy_row(caps: str, beat_ms: int) -> None:  # the offering peer's own row, as its beat writes it
        await client.delete("host:h:busy")
        await client.hset(
            "host:h:busy", mapping={"name": "busy", "beatAt": str(beat_ms), "routes": "true", "caps": caps}
        )

    await client.delete("host:h:busy")
    assert await idle.find() == []  # no row at all: a host that never beat, or is gone
    await busy_row("s:prod", wall_ms() - 90_000)
    assert await idle.find() == []  # a silent peer's queue is re-homing's, not a steal's
    await busy_row("s:ops", wall_ms())
    assert await idle.find() == []  # a peer sharing no capability holds nothing this host could run
    await busy_row("s:prod", wall_ms())
    await request_drain(client, "busy", Drain(wall_ms()))
    assert await idle.find() == []  # a drained peer's waiting jobs move anyway, from the moment it is drained
    await request_drain(client, "busy", None)
    assert [job.job_id for job in await idle.find()] == ["fresh"]
    assert [job.job_id for job in await read_waiting(client, [BUSY])] == ["fresh"]
