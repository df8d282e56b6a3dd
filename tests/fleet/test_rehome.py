"""Re-homing against a real redis-server and real BullMQ: a silent host's jobs move, once, whole, atomically."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue
from bullmq import Worker as BullWorker

from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.keys import REHOME_LEASE, REHOME_SILENT, bull_key, rehome_since_key
from pi_dispatch.fleet.enqueue import forge_job_options
from pi_dispatch.fleet.hosts import silent_since
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.jobs import forge_job
from tests.support.helpers import run_cli
from tests.support.workers import open_queues, registered_hosts

pytestmark = [pytest.mark.redis]
DEAD, ALIVE, PLAIN = "pi-jobs@dead", "pi-jobs@alive", "pi-jobs@plain"
AFTER_MS = 10_000


def test_silence_starts_at_the_last_beat_or_when_first_noticed() -> None:
    now = 1_000_000
    assert silent_since({"name": "h", "staleMs": 1_000}, None, now) is None  # live
    assert silent_since({"name": "h", "staleMs": 60_000}, None, now) == now - 60_000  # its last beat
    assert silent_since({"name": "h", "staleMs": 60_000}, now - 90_000, now) == now - 90_000  # noticed earlier
    assert silent_since(None, None, now) == now  # no row, never noticed: from now on
    assert silent_since({"name": "h"}, None, now) == now  # undatable: not evidence of life, nor of death


@pytest.fixture
async def queues(valkey_url: str) -> AsyncIterator[dict[str, Queue]]:
    async with open_queues(valkey_url, (DEAD, ALIVE, PLAIN, "pi-jobs")) as opened:
        yield opened


@pytest.fixture
async def fleet(client: aioredis.Redis) -> AsyncIterator[None]:
    """Two live hosts: `alive` serves prod, `plain` does not (so prod jobs are routed, not shared)."""
    async with registered_hosts(client, {"alive": "s:prod", "plain": ""}):
        yield


async def sweep(client: aioredis.Redis, url: str, log: Recorder | None = None) -> int:
    """One sweep by a mover of its own, closed after (it opens BullMQ queues for the stalled check)."""
    mover = Rehomer(client, StoreAddress(url), AFTER_MS, 2_000, log or Recorder())
    try:
        return await mover.sweep()
    finally:
        await mover.close()


async def add(queue: Queue, number: int, **options: Any) -> str:
    data = forge_job(number, **options.pop("fields", {}))
    job = await queue.add("github", data, {**forge_job_options("github", data), **options})
    return str(job.id)


async def where(client: aioredis.Redis, job_id: str) -> list[tuple[str, str]]:
    """Every (queue, state) the job id stands in, among the queues of these tests."""
    found = []
    for queue in (DEAD, ALIVE, PLAIN, "pi-jobs"):
        if await client.lpos(bull_key(queue, "wait"), job_id) is not None:
            found.append((queue, "wait"))
        for state in ("delayed", "prioritized"):
            if await client.zscore(bull_key(queue, state), job_id) is not None:
                found.append((queue, state))
    return found


async def silent_for(client: aioredis.Redis, host: str, ms: int) -> None:
    await client.set(rehome_since_key(host), str(int(time.time() * 1000) - ms))


async def test_a_silent_hosts_jobs_move_whole_to_where_the_router_sends_them(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    waiting = await add(queues[DEAD], 1, fields={"secretsProfile": "prod"})
    held = await add(queues[DEAD], 2, fields={"secretsProfile": "prod", "waitHold": {"checks": 3}}, delay=600_000)
    urgent = await add(queues[DEAD], 3, fields={"secretsProfile": "prod"}, priority=5)
    anywhere = await add(queues[DEAD], 4)
    await client.hincrby(bull_key(DEAD, waiting), "atm", 1)  # an attempt already made, as a retried job has
    before = {job_id: await client.hgetall(bull_key(DEAD, job_id)) for job_id in (waiting, held, urgent, anywhere)}
    delayed_score = await client.zscore(bull_key(DEAD, "delayed"), held)
    await silent_for(client, "dead", AFTER_MS + 1_000)
    log = Recorder()
    assert await sweep(client, valkey_url, log) == 4

    assert await where(client, waiting) == [(ALIVE, "wait")]
    assert await where(client, held) == [(ALIVE, "delayed")]
    assert await where(client, urgent) == [(ALIVE, "prioritized")]
    assert await where(client, anywhere) == [("pi-jobs", "wait")]
    assert await client.zscore(bull_key(ALIVE, "delayed"), held) == delayed_score  # what is left of the hold
    for job_id, fields in before.items():
        target = "pi-jobs" if job_id == anywhere else ALIVE
        assert await client.hgetall(bull_key(target, job_id)) == fields  # id, data, attempts, options
        assert not await client.exists(bull_key(DEAD, job_id))
    moved = [fields for event, fields in log.events if event == "job_rehomed"]
    assert {(m["jobId"], m["from"], m["to"]) for m in moved} >= {(waiting, DEAD, ALIVE), (anywhere, DEAD, "pi-jobs")}

    # an ordinary job on an ordinary queue: a plain BullMQ worker takes it with its attempts intact
    seen: list[tuple[str, int]] = []

    async def take(job: Any, token: str) -> str:
        seen.append((str(job.id), job.attemptsMade))
        return "done"

    consumer = BullWorker(ALIVE, take, {"connection": valkey_url, "autorun": False})
    running = asyncio.ensure_future(consumer.run())
    try:
        deadline = time.monotonic() + 60
        while not any(job_id == waiting for job_id, _ in seen) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    finally:
        await consumer.close()
        await running
    assert (waiting, 1) in seen


async def test_a_silent_hosts_cron_job_waits_for_it(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    local = {
        "kind": "local",
        "folder": "/srv/app",
        "flow": "deps",
        "task": "t",
        "trigger": {"id": "n", "pattern": "0 3 * * *"},
    }
    scheduled = await queues[DEAD].add("local", local, {"jobId": "repeat:n:1796094000000", "delay": 600_000})
    forge = await add(queues[DEAD], 6)
    await silent_for(client, "dead", AFTER_MS + 1_000)
    assert await sweep(client, valkey_url) == 1
    assert await where(client, str(scheduled.id)) == [(DEAD, "delayed")]  # its folder and scheduler are there
    assert await where(client, forge) == [("pi-jobs", "wait")]


async def hmget_calls(client: aioredis.Redis) -> int:
    """How many HMGETs the store has served: a move attempt reads each job it looks at with one."""
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_hmget", {}).get("calls", 0))


async def test_a_silent_host_left_with_only_its_cron_is_looked_at_again_only_when_its_queue_changes(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    local = {"kind": "local", "folder": "/srv/app", "flow": "deps", "task": "t", "trigger": {"id": "n"}}
    scheduled = await queues[DEAD].add("local", local, {"jobId": "repeat:n:1796094000000", "delay": 600_000})
    await silent_for(client, "dead", AFTER_MS + 1_000)
    sweeper = Rehomer(client, StoreAddress(valkey_url), AFTER_MS, 2_000)
    try:
        before = await hmget_calls(client)
        assert await sweeper.sweep() == 0
        looked = await hmget_calls(client)
        assert looked > before  # the first sweep reads the job to find it bound to its host
        job_key = bull_key(DEAD, str(scheduled.id))
        await asyncio.sleep(1.5)  # the store's access clock ticks in seconds: the job now reads as idle a while
        idle = await client.object("idletime", job_key)
        assert await sweeper.sweep() == 0
        assert await client.object("idletime", job_key) >= idle >= 1  # unchanged since: not read again
        forge = await add(queues[DEAD], 7)  # anything new on that queue is looked at on the next sweep
        assert await sweeper.sweep() == 1
        assert await where(client, forge) == [("pi-jobs", "wait")]
        assert await where(client, str(scheduled.id)) == [(DEAD, "delayed")]
    finally:
        await sweeper.close()


async def test_a_sweep_of_many_silent_hosts_holds_one_connection_for_bullmqs_stalled_check(
    client: aioredis.Redis, valkey_url: str, fleet: None
) -> None:
    local = {"kind": "local", "folder": "/srv/app", "flow": "deps", "task": "t", "trigger": {"id": "n"}}
    hosts = [f"gone{number:02d}" for number in range(30)]
    async with open_queues(valkey_url, [f"pi-jobs@{host}" for host in hosts]) as queues:
        for queue in queues.values():
            await queue.add("local", local, {"jobId": "repeat:n:1"})
    for host in hosts:
        await silent_for(client, host, AFTER_MS + 1_000)
    await client.zadd(REHOME_SILENT, dict.fromkeys(hosts, int(time.time() * 1000)))
    sweeper = Rehomer(client, StoreAddress(valkey_url), AFTER_MS, 2_000)
    try:
        before = len(await client.client_list())
        assert await sweeper.sweep() == 0
        assert len(await client.client_list()) <= before + 1  # not one per silent host's queue
    finally:
        await sweeper.close()


async def test_a_host_silent_for_less_than_the_threshold_keeps_its_queue(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    job_id = await add(queues[DEAD], 5, fields={"secretsProfile": "prod"})
    await silent_for(client, "dead", AFTER_MS // 2)
    assert await sweep(client, valkey_url) == 0
    assert await where(client, job_id) == [(DEAD, "wait")]
    # a host that has a live row again is not silent, and the note of its silence goes
    back = HostRegistry(client, "dead")
    await back.start({"routes": "true", "caps": "s:prod"})
    try:
        await silent_for(client, "dead", AFTER_MS * 10)
        assert await sweep(client, valkey_url) == 0
        assert await where(client, job_id) == [(DEAD, "wait")]
        assert not await client.exists(rehome_since_key("dead"))
    finally:
        await back.close()


async def test_one_mover_at_a_time_and_never_over_a_taken_id(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    job_id = await add(queues[DEAD], 6, fields={"secretsProfile": "prod"})
    await silent_for(client, "dead", AFTER_MS * 2)
    await client.set(REHOME_LEASE, "another-worker", px=30_000)
    assert await sweep(client, valkey_url) == 0  # the lease is held elsewhere
    assert await where(client, job_id) == [(DEAD, "wait")]
    await client.delete(REHOME_LEASE)
    await client.hset(bull_key(ALIVE, job_id), mapping={"name": "an older job under the same id"})
    log = Recorder()
    assert await sweep(client, valkey_url, log) == 0
    assert await where(client, job_id) == [(DEAD, "wait")]  # left where it was, never overwritten
    assert await client.hget(bull_key(ALIVE, job_id), "name") == b"an older job under the same id"
    assert any(event == "job_rehome_blocked" for event, _ in log.events)


async def test_one_sweeper_keeps_the_lease_for_its_interval_and_the_next_takes_over_when_it_ends(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    job_id = await add(queues[DEAD], 11, fields={"secretsProfile": "prod"})
    first, second = (
        Rehomer(client, StoreAddress(valkey_url), AFTER_MS, 2_000),
        Rehomer(client, StoreAddress(valkey_url), AFTER_MS, 2_000),
    )
    try:
        await first.sweep(hold=True)  # marks `dead` silent from now; nothing is due yet
        held_ms = await client.pttl(REHOME_LEASE)
        assert 0 < held_ms <= first.interval_s * 1000  # kept: the rest of the fleet does not sweep again meanwhile
        await silent_for(client, "dead", AFTER_MS * 2)
        assert await second.sweep(hold=True) == 0 and await where(client, job_id) == [(DEAD, "wait")]
        await client.pexpire(REHOME_LEASE, 1)  # the interval is over (or the sweeper died mid-sweep)
        await asyncio.sleep(0.01)
        assert await second.sweep(hold=True) == 1 and await where(client, job_id) == [(ALIVE, "wait")]
    finally:
        await first.close()
        await second.close()


MOVER = """
import asyncio, sys
from pi_dispatch.fleet.rehome import Rehomer
from pi_dispatch.infra.valkey import connect
from pi_dispatch.infra.store import StoreAddress
async def main():
    client = connect(sys.argv[1])
    print("ready", flush=True)
    await Rehomer(client, StoreAddress(sys.argv[1]), 10_000, 2_000).sweep()
    print("done", flush=True)
asyncio.run(main())
"""


@pytest.mark.slow
async def test_a_mover_killed_mid_sweep_loses_and_doubles_nothing(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None, tmp_path: Path
) -> None:
    ids = [await add(queues[DEAD], 100 + n, fields={"secretsProfile": "prod"} if n % 2 else {}) for n in range(400)]
    ids += [await add(queues[DEAD], 600 + n, delay=300_000) for n in range(100)]
    await silent_for(client, "dead", AFTER_MS * 2)
    script = tmp_path / "mover.py"
    script.write_text(MOVER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent.parent)}
    kills = 0
    for delay in (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8):
        await client.delete(REHOME_LEASE)  # a killed mover's lease would otherwise hold for its TTL
        with subprocess.Popen([sys.executable, str(script), valkey_url], env=env, stdout=subprocess.PIPE) as mover:
            assert mover.stdout is not None and mover.stdout.readline().strip() == b"ready"
            await asyncio.sleep(delay)
            if mover.poll() is None:
                mover.send_signal(signal.SIGKILL)
                kills += 1
        for job_id in ids:
            assert len(await where(client, job_id)) == 1, job_id  # never on two queues, never on none
    await client.delete(REHOME_LEASE)
    await sweep(client, valkey_url)
    places = {job_id: await where(client, job_id) for job_id in ids}
    assert all(len(found) == 1 and found[0][0] != DEAD for found in places.values())
    assert kills >= 1  # at least one mover died mid-sweep, or the test proved nothing


@pytest.mark.slow
async def test_a_silent_hosts_active_job_goes_through_bullmqs_stalled_recovery(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None, tmp_path: Path
) -> None:
    job_id = await add(queues[DEAD], 7, fields={"secretsProfile": "prod"})
    taker = tmp_path / "taker.py"
    taker.write_text(
        "import asyncio, sys\n"
        "from bullmq import Worker\n"
        "async def hang(job, token):\n"
        "    print('taken', flush=True)\n"
        "    await asyncio.sleep(3600)\n"
        "async def main():\n"
        "    worker = Worker(sys.argv[2], hang, {'connection': sys.argv[1], 'lockDuration': 1000, "
        "'stalledInterval': 600000})\n"
        "    await worker.run()\n"
        "asyncio.run(main())\n"
    )
    with subprocess.Popen([sys.executable, str(taker), valkey_url, DEAD], stdout=subprocess.PIPE) as dying:
        try:
            assert dying.stdout is not None and dying.stdout.readline().strip() == b"taken"
        finally:
            dying.send_signal(signal.SIGKILL)
    assert await client.lpos(bull_key(DEAD, "active"), job_id) is not None  # active, its worker dead
    await silent_for(client, "dead", AFTER_MS * 2)
    mover = Rehomer(client, StoreAddress(valkey_url), AFTER_MS, 1_000, Recorder())
    deadline = time.monotonic() + 90
    while await where(client, job_id) != [(ALIVE, "wait")] and time.monotonic() < deadline:
        await mover.sweep()  # the first sweep marks it, one a stalled interval later recovers and moves it
        await asyncio.sleep(0.5)
    await mover.close()
    assert await where(client, job_id) == [(ALIVE, "wait")]
    assert json.loads(await client.hget(bull_key(ALIVE, job_id), "data"))["target"]["number"] == 7


async def test_hosts_and_the_live_audit_say_which_queue_waits_to_move_and_when(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None, tmp_path: Path
) -> None:
    await add(queues[DEAD], 8, fields={"secretsProfile": "prod"})
    await add(queues[DEAD], 9, delay=60_000)
    silent_ms = int(time.time() * 1000) - 30_000
    await client.set(rehome_since_key("dead"), str(silent_ms))
    await client.zadd(REHOME_SILENT, {"dead": silent_ms})  # as its leaving, a reader's pruning or a sweep left it
    listed = await asyncio.to_thread(run_cli, "hosts", "--valkey-url", valkey_url, "--json", "--queues")
    dead = next(queue for queue in json.loads(listed.stdout) if queue["queue"] == DEAD)
    assert dead["counts"] == {"waiting": 1, "delayed": 1, "prioritized": 0, "active": 0, "failed": 0}
    assert dead["silent_since_ms"] == silent_ms and dead["rehomeAt"] == silent_ms + dead["rehomeAfterMs"]
    table = await asyncio.to_thread(run_cli, "hosts", "--valkey-url", valkey_url)
    assert "pi-jobs@dead" in table.stdout and "1 waiting, 1 delayed" in table.stdout and "silent since" in table.stdout
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    pi_dispatch_workers:\n      hosts:\n"
        "        dead: {pi_dispatch_worker_name: dead, pi_dispatch_worker_rehome_after_ms: 60000}\n"
        "        alive: {pi_dispatch_worker_name: alive, pi_dispatch_worker_secret_profiles: {prod: /opt/r}}\n"
    )
    audited = await asyncio.to_thread(
        run_cli, "audit", "-i", str(inventory), "--live", "--valkey-url", valkey_url, "--json"
    )
    finding = next(f for f in json.loads(audited.stdout)["findings"] if f["code"] == "queue-silent-host")
    assert finding["hosts"] == ["dead"] and "1 waiting, 1 delayed" in finding["message"]
    assert iso_string(silent_ms + 60_000) in finding["message"]  # the host's own threshold, from the inventory


async def test_a_lease_granted_before_a_failover_moves_nothing_after_it(
    client: aioredis.Redis, valkey_url: str, queues: dict[str, Queue], fleet: None
) -> None:
    job_id = await add(queues[DEAD], 1, fields={"secretsProfile": "prod"})
    await silent_for(client, "dead", AFTER_MS + 1_000)
    log = Recorder()
    mover = Rehomer(client, StoreAddress(valkey_url), AFTER_MS, 2_000, log)
    try:
        # the lease's epoch, as a store that has since failed over would differ from it: the sweep stands down
        assert await mover._sweep(epoch="the-epoch-of-a-primary-since-replaced") == 0
        assert [fields["reason"] for event, fields in log.events if event == "rehome_lease_untrusted"] == [
            "the store failed over since the lease was granted"
        ]
        assert await where(client, job_id) == [(DEAD, "wait")]
        assert await mover.sweep() == 1  # a lease granted now, in this epoch, moves it
        assert await where(client, job_id) == [(ALIVE, "wait")]
    finally:
        await mover.close()
