"""Leaving a frozen primary at its replacement: a command that would wait on the frozen node for as long as it is
frozen fails at the promotion instead, and the next one reaches the new primary; against three real redis-server
and three Sentinels. Also the contract the cut rests on: redis-py's connection keeps its stream writer as `_writer`."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from pi_dispatch.demo.store import free_port
from pi_dispatch.infra.events import Recorder
from pi_dispatch.infra.primarywatch import PrimaryWatch, parse_switch, primary_watch_loops
from pi_dispatch.infra.sentinel import FollowingConnection
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.testing.replicated import ReplicatedStore

CEILING_S = 90.0  # the Sentinels' vote, a TILT on a loaded machine included: only a hang reaches it


def test_a_switch_message_names_the_old_primary_of_this_store_only() -> None:
    assert parse_switch(b"pi-dispatch 10.0.0.1 6379 10.0.0.2 6379", "pi-dispatch") == ("10.0.0.1", 6379)
    assert parse_switch("pi-dispatch 10.0.0.1 6380 10.0.0.2 6379", "pi-dispatch") == ("10.0.0.1", 6380)
    assert parse_switch(b"other 10.0.0.1 6379 10.0.0.2 6379", "pi-dispatch") is None
    for hostile in (b"", b"pi-dispatch 10.0.0.1", b"pi-dispatch a b c d", b"pi-dispatch 1.1.1.1 \xd9\xa3 c d", 7):
        assert parse_switch(hostile, "pi-dispatch") is None
    assert primary_watch_loops(StoreAddress(), print) == []  # a plain store: nothing to watch


async def test_with_no_sentinel_answering_the_watch_says_so_once_and_tries_again_less_often() -> None:
    nowhere = StoreAddress(sentinels=(("127.0.0.1", free_port()), ("127.0.0.1", free_port())))
    events, pauses = Recorder(), []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 6:
            raise asyncio.CancelledError  # six rounds of refused connections are enough

    with pytest.raises(asyncio.CancelledError):
        await PrimaryWatch(nowhere, events, sleep=pause).run()
    assert pauses == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert events.names() == ["primary_watch_moved", "primary_watch_moved", "primary_watch_waiting"]


@pytest.fixture
def store() -> Iterator[ReplicatedStore]:
    with ReplicatedStore() as replicated:
        yield replicated


async def in_use_connection(client: aioredis.Redis) -> FollowingConnection:
    pool: Any = client.connection_pool
    connection = await pool.get_connection()
    await pool.release(connection)
    assert isinstance(connection, FollowingConnection)
    return connection


async def wait_forever(client: aioredis.Redis) -> Any:
    return await client.blpop(["nothing-comes"], timeout=0)  # type: ignore[misc] # redis-py's union with its sync form


async def listening(events: Recorder, times: int = 1) -> None:
    while events.names().count("primary_watch_listening") < times:
        await asyncio.sleep(0.05)


@pytest.mark.redis
@pytest.mark.slow
async def test_a_command_waiting_on_a_frozen_primary_fails_at_its_replacement_and_the_next_reaches_the_new_one(
    store: ReplicatedStore,
) -> None:
    address = store.address()
    client = address.queue_connection()  # as BullMQ's: no read timeout, a blocking pop waits as long as it is told
    assert isinstance(client, aioredis.Redis)
    events = Recorder()
    watch = asyncio.ensure_future(PrimaryWatch(address, events).run())
    old = store.primary()
    assert old.process is not None
    try:
        connection = await in_use_connection(client)
        assert connection._writer is not None  # the contract `cut` reads: redis-py's stream writer, when connected
        await asyncio.wait_for(listening(events), CEILING_S)
        waiting = asyncio.ensure_future(wait_forever(client))
        old.process.send_signal(signal.SIGSTOP)  # frozen: it never answers the pop while it stays so
        with pytest.raises(redis_errors.ConnectionError):
            await asyncio.wait_for(waiting, CEILING_S)
        assert store.primary() is not old  # the cut came with the promotion, the old node still frozen
        (switched,) = [fields for event, fields in events.events if event == "primary_switched"]
        assert switched["from"] == f"127.0.0.1:{old.port}" and switched["connectionsCut"] != 0
        await asyncio.wait_for(client.set("after", "the switch"), CEILING_S)  # the next command: the new primary's
        followed = await in_use_connection(client)
        assert (followed.host, followed.port) == ("127.0.0.1", store.primary().port)
        assert await asyncio.wait_for(client.get("after"), CEILING_S) == "the switch"
    finally:
        old.process.send_signal(signal.SIGCONT)
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await client.aclose()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_watch_whose_sentinel_goes_away_listens_on_the_next(store: ReplicatedStore) -> None:
    events = Recorder()
    watch = asyncio.ensure_future(PrimaryWatch(store.address(), events).run())
    first, second = (f"127.0.0.1:{node.port}" for node in store.watchers[:2])
    try:
        await asyncio.wait_for(listening(events), CEILING_S)
        store.kill(store.watchers[0])
        await asyncio.wait_for(listening(events, times=2), CEILING_S)
        assert [fields["sentinel"] for event, fields in events.events if event == "primary_watch_listening"] == [
            first,
            second,
        ]
        (moved,) = [fields for event, fields in events.events if event == "primary_watch_moved"]
        assert moved["sentinel"] == first and "password" not in str(moved)
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
