"""Cron through BullMQ's own job schedulers, against a real redis-server and real BullMQ workers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue, Worker

from pi_dispatch.core.keys import HOST_SNAPSHOT, HOST_SNAPSHOT_LEASE, host_queue_name, host_row_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.triggers.file import Trigger, load_triggers, parse_triggers
from pi_dispatch.triggers.schedules import authored_cron, cron_fingerprint
from pi_dispatch.worker.after.history import read_records
from pi_dispatch.worker.host.cron import CronSchedules
from tests.support.workers import finished_job, running_worker, settings_of, worker_env

pytestmark = [pytest.mark.redis]

HOST_QUEUE = "pi-jobs@mini1"
ISSUE_ONCE = {
    "on": {"type": "issue", "action": ["closed"], "number": 40, "once": True},
    "run": {"kind": "github", "flow": "deploy"},
}


def entry(ident: str, pattern: str = "* * * * * *", **run: Any) -> dict[str, Any]:
    return {
        "on": {"type": "cron", "id": ident, "pattern": pattern},
        "run": {"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up", **run},
    }


def triggers(*entries: dict[str, Any]) -> list[Trigger]:
    return parse_triggers(json.dumps({"triggers": list(entries)}), "triggers.json")


async def no_peers_to_tell() -> bool:
    return True


def schedules(client: aioredis.Redis, url: str, found: list[Trigger] | None, **options: Any) -> CronSchedules:
    fields: dict[str, Any] = {
        "queue_name": HOST_QUEUE, "zone": "UTC", "me": "mini1", "shared": False, "publish": no_peers_to_tell
    }  # fmt: skip
    fields |= options
    return CronSchedules(client, StoreAddress(url), triggers=found, log=Recorder(), **fields)


@pytest.fixture
async def host_queue(valkey_url: str, client: aioredis.Redis) -> AsyncIterator[Queue]:
    queue = Queue(HOST_QUEUE, {"connection": valkey_url})
    try:
        yield queue
    finally:
        await queue.close()


async def scheduler_ids(queue: Queue) -> list[str]:
    return sorted(str(found["key"]) for found in await queue.getJobSchedulers(0, -1))


async def delayed_ids(client: aioredis.Redis, queue: str = HOST_QUEUE) -> list[str]:
    return sorted(member.decode() for member in await client.zrange(f"bull:{queue}:delayed", 0, -1))


async def test_an_entry_that_fires_every_second_puts_local_jobs_on_the_host_queue(
    valkey_url: str, client: aioredis.Redis, host_queue: Queue
) -> None:
    cron = schedules(client, valkey_url, triggers(entry("tick", maxTurns=3.0)))
    assert await cron.reconcile()
    taken: list[Any] = []

    async def take(job: Any, token: str) -> None:
        taken.append(job)

    consumer = Worker(HOST_QUEUE, take, {"connection": valkey_url, "autorun": False})
    running = asyncio.ensure_future(consumer.run())
    deadline = time.monotonic() + 60  # a ceiling for a hang, as every wait here
    while len(taken) < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await consumer.close()
    running.cancel()
    await cron.close()
    assert len(taken) >= 3, "the scheduler fired fewer than three times in 20 s"
    ids = [str(job.id) for job in taken]
    assert all(job_id.startswith("repeat:tick:") for job_id in ids)
    millis = [int(job_id.rsplit(":", 1)[1]) for job_id in ids]
    assert all(ms % 1000 == 0 for ms in millis)
    assert millis == sorted(set(millis))  # one job per instant, in order: none twice
    first = taken[0]
    assert first.name == "local"
    assert first.data == {
        "kind": "local",
        "folder": "/srv/app",
        "flow": "tidy",
        "task": "tidy up",
        "maxTurns": 3,
        "trigger": {"id": "tick", "pattern": "* * * * * *"},
    }
    assert first.opts["attempts"] == 2
    assert first.opts["backoff"] == {"type": "exponential", "delay": 60000}
    assert first.opts["repeat"]["tz"] == "UTC"
    assert cron.row_facts()["cronCount"] == "1"


async def test_a_reconcile_leaves_no_connection_open_behind_it(valkey_url: str, client: aioredis.Redis) -> None:
    async def connections() -> int:
        return len(await client.client_list())

    before = await connections()
    cron = schedules(client, valkey_url, triggers(entry("nightly", "0 3 * * *")))
    try:
        assert await cron.reconcile()
        # the Queue it reconciled through held a connection (and BullMQ's every script) for the worker's whole life
        assert await connections() == before
        assert await cron.reconcile()  # and a later reconcile opens one again
        assert await connections() == before
    finally:
        await cron.close()


async def test_reconcile_is_idempotent_and_removes_a_deleted_entry_with_its_pending_job(
    valkey_url: str, client: aioredis.Redis, host_queue: Queue
) -> None:
    cron = schedules(client, valkey_url, triggers(entry("nightly", "0 3 * * *"), entry("hourly", "0 * * * *")))
    assert await cron.reconcile()
    before = await delayed_ids(client)
    assert [job_id.rsplit(":", 1)[0] for job_id in before] == ["repeat:hourly", "repeat:nightly"]
    assert await cron.reconcile()
    assert await delayed_ids(client) == before  # an unchanged file changes nothing, duplicates nothing
    fingerprint = cron.fingerprint
    cron.changed(triggers(entry("nightly", "0 3 * * *")))
    deadline = time.monotonic() + 60
    while cron.pending and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert await scheduler_ids(host_queue) == ["nightly"]
    assert [job_id.rsplit(":", 1)[0] for job_id in await delayed_ids(client)] == ["repeat:nightly"]
    assert cron.fingerprint != fingerprint
    assert ("scheduler_removed", {"schedulerId": "hourly", "queue": HOST_QUEUE}) in cron.log.events  # type: ignore[attr-defined]
    await cron.close()


async def test_an_edited_pattern_replaces_the_pending_job(
    valkey_url: str, client: aioredis.Redis, host_queue: Queue
) -> None:
    cron = schedules(client, valkey_url, triggers(entry("nightly", "0 3 * * *")))
    assert await cron.reconcile()
    cron._take(triggers(entry("nightly", "0 4 * * *")))
    assert await cron.reconcile()
    (pending,) = await delayed_ids(client)
    assert time.gmtime(int(pending.rsplit(":", 1)[1]) / 1000).tm_hour == 4
    await cron.close()


async def test_a_named_host_without_a_file_removes_what_its_queue_still_holds(
    valkey_url: str, client: aioredis.Redis, host_queue: Queue
) -> None:
    armed = schedules(client, valkey_url, triggers(entry("nightly", "0 3 * * *")))
    assert await armed.reconcile()
    await armed.close()
    disabled = schedules(client, valkey_url, None)
    assert disabled.row_facts() == {"fpCron": "", "cronCount": "0"}
    assert await disabled.reconcile()
    await disabled.close()
    assert await scheduler_ids(host_queue) == []
    assert await delayed_ids(client) == []


async def test_a_nameless_host_without_a_file_leaves_the_shared_queue_alone(
    valkey_url: str, client: aioredis.Redis
) -> None:
    shared = {"queue_name": "pi-jobs", "me": "laptop", "shared": True}
    for found in (triggers(entry("nightly", "0 3 * * *")), None):
        cron = schedules(client, valkey_url, found, **shared)
        assert await cron.reconcile()
        await cron.close()
    assert [job_id.rsplit(":", 1)[0] for job_id in await delayed_ids(client, "pi-jobs")] == ["repeat:nightly"]


async def test_no_reconcile_while_live_hosts_disagree_about_the_zone(
    valkey_url: str, client: aioredis.Redis, host_queue: Queue
) -> None:
    peer = HostRegistry(client, "mini2")
    await peer.start({"tz": "Europe/Amsterdam", "routes": "true", "caps": ""})
    mine = HostRegistry(client, "mini1")
    cron = schedules(client, valkey_url, triggers(entry("nightly", "0 3 * * *")), publish=mine.publish)
    await mine.start(dict(cron.row_facts()) | {"tz": "UTC", "routes": "true", "caps": ""})
    assert not await cron.reconcile()
    assert cron.pending
    assert await scheduler_ids(host_queue) == []
    refused = [fields for event, fields in cron.log.events if event == "cron_reconcile_refused"]  # type: ignore[attr-defined]
    assert refused == [{"reason": "tz-disagreement", "zones": ["Europe/Amsterdam", "UTC"]}]
    await cron.retry()  # still refused; the retries read the fleet's snapshot, refreshed at most once a beat
    rows_read = (await client.info("commandstats")).get("cmdstat_hgetall", {}).get("calls", 0)
    await cron.retry()
    assert (await client.info("commandstats")).get("cmdstat_hgetall", {}).get("calls", 0) == rows_read
    assert cron.pending and len([event for event, _ in cron.log.events if event == "cron_reconcile_refused"]) == 3  # type: ignore[attr-defined]
    await peer.close()  # the disagreeing host leaves the fleet: the next retry after the snapshot's beat goes ahead
    await client.delete(HOST_SNAPSHOT, HOST_SNAPSHOT_LEASE)
    await cron.retry()
    assert not cron.pending
    assert await scheduler_ids(host_queue) == ["nightly"]
    await mine.close()
    await cron.close()


async def test_nameless_workers_refuse_to_prune_each_others_shared_schedulers(
    valkey_url: str, client: aioredis.Redis
) -> None:
    shared = {"queue_name": "pi-jobs", "shared": True}
    theirs = schedules(client, valkey_url, triggers(entry("backup", "0 2 * * *")), me="laptop-a", **shared)
    peer = HostRegistry(client, "laptop-a")
    await peer.start(dict(theirs.row_facts()) | {"tz": "UTC", "routes": "false", "caps": ""})
    assert await theirs.reconcile()
    ours = schedules(client, valkey_url, triggers(entry("nightly", "0 3 * * *")), me="laptop-b", **shared)
    assert not await ours.reconcile()
    refused = [fields for event, fields in ours.log.events if event == "cron_reconcile_refused"]  # type: ignore[attr-defined]
    assert refused[0]["reason"] == "cron-divergence"
    assert refused[0]["peers"] == ["laptop-a"]
    assert [job_id.rsplit(":", 1)[0] for job_id in await delayed_ids(client, "pi-jobs")] == ["repeat:backup"]
    await peer.close()
    await theirs.close()
    await ours.close()


async def test_a_pattern_the_parser_cannot_read_is_refused_and_the_schedulers_kept(
    valkey_url: str, client: aioredis.Redis, host_queue: Queue
) -> None:
    cron = schedules(client, valkey_url, triggers(entry("nightly", "0 3 * * *")))
    assert await cron.reconcile()
    fingerprint = cron.fingerprint
    cron.changed(triggers(entry("nightly", "61 3 * * *")))
    await asyncio.sleep(0.2)
    assert cron.fingerprint == fingerprint
    assert ("schedules_reload_invalid", {"reason": "trigger 0 on.pattern", "kept": True}) in cron.log.events  # type: ignore[attr-defined]
    assert await scheduler_ids(host_queue) == ["nightly"]
    await cron.close()


# A real worker: its schedulers fire, its jobs run in containers, its row says what it schedules.


def write_triggers(path: Path, *entries: dict[str, Any]) -> Path:
    temp = path.with_suffix(".new")
    temp.write_text(json.dumps({"triggers": list(entries)}, indent=2))
    temp.replace(path)  # as the role and editors replace it: one rename
    return path


async def queue_holds(client: aioredis.Redis, queue: str) -> int:
    """Jobs on the queue not yet finished: waiting, running, delayed or prioritized."""
    pipe = client.pipeline(transaction=False)
    for state, count in (("wait", pipe.llen), ("active", pipe.llen), ("delayed", pipe.zcard),
                         ("prioritized", pipe.zcard)):  # fmt: skip
        count(f"bull:{queue}:{state}")
    return int(sum(await pipe.execute()))


async def records_named(logs: Path, prefix: str) -> list[dict[str, Any]]:
    return [record for record in read_records(logs) if str(record.get("jobId", "")).startswith(prefix)]


@pytest.mark.docker
async def test_a_worker_runs_its_cron_on_its_own_queue_and_stops_when_the_entry_goes(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    path = write_triggers(tmp_path / "triggers.json", entry("tick"), ISSUE_ONCE)
    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_TRIGGERS_FILE=str(path), TZ="UTC")
    expected = cron_fingerprint(authored_cron(load_triggers(path)), "UTC")
    async with running_worker(settings_of(env)) as w:
        deadline = time.monotonic() + 120
        while len(await records_named(w.logs_dir, "repeat:tick:")) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        runs = await records_named(w.logs_dir, "repeat:tick:")
        assert len(runs) >= 2, "two scheduled runs before the ceiling"
        assert {run["outcome"] for run in runs} == {"completed"}
        assert {run["host"] for run in runs} == {"mini1"}
        row = await client.hgetall(host_row_key("mini1"))
        assert row[b"fpCron"].decode() == expected
        assert row[b"cronCount"] == b"1"
        write_triggers(path, ISSUE_ONCE)  # the entry deleted: reconciled away through the watch
        await wait_for_event(w.events, "scheduler_removed")
        own = host_queue_name("mini1")
        deadline = time.monotonic() + 120  # what the scheduler had put on the queue before it went runs to its end
        while await queue_holds(client, own):
            assert time.monotonic() < deadline, "the removed entry's last runs never ended"
            await asyncio.sleep(0.2)
        settled = len(await records_named(w.logs_dir, "repeat:tick:"))
        await asyncio.sleep(2.5)
        assert len(await records_named(w.logs_dir, "repeat:tick:")) == settled  # nothing fires any more
        row = await client.hgetall(host_row_key("mini1"))
        assert row[b"cronCount"] == b"0"
        assert row[b"fpCron"].decode() == cron_fingerprint([], "UTC")
    assert await client.zcard(f"bull:{host_queue_name('mini1')}:delayed") == 0


@pytest.mark.docker
async def test_a_one_shot_is_disarmed_after_its_run_is_recorded(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    path = write_triggers(tmp_path / "triggers.json", entry("nightly", "0 3 * * *"), ISSUE_ONCE)
    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_TRIGGERS_FILE=str(path), TZ="UTC")
    matched = {"index": 1, "type": "issue", "action": "closed", "number": 40, "once": True}
    queue = Queue(host_queue_name("mini1"), {"connection": valkey_url})
    try:
        async with running_worker(settings_of(env)) as w:
            await queue.add("github", forge_job(40, trigger={"matched": matched}), {"jobId": "gh-close-40"})
            done = await finished_job(queue, "gh-close-40")
            assert done.returnvalue["outcome"] == "completed"
            await wait_for_event(w.events, "trigger_disarmed")
            names = w.events.names()
            assert names.index("trigger_disarmed") < names.index("job_done")  # spent with its record, not later
    finally:
        await queue.close()
    spent = json.loads(path.read_text())["triggers"]
    assert spent[1]["on"]["disarmed"]["jobId"] == "gh-close-40"
    assert [trigger.on_type for trigger in load_triggers(path)] == ["cron", "disarmed"]
    assert (w.logs_dir / f"{record_stem('gh-close-40')}.json").exists()


async def wait_for_event(events: Recorder, name: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while name not in events.names():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {name} in {events.names()[-10:]}")
        await asyncio.sleep(0.05)


@pytest.mark.docker
async def test_a_store_that_comes_back_empty_gets_the_schedulers_back_within_a_beat(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str, host_queue: Queue
) -> None:
    path = write_triggers(tmp_path / "triggers.json", entry("nightly", "0 3 * * *"), entry("weekly", "0 4 * * 1"))
    env = worker_env(tmp_path, valkey_url, job_image, "mini1", PI_TRIGGERS_FILE=str(path), TZ="UTC")
    async with running_worker(settings_of(env), beat_ms=500) as w:
        await wait_for_event(w.events, "schedules_reconciled")
        assert await scheduler_ids(host_queue) == ["nightly", "weekly"]
        await asyncio.sleep(1.2)  # a beat or two: the worker has read the fleet's epoch
        await client.flushdb()  # the store restarted without its data: schedulers, rows and epoch gone
        await wait_for_event(w.events, "store_reset")
        deadline = time.monotonic() + 60
        while await scheduler_ids(host_queue) != ["nightly", "weekly"] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert await scheduler_ids(host_queue) == ["nightly", "weekly"]
        assert await client.exists(host_row_key("mini1"))  # its row is back too
    assert w.events.names().count("store_reset") == 1
