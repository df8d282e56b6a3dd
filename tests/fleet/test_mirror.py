"""The run mirror (upstream-vectors §5): pure merge and window, and the writer and reader on a real Valkey."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.jscompat import date_parse
from pi_dispatch.fleet.mirror import (
    MIRROR_MAX_DAYS,
    RUNS_INDEX,
    RUNS_INDEX_MAX,
    RunMirror,
    hosts_in,
    merge_runs,
    mirror_window_ms,
    read_mirrored_runs,
    run_record_key,
)
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.valkey import connect

DAY = 86_400_000
AT = "2026-08-30T12:00:00.000Z"
NOW = int(date_parse(AT))


def rec(job_id: str, ended_at: str = AT, **extra: Any) -> dict[str, Any]:
    return {"jobId": job_id, "endedAt": ended_at, "host": "mini1", "outcome": "completed", **extra}


def test_constants() -> None:
    assert (RUNS_INDEX, run_record_key("x"), MIRROR_MAX_DAYS, RUNS_INDEX_MAX) == ("runs:index", "runs:rec:x", 92, 5000)


@pytest.mark.parametrize(
    ("days", "expected"),
    [(7, 7 * DAY), (365, 92 * DAY), (0, 92 * DAY), (None, 92 * DAY), ("abc", 92 * DAY), (-1, 92 * DAY), ("7", 7 * DAY)],
)
def test_mirror_window(days: object, expected: int) -> None:
    assert mirror_window_ms(days) == expected


def test_merge_later_ended_wins_across_hosts() -> None:
    local = [rec("j1", "2026-08-30T10:00:00.000Z", outcome="failed")]
    mirrored = [rec("j1", "2026-08-30T11:00:00.000Z", host="mini2")]
    merged = merge_runs(local, mirrored)
    assert len(merged) == 1 and merged[0]["outcome"] == "completed" and merged[0]["host"] == "mini2"


def test_merge_local_wins_a_tie() -> None:
    assert merge_runs([rec("j1", host="mine")], [rec("j1", host="theirs")])[0]["host"] == "mine"


def test_merge_cuts_after_sorting() -> None:
    local = [rec("new1", "2026-08-30T09:00:00Z"), rec("new2", "2026-08-30T08:00:00Z")]
    mirrored = [rec("old1", "2026-08-30T01:00:00Z"), rec("old2", "2026-08-30T02:00:00Z")]
    assert [r["jobId"] for r in merge_runs(local, mirrored, limit=2)] == ["new1", "new2"]


def test_merge_without_mirror_is_local() -> None:
    local = [rec("a", "2026-08-30T09:00:00Z"), rec("b", "2026-08-30T08:00:00Z")]
    assert merge_runs(local, [], limit=10) == local
    assert merge_runs(local, None, limit=10) == local


def test_merge_undatable_records_sort_last_in_arrival_order() -> None:
    runs = [{"jobId": "x", "endedAt": "garbage"}, rec("y"), {"jobId": "z"}, {"jobId": ""}, {"endedAt": AT}]
    assert [r["jobId"] for r in merge_runs(runs, [])] == ["y", "x", "z"]


def test_merge_offsets_and_started_at() -> None:
    local = [
        {"jobId": "a", "endedAt": "2026-08-30T13:00:00+02:00"},
        {"jobId": "b", "startedAt": "2026-08-30T11:30:00Z"},
    ]
    assert [r["jobId"] for r in merge_runs(local, [])] == ["b", "a"]


def test_hosts_in() -> None:
    assert hosts_in([{"host": "m2"}, {"host": "m1"}, {"host": "m1"}]) == ["m1", "m2"]
    assert hosts_in([{"jobId": "a"}]) == []
    assert hosts_in(None) == []


@pytest.mark.redis
async def test_mirror_writes_exact_bytes_ttl_and_score(client: aioredis.Redis) -> None:
    record = rec("job-1", tokens={"total": 10})
    mirror = RunMirror(client, 7, now=lambda: NOW)
    assert await mirror.mirror(record, "job-1") is True
    assert await client.get("runs:rec:job-1") == json.dumps(record, separators=(",", ":")).encode()
    assert 7 * DAY - 5_000 < await client.pttl("runs:rec:job-1") <= 7 * DAY
    assert await client.zscore(RUNS_INDEX, "job-1") == NOW
    assert 7 * DAY - 5_000 < await client.pttl(RUNS_INDEX) <= 7 * DAY


@pytest.mark.redis
async def test_mirror_trims_by_count(client: aioredis.Redis) -> None:
    mirror = RunMirror(client, 90, now=lambda: NOW + 10 * 60_000, index_max=3)
    for minute in range(6):
        assert await mirror.mirror(rec(f"j{minute}", f"2026-08-30T12:0{minute}:00.000Z"), f"j{minute}")
    assert sorted(await client.zrange(RUNS_INDEX, 0, -1)) == [b"j3", b"j4", b"j5"]


@pytest.mark.redis
async def test_mirror_trims_by_age(client: aioredis.Redis) -> None:
    await client.zadd(RUNS_INDEX, {"ancient": NOW - 40 * DAY})
    assert await RunMirror(client, 7, now=lambda: NOW).mirror(rec("fresh"), "fresh")
    assert await client.zrange(RUNS_INDEX, 0, -1) == [b"fresh"]


@pytest.mark.redis
async def test_mirror_scores_an_undatable_record_now(client: aioredis.Redis) -> None:
    assert await RunMirror(client, 7, now=lambda: NOW).mirror({"jobId": "u", "endedAt": "soon"}, "u")
    assert await client.zscore(RUNS_INDEX, "u") == NOW


@pytest.mark.redis
async def test_mirror_refuses_missing_parts(client: aioredis.Redis) -> None:
    mirror = RunMirror(client, 7)
    assert await mirror.mirror(None, "x") is False
    assert await mirror.mirror(rec("x"), "") is False
    assert await RunMirror(None, 7).mirror(rec("x"), "x") is False


async def test_mirror_failure_logs_once_per_outage() -> None:
    log = Recorder()
    dead = connect("redis://127.0.0.1:1/0", timeout_s=0.2)
    mirror = RunMirror(dead, 7, log=log, timeout_s=0.2)
    assert await mirror.mirror(rec("a"), "a") is False
    assert await mirror.mirror(rec("b"), "b") is False
    assert log.names() == ["run_mirror_failed"]
    await dead.aclose()


@pytest.mark.redis
async def test_mirror_against_a_hung_server_returns_within_its_bound(valkey_url: str, client: aioredis.Redis) -> None:
    hung = connect(valkey_url, timeout_s=30)
    await hung.ping()  # an established connection that then stops answering
    await client.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
    try:
        started = time.monotonic()
        assert await RunMirror(hung, 7, timeout_s=0.2).mirror(rec("h"), "h") is False
        # Unbounded, this would wait out the 20 s pause; this machine's timers are coarse, hence the margin.
        assert time.monotonic() - started < 10.0
    finally:
        await client.execute_command("CLIENT", "UNPAUSE")
        await hung.aclose()


@pytest.mark.redis
async def test_read_counts_round_trips(valkey_url: str, client: aioredis.Redis) -> None:
    mirror = RunMirror(client, 7, now=lambda: NOW)
    for i in range(20):
        await mirror.mirror(rec(f"r{i}", f"2026-08-30T11:{i:02d}:00.000Z"), f"r{i}")
    before = int((await client.info("stats"))["total_commands_processed"])
    reader = connect(valkey_url)
    result = await read_mirrored_runs(reader, limit=20)
    after = int((await client.info("stats"))["total_commands_processed"])
    await reader.aclose()
    assert len(result.runs) == 20 and result.degraded == "truncated"
    assert [r["jobId"] for r in result.runs][:2] == ["r19", "r18"]
    assert after - before - 1 == 2  # ZREVRANGEBYSCORE + MGET; the first INFO is counted in `after`


@pytest.mark.redis
async def test_read_prunes_expired_and_unparseable(client: aioredis.Redis) -> None:
    await RunMirror(client, 7, now=lambda: NOW).mirror(rec("alive"), "alive")
    await client.zadd(RUNS_INDEX, {"gone": NOW, "junk": NOW, "nan": NOW})
    await client.set(run_record_key("junk"), b"{not json")
    await client.set(run_record_key("nan"), b"NaN")
    result = await read_mirrored_runs(client)
    assert [r["jobId"] for r in result.runs] == ["alive"]
    assert result.degraded == "ok"
    assert await client.zrange(RUNS_INDEX, 0, -1) == [b"alive"]


@pytest.mark.redis
async def test_read_states(client: aioredis.Redis) -> None:
    assert await read_mirrored_runs(client) == type(await read_mirrored_runs(None))([], "off")
    mirror = RunMirror(client, 7, now=lambda: NOW)
    for i in range(5):
        await mirror.mirror(rec(f"s{i}"), f"s{i}")
    assert (await read_mirrored_runs(client, limit=3)).degraded == "truncated"
    assert (await read_mirrored_runs(client, limit=50)).degraded == "ok"
    dead = connect("redis://127.0.0.1:1/0", timeout_s=0.2)
    failed = await read_mirrored_runs(dead, timeout_s=0.2)
    await dead.aclose()
    assert failed.runs == [] and failed.degraded.startswith("unreachable (")
