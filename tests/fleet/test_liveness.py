"""Liveness beyond the heartbeat: the row's progress facts, and a consumer that stalls for real."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.keys import host_row_key
from pi_dispatch.core.routing import explain_route, route_forge_job
from pi_dispatch.fleet.liveness import (
    POLL_SILENCE_S,
    ROW_JOBS_MAX,
    not_draining,
    progress_facts,
    row_job_id,
    stuck_consumer,
)
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.testing.jobs import RESOLVER, write_script
from pi_dispatch.testing.stalling import StallingRelay
from tests.support.workers import running_worker, settings_of, worker_env

IDLE_POLL_S = 0.5  # the stalling worker's blocking pops time out this often when idle
STUCK_AFTER_S = 3.0


@dataclass
class Consumer:
    name: str
    polled_at_ms: int = 0
    took_at_ms: int = 0
    since: float | None = None

    def stalled_for(self, now: float) -> float:
        return 0.0 if self.since is None else now - self.since


def test_a_consumer_is_stuck_once_its_call_for_a_job_outlasts_the_threshold() -> None:
    waiting, idle = Consumer("pi-jobs", since=100.0), Consumer("pi-jobs@mini1")
    assert stuck_consumer([idle, waiting], now=159.0, after_s=60) is None
    stuck = stuck_consumer([idle, waiting], now=161.0, after_s=60)
    assert stuck is not None and stuck.queue == "pi-jobs" and round(stuck.seconds) == 61
    assert "pi-jobs" in stuck.reason and "61 s" in stuck.reason
    assert stuck_consumer([], now=1e9) is None


def test_progress_facts_say_when_the_consumer_last_polled_and_what_runs() -> None:
    consumers = [Consumer("pi-jobs", 1_000, 900), Consumer("pi-jobs@mini1", 2_000, 0)]
    running = {f"gh-{number}": 5_000 + number for number in range(ROW_JOBS_MAX + 3)}
    running["a job id with spaces"] = 7
    facts = progress_facts(consumers, running, concurrency=40, stuck=False)
    assert facts["polledAt"] == "2000" and facts["tookAt"] == "900"
    listed = json.loads(facts["jobs"])
    assert len(listed) == ROW_JOBS_MAX and listed[0] == {"id": "gh-0", "p": None, "at": 5_000}
    assert facts["jobsMore"] == "4" and facts["slotsFree"] == "4" and facts["consumer"] == "ok"
    assert all(isinstance(value, str) for value in facts.values())
    idle = progress_facts([Consumer("pi-jobs")], {}, concurrency=2, stuck=True)
    assert idle["polledAt"] == "" and idle["tookAt"] == "" and idle["slotsFree"] == "2"
    assert idle["consumer"] == "stuck" and idle["jobs"] == "[]"


def test_a_row_job_id_is_kept_plain_or_hashed() -> None:
    assert row_job_id("gh-acme.app-12:3") == "gh-acme.app-12:3"
    hashed = row_job_id("a/b c")
    assert hashed.startswith("sha256:") and len(hashed) == len("sha256:") + 16
    assert row_job_id("x" * 129) != "x" * 129


def test_not_draining_needs_a_live_row_that_is_stuck_or_silent_with_free_slots() -> None:
    now = 1_000_000
    row = {"name": "mini1", "staleMs": 1_000, "polledAt": str(now - 5_000), "slotsFree": "2", "consumer": "ok"}
    assert not_draining(row, now) is None
    within = POLL_SILENCE_S * 1000 - 1_000  # a row can be a beat behind a healthy consumer's last poll
    assert not_draining({**row, "polledAt": str(int(now - within))}, now) is None
    assert not_draining({**row, "polledAt": str(int(now - within - 2_000))}, now) is not None
    silent = not_draining({**row, "polledAt": str(now - 90_000)}, now)
    assert silent is not None and not silent.stuck and silent.slots_free == 2
    assert silent.evidence() == ["it takes no job", "2 slots free", "last poll 90 s ago"]
    assert not_draining({**row, "polledAt": str(now - 90_000), "slotsFree": "0"}, now) is None  # busy, not stuck
    stuck = not_draining({**row, "consumer": "stuck"}, now)
    assert stuck is not None and stuck.stuck
    assert not_draining({**row, "consumer": "stuck", "staleMs": 600_000}, now) is None  # dead, not stuck
    reference_row = {"name": "node1", "staleMs": 1_000}  # a Node worker's row has no progress facts
    assert not_draining(reference_row, now) is None


def test_a_stuck_host_is_not_capable_but_still_counts_as_live() -> None:
    rows = [
        {"name": "mini1", "routes": "true", "caps": "s:prod", "staleMs": 0, "consumer": "stuck"},
        {"name": "mini2", "routes": "true", "caps": "s:prod", "staleMs": 0},
    ]
    assert {route_forge_job(rows, ["s:prod"], f"gh-{n}") for n in range(50)} == {"mini2"}
    assert route_forge_job(rows[:1], ["s:prod"], "gh-1") is None
    explained = explain_route(rows, {"secretsProfile": "prod", "secrets": {"A": "a"}}, "gh-1")
    assert explained.host == "mini2"
    assert "stuck" in next(verdict.reason for verdict in explained.hosts if verdict.name == "mini1")


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_consumer_stalled_on_a_silent_connection_is_caught_routed_around_and_exits_1(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    relay = StallingRelay(valkey_url)
    relayed = relay.start()
    resolver = write_script(tmp_path / "prod-resolver", RESOLVER)
    profiles = {"PI_SECRET_PROFILES": f"prod:{resolver}", "PI_DRAIN_GRACE_MS": "3000"}
    stalling = settings_of(worker_env(tmp_path, relayed, job_image, "mini1", **profiles))
    healthy = settings_of(worker_env(tmp_path, valkey_url, job_image, "mini2", **profiles))
    plain = settings_of(worker_env(tmp_path, valkey_url, job_image, "mini3"))  # without it, every host has prod
    try:
        async with (
            running_worker(healthy, beat_ms=300),
            running_worker(plain, beat_ms=300),
            running_worker(stalling, beat_ms=300, stuck_after_s=STUCK_AFTER_S, idle_poll_s=IDLE_POLL_S) as stuck,
        ):
            live = await read_live_hosts(client)
            assert isinstance(live, LiveHosts)
            assert {route_forge_job(live.hosts, ["s:prod"], f"gh-{n}") for n in range(40)} == {"mini1", "mini2"}
            # the control: idle, its blocking pops come back every poll, for longer than the threshold
            polls = []
            for _ in range(2):
                await asyncio.sleep((STUCK_AFTER_S + 2 * IDLE_POLL_S) / 2)
                row = await client.hgetall(host_row_key("mini1"))
                assert row[b"consumer"] == b"ok"
                polls.append(int(row[b"polledAt"] or 0))
            assert 0 < polls[0] < polls[1] and "consumer_stuck" not in stuck.events.names()
            relay.stall_blocking_pops()
            stalled_at = time.monotonic()
            while "consumer_stuck" not in stuck.events.names():
                assert time.monotonic() - stalled_at < 30, stuck.events.names()
                await asyncio.sleep(0.05)
            assert time.monotonic() - stalled_at >= STUCK_AFTER_S - IDLE_POLL_S
            row = await client.hgetall(host_row_key("mini1"))
            assert row[b"consumer"] == b"stuck", row
            live = await read_live_hosts(client)
            assert isinstance(live, LiveHosts) and "mini1" in {host["name"] for host in live.hosts}
            assert {route_forge_job(live.hosts, ["s:prod"], f"gh-{n}") for n in range(40)} == {"mini2"}
            assert await asyncio.wait_for(stuck.task, 60) == 1
            # its last row stays, saying stuck, until a restarted worker replaces it or it ages out
            assert await client.hget(host_row_key("mini1"), "consumer") == b"stuck"
            assert relay.stalled_answers >= 1  # the store answered; the relay kept it from the consumer
            failing = dict(stuck.events.events)["worker_failing"]
            assert "stuck" in str(failing["reason"])
    finally:
        relay.close()
