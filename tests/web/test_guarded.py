"""The console behind the receiver's guard, over real sockets: a client that does not finish its headers is cut off
at the deadline, and at the connection cap slow connections make room for a reader's request. And the one contract
`web/guarded.py` keeps with aiohttp's internals, held against the installed package."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import pytest
from aiohttp import web

from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.receiver.guard import ConnectionLimits
from pi_dispatch.web.auth import Access
from pi_dispatch.web.entry import start_console
from pi_dispatch.web.guarded import PRIVATE_CONTRACT
from tests.support.egress import free_port

HURRIED = ConnectionLimits(header_timeout_s=1.0, body_timeout_s=1.0, max_connections=64, max_per_peer=64)
CAPPED = ConnectionLimits(header_timeout_s=120.0, body_timeout_s=120.0, max_connections=4, max_per_peer=4)
CEILING_S = 30  # only a hang reaches it


async def test_what_the_adapter_uses_of_aiohttp_is_where_it_expects() -> None:
    server = web.Server(lambda request: web.Response())  # type: ignore[arg-type, return-value]
    holders: dict[str, Any] = {"AppRunner": web.AppRunner, "Server": server}
    missing = {kind: [name for name in names if not hasattr(holders[kind], name)]
               for kind, names in PRIVATE_CONTRACT.items()}  # fmt: skip
    assert missing == {kind: [] for kind in PRIVATE_CONTRACT}


async def console_under(limits: ConnectionLimits, valkey_url: str) -> tuple[web.AppRunner, int]:
    port = free_port()
    anyone = Access((), actions=False, tls=False)
    return await start_console(StoreAddress(valkey_url), anyone, "127.0.0.1", port, None, limits=limits), port


async def slow_clients(port: int, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """Connections that send the start of a request's headers and never the end."""
    slow = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /runs HTTP/1.1\r\nHost: console\r\n")
        await writer.drain()
        slow.append((reader, writer))
    await asyncio.sleep(0.2)  # until the console has read what each sent
    return slow


@pytest.mark.redis
async def test_a_client_that_does_not_finish_its_headers_is_cut_off_at_the_deadline(valkey_url: str) -> None:
    runner, port = await console_under(HURRIED, valkey_url)
    slow = await slow_clients(port, 2)
    try:
        ends = [await asyncio.wait_for(reader.read(), CEILING_S) for reader, _ in slow]  # aiohttp's own: 75 s
        assert all(end == b"" or end.startswith(b"HTTP/1.1 4") for end in ends), ends
    finally:
        for _, writer in slow:
            writer.close()
        await runner.cleanup()


@pytest.mark.redis
async def test_at_the_cap_the_oldest_slow_connection_makes_room_for_a_reader(valkey_url: str) -> None:
    runner, port = await console_under(CAPPED, valkey_url)
    slow = await slow_clients(port, CAPPED.max_connections)
    try:
        url = f"http://127.0.0.1:{port}/runs"
        status = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=CEILING_S).status)
        assert status == 200
        assert await asyncio.wait_for(slow[0][0].read(), CEILING_S) == b""  # closed to make room (no deadline yet)
        assert not any(reader.at_eof() for reader, _ in slow[1:])  # the others still held
    finally:
        for _, writer in slow:
            writer.close()
        await runner.cleanup()
