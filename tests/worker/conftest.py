"""What the worker's tests share: BullMQ queues opened by name as a test first uses them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from bullmq import Queue


@pytest.fixture
async def queues(valkey_url: str, client: aioredis.Redis) -> AsyncIterator[dict[str, Queue]]:
    """BullMQ queues by name, opened on first use, closed after the test."""
    opened: dict[str, Queue] = {}

    class Queues(dict[str, Queue]):
        def __missing__(self, name: str) -> Queue:
            opened[name] = self[name] = Queue(name, {"connection": valkey_url})
            return opened[name]

    yield Queues()
    for queue in opened.values():
        await queue.close()
