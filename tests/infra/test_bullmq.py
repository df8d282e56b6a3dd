"""The contract `infra/bullmq.py` keeps with BullMQ's internals, held against the installed package and a real
redis-server: an upgrade that moves one of them fails here, naming it, before a worker meets it."""

from __future__ import annotations

import asyncio
import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue
from bullmq.scripts import Scripts

from pi_dispatch.infra.bullmq import PRIVATE_CONTRACT, DrivenWorker, StalledCheck, add_connection, next_repeat_ms

ROOT = Path(__file__).resolve().parents[2]


def missing(holder: object, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if not hasattr(holder, name)]


@pytest.mark.redis
async def test_every_private_attribute_the_adapter_uses_is_where_it_expects(valkey_url: str) -> None:
    async def process(job: Any, token: str) -> None:
        del job, token

    worker = DrivenWorker("contract", process, {"connection": valkey_url, "autorun": False, "name": "c1"})
    single = aioredis.Redis.from_url(valkey_url, decode_responses=True, single_connection_client=True)
    queue = Queue("contract", {"connection": single})
    try:
        await queue.add("probe", {}, {})
        holders: dict[str, object] = {
            "Worker": worker,
            "Worker.backend": worker.backend,
            "Worker.lockManager": worker.lockManager,
            "Queue.client": queue.client,
            "Scripts": Scripts,
        }
        assert set(holders) == set(PRIVATE_CONTRACT)
        moved = {
            holder: found for holder, names in PRIVATE_CONTRACT.items() if (found := missing(holders[holder], names))
        }
        assert not moved, f"BullMQ {importlib.metadata.version('bullmq')} moved what infra/bullmq.py uses: {moved}"
        connection = add_connection(queue)
        assert f":{connection.port}/" in f"{valkey_url}/" and callable(connection.disconnect)
        await worker.start_background()
        job, _ = await worker.take("contract-token")
        assert job is not None and job.name == "probe"
        assert worker.marker_key.endswith(":marker") and worker.token_prefix
        await worker.stop_background()
        stalled = StalledCheck(valkey_url, "bull")
        assert await stalled.run("contract", 1, 1_000) == []
        await stalled.close()
    finally:
        await worker.close(force=True)
        await queue.close()


def test_the_repeat_strategy_is_bullmqs() -> None:
    after = next_repeat_ms(1_700_000_000_000, {"pattern": "0 0 * * * *"})
    assert after is not None and after > 1_700_000_000_000 and after % 3_600_000 == 0


def test_bullmq_is_pinned_exactly_where_its_internals_are_used() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [line.split(";")[0].strip() for line in declared if line.startswith("bullmq")]
    assert pins == [f"bullmq=={importlib.metadata.version('bullmq')}"], pins


@pytest.mark.redis
async def test_a_consumer_closed_while_it_starts_starts_nothing_and_raises_nothing(valkey_url: str) -> None:
    """A close that lands while the start names the connections: redis-py's pool, closed under that command, failed
    its release with a KeyError (about 1 start in 40 on these machines), which ended a worker as a failure, and left
    the socket open (an unraisable warning, an error in this suite)."""

    async def process(job: Any, token: str) -> None:
        del job, token

    for attempt in range(240):
        worker = DrivenWorker("closing", process, {"connection": valkey_url, "autorun": False, "name": "c1"})
        await worker.warm_up()
        closing = asyncio.ensure_future(_close_after(worker, (attempt % 24) / 20_000))
        try:
            await worker.start_background()
        finally:
            await closing
            await worker.stop_background()
        assert not worker.lockManager.is_running(), f"start {attempt} left lock renewals running after its close"


async def _close_after(worker: DrivenWorker, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    await worker.close()
