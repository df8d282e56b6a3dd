"""A job's dollars before and after its container, against a real redis-server: what is refused before anything is
counted, what is held and given back, and a dead worker's hold settled by a peer once its lease ends."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from pi_dispatch.core.budget import Window, window_key
from pi_dispatch.core.dollarplan import USD_PREFIX
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.runusage import RunUsage
from pi_dispatch.fleet.dollars import OPEN_HOLDS, hold_dollars
from pi_dispatch.infra.events import Recorder
from pi_dispatch.worker.gates.limits import Limits, read_limit_files
from pi_dispatch.worker.gates.scripts import Refusal
from pi_dispatch.worker.gates.spend import Holds
from tests.support.workers import settings_of, worker_env

pytestmark = [pytest.mark.redis]
JOB = {"kind": "github", "repo": "acme/web", "flow": "triage"}
CAPABLE = frozenset({"costCap", "exitAuth"})


def now_ms() -> int:
    return int(time.time() * 1000)


def limits_of(tmp_path: Path, valkey_url: str, client: aioredis.Redis, **env: str) -> tuple[Limits, Recorder]:
    settings = settings_of(worker_env(tmp_path, valkey_url, "unused:image", "mini1", **env))
    events = Recorder()
    return Limits(settings, client, now_ms, events, *read_limit_files(settings)), events


async def test_a_capped_job_on_an_image_without_cost_cap_is_refused_before_anything_counts(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    limits, _ = limits_of(tmp_path, valkey_url, client, PI_MAX_COST_USD="2", PI_DAILY_COST_USD="10")
    refused = await limits.reserve("gh-1", JOB, frozenset({"exitAuth"}))
    assert isinstance(refused, Refusal) and refused.reason == Reason.JOB_IMAGE_COST_CAP_UNSUPPORTED
    assert refused.result()["budgetReserved"] is False
    assert await client.dbsize() == 0  # neither a start nor a dollar was counted


async def test_a_dollar_row_without_a_job_cap_refuses_its_jobs_config_refused(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    rows = tmp_path / "scoped-limits.json"
    rows.write_text(json.dumps({"version": 2, "limits": [{"scope": "acme/web", "dayUsd": "5"}]}))
    limits, events = limits_of(tmp_path, valkey_url, client, PI_SCOPED_LIMITS_FILE=str(rows))
    assert "scoped_limits_dollar_rows_without_cap" in events.names()  # said at boot
    refused = await limits.reserve("gh-1", JOB, CAPABLE)
    assert isinstance(refused, Refusal) and refused.reason == Reason.CONFIG_REFUSED
    assert isinstance(await limits.reserve("gh-2", {**JOB, "repo": "acme/other"}, frozenset()), Holds)


async def test_a_hold_tells_the_container_its_cap_and_is_given_back_when_no_container_ran(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    limits, _ = limits_of(tmp_path, valkey_url, client, PI_MAX_COST_USD="2", PI_DAILY_COST_USD="10")
    holds = await limits.reserve("gh-1", {**JOB, "maxCostUsd": "0.5"}, CAPABLE)  # a trigger can only narrow
    assert isinstance(holds, Holds) and holds.cap == 500_000 and holds.exit_key is not None
    assert holds.environment == {"PI_MAX_COST_MICROS": "500000", "PI_EXIT_AUTH": "stdin"}
    day = window_key(USD_PREFIX, Window.DAY, now_ms())
    assert await client.get(day) == b"500000" and await client.zcard(OPEN_HOLDS) == 1
    await limits.unspent(holds)
    assert await client.get(day) == b"0" and await client.zcard(OPEN_HOLDS) == 0
    assert await client.get(window_key("budget", Window.DAY, now_ms())) == b"0"


async def test_a_malformed_trigger_cap_spends_nothing_and_settles_unreserved(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    limits, events = limits_of(tmp_path, valkey_url, client, PI_MAX_COST_USD="2", PI_DAILY_COST_USD="10")
    holds = await limits.reserve("gh-1", {**JOB, "maxCostUsd": "lots"}, CAPABLE)
    assert isinstance(holds, Holds) and holds.cap == 0 and holds.dollars is None
    assert holds.environment["PI_MAX_COST_MICROS"] == "0"
    assert ("job_cost_cap_malformed", {"jobId": "gh-1", "key": "maxCostUsd"}) in events.events
    holds.started = True
    said = await limits.settle("gh-1", holds, RunUsage(), trusted=True, flow="triage")
    assert said["dollars"] == {"reservedMicros": 0, "settledMicros": 0, "basis": "unreserved", "modelBasis": None}
    assert await client.exists(window_key(USD_PREFIX, Window.DAY, now_ms())) == 0


async def test_a_peer_settles_at_the_floor_a_hold_whose_lease_ended(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    from pi_dispatch.core.budget import WindowCaps
    from pi_dispatch.core.dollarplan import DollarLedger

    ledger = DollarLedger(USD_PREFIX, WindowCaps(10_000_000))
    held = await hold_dollars(client, [ledger], 2_000_000, now_ms() - 10_000, hold_id="dead#gh-9#ab", lease_ms=5_000)
    alive = await hold_dollars(client, [ledger], 1_000_000, now_ms(), hold_id="live#gh-8#cd", lease_ms=600_000)
    assert not isinstance(held, Refusal) and not isinstance(alive, Refusal)
    peer, events = limits_of(tmp_path, valkey_url, client, PI_MAX_COST_USD="2", PI_DAILY_COST_USD="10")
    await peer.sweep_holds()
    swept: list[Any] = [fields for name, fields in events.events if name == "dollar_hold_swept"]
    assert swept == [{"hold": "dead#gh-9#ab", "reservedMicros": 2_000_000, "settledMicros": 2_000_000,
                      "basis": "floor"}]  # fmt: skip
    assert [member.decode() for member in await client.zrange(OPEN_HOLDS, 0, -1)] == ["live#gh-8#cd"]
    assert await client.get(window_key(USD_PREFIX, Window.DAY, now_ms())) == b"3000000"  # the floor: kept whole


async def test_a_capped_job_with_no_dollar_window_is_still_valued_and_touches_no_key(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    limits, _ = limits_of(tmp_path, valkey_url, client, PI_MAX_COST_USD="2")
    holds = await limits.reserve("gh-1", JOB, CAPABLE)
    assert isinstance(holds, Holds) and holds.cap == 2_000_000 and holds.dollars is None
    holds.started = True
    said = await limits.settle("gh-1", holds, RunUsage(), trusted=True, flow="triage")
    assert said["dollars"] == {"reservedMicros": 2_000_000, "settledMicros": 2_000_000, "basis": "floor",
                               "modelBasis": None}  # fmt: skip
    assert [key async for key in client.scan_iter("budget:usd*")] == []


async def test_an_image_whose_labels_are_unknown_is_left_to_its_start_to_say(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    limits, _ = limits_of(tmp_path, valkey_url, client, PI_MAX_COST_USD="2")
    holds = await limits.reserve("gh-1", JOB, None)  # not here, or Docker away: job-image-missing, not a refusal
    assert isinstance(holds, Holds) and holds.exit_key is None and "PI_EXIT_AUTH" not in holds.environment


async def test_the_exit_key_is_never_in_a_repr(tmp_path: Path, valkey_url: str, client: aioredis.Redis) -> None:
    from pi_dispatch.worker.prepare.jobspec import ContainerSpec, Launch

    limits, _ = limits_of(tmp_path, valkey_url, client)
    holds = await limits.reserve("gh-1", JOB, CAPABLE)
    assert isinstance(holds, Holds) and holds.exit_key is not None
    launch = Launch("image", {}, None, None, None, holds.environment, holds.exit_key)
    spec = ContainerSpec("gh-1", 1, "image", tmp_path, {}, 64, 0.5, 60, stdin_key=holds.exit_key)
    for shown in (repr(holds), repr(launch), repr(spec)):
        assert holds.exit_key not in shown
