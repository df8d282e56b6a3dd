"""Fixtures the worker's tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from bullmq import Queue


@pytest.fixture
async def queue(valkey_url: str, client: aioredis.Redis) -> AsyncIterator[Queue]:
    """The shared queue, pi-jobs, on the suite's redis-server; closed after the test."""
    opened = Queue("pi-jobs", {"connection": valkey_url})
    try:
        yield opened
    finally:
        await opened.close()
