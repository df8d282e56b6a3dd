"""Routed enqueue (upstream-vectors §2) and the BullMQ add with the reference's job options, on a real Valkey."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.jobs import JobIdError, forge_delivery_job_id, semantic_dedup_id
from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, forge_job_options, registry_reader
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.infra.store import StoreAddress


def H(name: str, caps: str) -> dict[str, object]:
    return {"name": name, "caps": caps, "routes": "true", "staleMs": 0}


CAPABLE = [H("mini1", "s:prod"), H("mini2", "")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fleet(client: aioredis.Redis) -> AsyncIterator[None]:
    """mini1 serves s:prod, mini2 nothing; both named and beating."""
    mini1, mini2 = HostRegistry(client, "mini1"), HostRegistry(client, "mini2")
    await mini1.start({"routes": "true", "caps": "s:prod"})
    await mini2.start({"routes": "true", "caps": ""})
    yield
    await mini1.close()
    await mini2.close()


def counting_reader(hosts: list[dict[str, object]] | Exception, delay: float = 0.0) -> Any:
    async def read() -> list[dict[str, object]]:
        if delay:
            await asyncio.sleep(delay)
        if isinstance(hosts, Exception):
            raise hosts
        return hosts

    return read


def delivery(delivery_id: str = "d-1", **extra: Any) -> dict[str, Any]:
    return {"trigger": {"deliveryId": delivery_id}, **extra}


async def test_no_needs_goes_shared_without_reading() -> None:
    router = ForgeRouter(counting_reader(CAPABLE))
    assert await router.queue_for("github", delivery()) == "pi-jobs"
    assert router.reads == 0


async def test_routes_to_the_capable_host() -> None:
    router = ForgeRouter(counting_reader(CAPABLE))
    assert await router.queue_for("github", delivery(secretsProfile="prod")) == "pi-jobs@mini1"


async def test_a_failed_read_is_cached_for_the_window() -> None:
    router = ForgeRouter(counting_reader(ConnectionError("down")))
    for index in range(5):
        assert await router.queue_for("github", delivery(f"d-{index}", secretsProfile="prod")) == "pi-jobs"
    assert router.reads == 1


async def test_cache_lives_five_seconds_then_refreshes_beside_the_decisions() -> None:
    clock = Clock()
    router = ForgeRouter(counting_reader(CAPABLE), clock=clock)
    job = delivery(secretsProfile="prod")
    await router.queue_for("github", job)
    clock.now += 4.0
    await router.queue_for("github", job)
    assert router.reads == 1
    clock.now += 2.0
    assert await router.queue_for("github", job) == "pi-jobs@mini1"  # the last view, at once
    await asyncio.sleep(0.01)
    assert router.reads == 2 and router.view_age_s == 0  # read in the background meanwhile


async def test_a_slow_or_failed_refresh_never_holds_a_decision_and_a_view_too_old_abstains() -> None:
    clock = Clock()
    answers: list[object] = [CAPABLE]

    async def reader() -> list[dict[str, object]]:
        answer = answers[-1]
        if isinstance(answer, Exception):
            raise answer
        if answer == "slow":
            await asyncio.sleep(3600)
        return CAPABLE

    router = ForgeRouter(reader, clock=clock, read_timeout_s=0.05)
    job = delivery(secretsProfile="prod")
    assert await router.queue_for("github", job) == "pi-jobs@mini1"
    answers.append("slow")
    clock.now += 30.0
    async with asyncio.timeout(0.02):  # far below the read's own timeout: the decision does not wait for it
        assert await router.queue_for("github", job) == "pi-jobs@mini1"
    answers.append(ConnectionError("down"))
    await asyncio.sleep(0.1)
    clock.now += 10.0
    assert await router.queue_for("github", job) == "pi-jobs@mini1"  # 40 s old, the last read failed: still used
    await asyncio.sleep(0.01)
    clock.now += 30.0
    assert router.view_age_s > router.max_age_s
    assert await router.queue_for("github", job) == "pi-jobs"  # older than a minute: not routed by


async def test_concurrent_deliveries_share_one_read() -> None:
    router = ForgeRouter(counting_reader(CAPABLE, delay=0.2))
    queues = await asyncio.gather(
        *(router.queue_for("github", delivery(f"d-{i}", secretsProfile="prod")) for i in range(8))
    )
    assert set(queues) == {"pi-jobs@mini1"} and router.reads == 1


async def test_unknown_forge_falls_back_to_shared() -> None:
    router = ForgeRouter(counting_reader(CAPABLE))
    assert await router.queue_for("not-a-forge", delivery(secretsProfile="prod")) == "pi-jobs"
    assert await router.queue_for("github", {"secretsProfile": "prod"}) == "pi-jobs"


def test_forge_delivery_job_ids() -> None:
    assert forge_delivery_job_id("github", "3f2a-0002") == "gh-3f2a-0002"
    assert forge_delivery_job_id("github", "X", 3) == "gh-X-r3"
    assert [forge_delivery_job_id(k, "abc") for k in ("gitlab", "forgejo", "azure")] == ["gl-abc", "fj-abc", "az-abc"]
    with pytest.raises(JobIdError, match="X-GitHub-Delivery GUID"):
        forge_delivery_job_id("github", "")
    for bad in (("github", None), ("not-a-forge", "d"), ("github", "d", 0), ("github", "d", 1.5), ("github", "d", "2")):
        with pytest.raises(JobIdError):
            forge_delivery_job_id(*bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "job", "expected"),
    [
        (
            "github",
            {
                "repo": "acme/web",
                "target": {"type": "issue", "number": 7},
                "flow": "fix",
                "trigger": {"matched": {"type": "label"}},
            },
            "acme/web#7:fix",
        ),
        (
            "gitlab",
            {"repo": "g/s/p", "target": {"type": "pull_request", "number": 5}, "flow": "review"},
            "g/s/p!5:review",
        ),
        (
            "github",
            {"repo": "acme/web", "target": {"type": "pull_request", "number": 12}, "command": "deploy", "replica": 2},
            "acme/web#12:cmd:deploy:r2",
        ),
        (
            "github",
            {
                "repo": "acme/web",
                "target": {"type": "issue", "number": 40},
                "flow": "deploy",
                "trigger": {"matched": {"type": "issue"}},
            },
            "acme/web#40:closed:deploy",
        ),
    ],
)
def test_semantic_dedup_ids(kind: str, job: dict[str, Any], expected: str) -> None:
    assert semantic_dedup_id(kind, job) == expected


@pytest.mark.redis
async def test_enqueue_routes_adds_with_reference_options_and_dedups(
    valkey_url: str, client: aioredis.Redis, fleet: None
) -> None:
    enqueuer = Enqueuer(StoreAddress(valkey_url), ForgeRouter(registry_reader(client)))
    job = {
        "kind": "github",
        "repo": "acme/web",
        "target": {"type": "issue", "number": 7},
        "flow": "deploy",
        "secretsProfile": "prod",
        "trigger": {"deliveryId": "d-1", "matched": {"type": "label"}},
    }
    try:
        assert await enqueuer.enqueue_forge_job("github", job) == ("pi-jobs@mini1", "gh-d-1", "gh-d-1")
        for index in range(2, 5):
            again = await enqueuer.enqueue_forge_job("github", {**job, "trigger": {"deliveryId": f"d-{index}"}})
            assert again.deduplicated and again.kept == "gh-d-1" and again.job_id == f"gh-d-{index}"
        assert list(enqueuer.queues) == ["pi-jobs@mini1"]  # one pooled handle
        stored = await client.hgetall("bull:pi-jobs@mini1:gh-d-1")
        options = json.loads(stored[b"opts"])
        assert stored[b"name"] == b"github" and json.loads(stored[b"data"])["secretsProfile"] == "prod"
        assert options["attempts"] == 2 and options["backoff"] == {"type": "exponential", "delay": 60000}
        assert await client.exists("bull:pi-jobs@mini1:de:acme/web#7:deploy") == 1
        # d-2..d-4 share the semantic key: deduplicated while the first is live
        assert await client.exists("bull:pi-jobs@mini1:gh-d-2") == 0
        shared = {
            **job,
            "secretsProfile": None,
            "trigger": {"deliveryId": "d-9"},
            "target": {"type": "issue", "number": 8},
        }
        assert await enqueuer.enqueue_forge_job("github", shared) == ("pi-jobs", "gh-d-9", "gh-d-9")
    finally:
        await enqueuer.close()


async def _calls(client: aioredis.Redis) -> dict[str, int]:
    stats = await client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}


@pytest.mark.redis
async def test_an_add_alone_is_one_script_call_and_overlapping_adds_go_together(
    valkey_url: str, client: aioredis.Redis
) -> None:
    enqueuer = Enqueuer(StoreAddress(valkey_url), ForgeRouter(counting_reader([])))
    job = {"repo": "acme/app", "target": {"type": "issue", "number": 1}}
    try:
        await enqueuer.enqueue_forge_job("github", {**job, "trigger": {"deliveryId": "warm"}})  # connects
        before = await _calls(client)
        for index in range(5):  # one after another: each a plain add, no MULTI/EXEC around it
            await enqueuer.enqueue_forge_job("github", {**job, "trigger": {"deliveryId": f"alone-{index}"}})
        alone = await _calls(client)
        assert alone.get("multi", 0) == before.get("multi", 0)
        assert alone["evalsha"] - before["evalsha"] == 5
        overlapping = [
            {**job, "target": {"type": "issue", "number": 100 + index}, "trigger": {"deliveryId": f"burst-{index}"}}
            for index in range(32)
        ]
        results = await asyncio.gather(*(enqueuer.enqueue_forge_job("github", each) for each in overlapping))
        burst = await _calls(client)
        assert [result.kept for result in results] == [f"gh-burst-{index}" for index in range(32)]
        assert burst["multi"] - alone.get("multi", 0) == 1  # the first went alone, the 31 behind it together
        assert await client.exists(*(f"bull:pi-jobs:gh-burst-{index}" for index in range(32))) == 32
    finally:
        await enqueuer.close()


def test_job_options_are_the_references() -> None:
    options = forge_job_options(
        "github",
        {
            "repo": "a/b",
            "target": {"type": "issue", "number": 1},
            "flow": "f",
            "trigger": {"deliveryId": "d"},
            "replica": 2,
        },
    )
    assert options == {
        "attempts": 2,
        "backoff": {"type": "exponential", "delay": 60000},
        "removeOnComplete": {"age": 2678400},
        "removeOnFail": {"age": 2678400},
        "jobId": "gh-d-r2",
        "deduplication": {"id": "a/b#1:f:r2", "ttl": 600000},
    }


@pytest.mark.redis
async def test_enqueue_command(valkey_url: str, client: aioredis.Redis, tmp_path: Any, fleet: None) -> None:
    from tests.support.helpers import run_cli

    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "repo": "acme/web",
                "target": {"type": "issue", "number": 3},
                "flow": "deploy",
                "secretsProfile": "prod",
                "trigger": {"deliveryId": "cli-1"},
            }
        )
    )
    result = await asyncio.to_thread(run_cli, "enqueue", "--job", str(job), "--valkey-url", valkey_url)
    assert result.returncode == 0 and "enqueued gh-cli-1 on pi-jobs@mini1" in result.stdout
    assert await client.exists("bull:pi-jobs@mini1:gh-cli-1") == 1
    again = json.loads(job.read_text())
    job.write_text(json.dumps({**again, "trigger": {"deliveryId": "cli-2"}}))
    duplicate = await asyncio.to_thread(run_cli, "enqueue", "--job", str(job), "--valkey-url", valkey_url)
    assert (
        duplicate.returncode == 0 and "a duplicate of gh-cli-1" in duplicate.stdout and "not added" in duplicate.stdout
    )
    job.write_text(json.dumps({"flow": "x"}))
    refused = await asyncio.to_thread(run_cli, "enqueue", "--job", str(job), "--valkey-url", valkey_url)
    assert refused.returncode == 2 and "deliveryId" in refused.stderr


@pytest.mark.redis
async def test_an_add_to_a_hung_server_stays_bounded(valkey_url: str, client: aioredis.Redis) -> None:
    enqueuer = Enqueuer(StoreAddress(valkey_url), ForgeRouter(lambda: asyncio.sleep(0, [])), add_timeout_s=0.5)
    job = {"trigger": {"deliveryId": "hung-1"}, "repo": "acme/app", "target": {"type": "issue", "number": 1}}
    await enqueuer.enqueue_forge_job("github", job)  # the queue's connection is up before the pause
    await client.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await enqueuer.enqueue_forge_job("github", {**job, "trigger": {"deliveryId": "hung-2"}})
        # Unbounded, this would wait out the 20 s pause; this machine's timers are coarse, hence the margin.
        assert time.monotonic() - started < 10.0
    finally:
        await client.execute_command("CLIENT", "UNPAUSE")
        await enqueuer.close()


@pytest.mark.redis
async def test_enqueue_command_authenticates_with_valkey_password(
    private_redis: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.helpers import run_cli

    admin = aioredis.Redis.from_url(private_redis.url)
    await admin.config_set("requirepass", "s3cret pass:/@")
    await admin.aclose()
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps({"repo": "acme/web", "target": {"type": "issue", "number": 3}, "trigger": {"deliveryId": "pw-1"}})
    )
    refused = await asyncio.to_thread(run_cli, "enqueue", "--job", str(job), "--valkey-url", private_redis.url)
    assert refused.returncode == 1 and "not enqueued" in refused.stderr and "Traceback" not in refused.stderr
    monkeypatch.setenv("VALKEY_PASSWORD", "s3cret pass:/@")
    result = await asyncio.to_thread(run_cli, "enqueue", "--job", str(job), "--valkey-url", private_redis.url)
    assert result.returncode == 0 and "enqueued gh-pw-1 on pi-jobs" in result.stdout
    assert "s3cret" not in result.stdout + result.stderr + refused.stdout + refused.stderr
