"""Slow and greedy clients over real sockets: a header sender cut off at its deadline, a body answered 408 at its
own, connections past a cap answered 503 while a legitimate delivery from elsewhere is still served."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from pi_dispatch.receiver.guard import raise_descriptor_limit
from pi_dispatch.testing.receiving import default_limits
from tests.support.receiving import Served, github_labeled, rules_of, served

pytestmark = pytest.mark.redis

RULES = rules_of({"on": {"type": "label", "any": ["pi"]}, "run": {"kind": "github", "flow": "fix"}})
ELSEWHERE = "127.0.0.2"  # another loopback address: another peer to the receiver


def labeled(number: int) -> dict[str, Any]:
    return github_labeled("pi", number)


async def opened(receiver: Served, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = urlsplit(receiver.url)
    return await asyncio.open_connection(address.hostname, address.port, local_addr=(source, 0))


SLOW_BODY_HEAD = (
    b"POST / HTTP/1.1\r\nHost: receiver\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
    b"X-Hub-Signature-256: sha256=00\r\nX-GitHub-Event: issues\r\nX-GitHub-Delivery: slow-body\r\n\r\n"
)


@contextlib.asynccontextmanager
async def held(
    receiver: Served, count: int, source: str = ELSEWHERE, *, serving: bool = False
) -> AsyncIterator[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    """`count` connections that have sent the start of a request's headers and nothing more, or with `serving` a
    whole request's headers and the start of its body (each then holds a request the receiver is serving)."""
    connections = []
    for _ in range(count):
        connection = await opened(receiver, source)
        connection[1].write(SLOW_BODY_HEAD + b'{"a":' if serving else b"POST / HTTP/1.1\r\nHost: receiver\r\n")
        await connection[1].drain()
        connections.append(connection)
    await asyncio.sleep(0.3)  # until the receiver has read what each sent
    try:
        yield connections
    finally:
        for _, writer in connections:
            writer.close()


async def closed(reader: asyncio.StreamReader) -> bytes:
    """What the receiver sent before it closed the connection."""
    return await asyncio.wait_for(reader.read(), 10)


async def test_a_client_sending_its_headers_slowly_is_cut_off_at_the_header_deadline(valkey_url: str) -> None:
    async with served(valkey_url, RULES, limits=default_limits(header_timeout_s=1.0)) as receiver:
        reader, writer = await opened(receiver)
        writer.write(b"POST / HTTP/1.1\r\n")

        async def trickle() -> None:
            for index in range(100):  # a header line every 0.2 s: never a whole request
                writer.write(f"X-Slow-{index}: a\r\n".encode())
                await asyncio.sleep(0.2)

        trickling = asyncio.create_task(trickle())
        try:
            assert await closed(reader) == b""  # unanswered, and long before the 20 s the trickle would last
        finally:
            trickling.cancel()
            writer.close()


async def test_a_body_that_does_not_arrive_in_time_is_answered_408(valkey_url: str) -> None:
    async with served(valkey_url, RULES, limits=default_limits(body_timeout_s=1.0)) as receiver:
        reader, writer = await opened(receiver)
        writer.write(SLOW_BODY_HEAD + b'{"action":')
        answer = await closed(reader)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"body not received in time" in answer
    assert receiver.events("delivery_refused") == [
        {"forge": "github", "status": 408, "reason": "body not received in time"}
    ]


async def test_an_address_at_its_cap_loses_its_oldest_slow_connection_and_others_are_served(valkey_url: str) -> None:
    capped: list[tuple[str, str]] = []
    limits = default_limits(max_connections=100, max_per_peer=5)
    async with (
        served(valkey_url, RULES, limits=limits, capped=lambda *seen: capped.append(seen)) as receiver,
        held(receiver, 5) as slow,
    ):
        newest = await opened(receiver, ELSEWHERE)  # the sixth from that address: the first slow one makes room
        assert await closed(slow[0][0]) == b""
        assert await receiver.github("issues", labeled(7), "legit-1") == (202, {"status": "queued"})
        newest[1].close()
    assert capped == [("peer", "evicted")]


async def test_an_address_whose_connections_all_serve_requests_is_answered_503_past_its_cap(
    valkey_url: str,
) -> None:
    capped: list[tuple[str, str]] = []
    limits = default_limits(max_connections=100, max_per_peer=5)
    async with (
        served(valkey_url, RULES, limits=limits, capped=lambda *seen: capped.append(seen)) as receiver,
        held(receiver, 5, serving=True),
    ):
        reader, writer = await opened(receiver, ELSEWHERE)
        answer = await closed(reader)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        assert await receiver.github("issues", labeled(8), "legit-2") == (202, {"status": "queued"})
    assert capped == [("peer", "refused")]


async def test_at_the_total_cap_slow_connections_make_room_and_serving_ones_are_kept(valkey_url: str) -> None:
    capped: list[tuple[str, str]] = []
    limits = default_limits(max_connections=16, max_per_peer=64)
    async with served(valkey_url, RULES, limits=limits, capped=lambda *seen: capped.append(seen)) as receiver:
        async with held(receiver, 16, "127.0.0.3") as slow:  # a flood from many addresses would do the same
            assert await receiver.github("issues", labeled(9), "legit-3") == (202, {"status": "queued"})
            assert await closed(slow[0][0]) == b""
        await asyncio.sleep(0.3)
        async with held(receiver, 16, "127.0.0.3", serving=True):
            reader, writer = await opened(receiver)
            assert (await closed(reader)).startswith(b"HTTP/1.1 503")
            writer.close()
    # the slow connection made room for the delivery; the client's idle keep-alive one for the last request served
    assert capped == [("total", "evicted"), ("total", "evicted"), ("total", "refused")]


def test_the_descriptor_limit_is_raised_towards_what_the_caps_need_never_lowered() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        assert raise_descriptor_limit(16) == soft  # never lowered
        wanted = soft + 10 if hard == resource.RLIM_INFINITY else min(soft + 10, hard)
        assert raise_descriptor_limit(soft + 10) == wanted
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == wanted
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
