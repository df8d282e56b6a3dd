"""Naming the store: a plain URL as before, or Sentinels that find a replicated store's primary; and clients of a
replicated store (three real redis-server and three real Sentinels) that follow a promotion and acknowledge a job
only once a replica holds it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as StoreConnectionError

from pi_dispatch.core.storeusers import WORKER
from pi_dispatch.fleet.enqueue import Enqueuer, ForgeRouter, NotReplicated
from pi_dispatch.infra.store import DEFAULT_PRIMARY_NAME, StoreAddress, database_of, parse_sentinels, store_from_environ
from pi_dispatch.infra.storeprobes import NotPrimary, PrimaryCheck, ReplicaCount
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.replicated import PRIMARY_NAME, SETTLE_CEILING_S, ReplicatedStore


def test_sentinels_are_host_port_entries_ipv6_in_brackets_each_asked_once() -> None:
    assert parse_sentinels("s1:26379, s2:26380 ,[::1]:26381,s1:26379") == (
        ("s1", 26379),
        ("s2", 26380),
        ("::1", 26381),
    )


@pytest.mark.parametrize("text", ["s1", "s1:", ":26379", "s1:0", "s1:65536", "s1:２６３７９", "s1:26379,"])
def test_an_entry_that_is_not_host_port_is_named(text: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        parse_sentinels(text)


@pytest.mark.parametrize(
    ("url", "database"),
    [("redis://h/3", 3), ("redis://h:6379", 0), ("redis://:pw@h/12", 12), ("unix:///run/v.sock?db=2", 2)],
)
def test_the_url_gives_the_database(url: str, database: int) -> None:
    assert database_of(url) == database


def test_the_environment_names_the_store_as_the_worker_reads_it() -> None:
    plain = store_from_environ({"VALKEY_URL": "redis://store:6379/1", "VALKEY_PASSWORD": "pw"})
    assert plain == StoreAddress("redis://store:6379/1", "pw")
    assert not plain.replicated and plain.queue_connection() == "redis://:pw@store:6379/1"
    replicated = store_from_environ(
        {"VALKEY_SENTINELS": "a:26379,b:26379", "VALKEY_SENTINEL_PASSWORD": "spw"}, url="redis://x/2"
    )
    assert replicated.replicated and replicated.sentinels == (("a", 26379), ("b", 26379))
    assert replicated.primary_name == DEFAULT_PRIMARY_NAME and replicated.sentinel_password == "spw"
    assert replicated.shown() == "sentinel://a:26379,b:26379/pi-dispatch/2"
    assert "spw" not in repr(replicated.shown()) and replicated.fleet_id() != plain.fleet_id()
    assert (
        replicated.fleet_id() == store_from_environ({"VALKEY_SENTINELS": "b:26379,a:26379"}, "redis://y/2").fleet_id()
    )


@pytest.fixture(scope="module")
def replicated() -> Iterator[ReplicatedStore]:
    with ReplicatedStore(password="store-password-1234") as store:
        yield store


async def no_hosts() -> list[dict[str, object]]:
    return []


@pytest.mark.redis
@pytest.mark.slow
async def test_an_acknowledged_add_is_on_a_replica_and_one_no_replica_confirms_is_not_acknowledged(
    replicated: ReplicatedStore,
) -> None:
    enqueuer = Enqueuer(replicated.address(), ForgeRouter(no_hosts), replica_wait_ms=300)
    client = replicated.address().client()
    try:
        placed = await enqueuer.enqueue_forge_job("github", forge_job(1))
        replica = next(node for node in replicated.data if node is not replicated.primary())
        copy = replicated._data_client(replica)
        assert copy.exists(f"bull:{placed.queue}:{placed.job_id}") == 1  # already there when the add answered
        copy.close()
        paused = [node for node in replicated.data if node is not replicated.primary()]
        for node in paused:  # the replicas stop reading; the primary still takes the write
            assert node.process is not None
            node.process.send_signal(19)  # SIGSTOP
        try:
            with pytest.raises(NotReplicated, match="replicas confirmed the job"):
                await enqueuer.enqueue_forge_job("github", forge_job(2))
        finally:
            for node in paused:
                assert node.process is not None
                node.process.send_signal(18)  # SIGCONT
        assert await client.exists(b"bull:pi-jobs:gh-d-2") == 1  # the primary holds it: a redelivery finds it
    finally:
        await enqueuer.close()
        await client.aclose()


@pytest.mark.redis
@pytest.mark.slow
async def test_adds_that_gathered_behind_another_are_acknowledged_only_once_a_replica_holds_them(
    replicated: ReplicatedStore,
) -> None:
    """WAIT counts what its own connection wrote: a batch written on another connection would be confirmed by the
    replicas' copy of the add before it, and lost in a failover."""
    enqueuer = Enqueuer(replicated.address(), ForgeRouter(no_hosts), replica_wait_ms=300)
    replicas = [node.process for node in replicated.data if node is not replicated.primary()]
    try:
        await enqueuer.enqueue_forge_job("github", forge_job(10))  # the queue and its connection are open
        alone = asyncio.ensure_future(enqueuer.enqueue_forge_job("github", forge_job(11)))
        gathered = [asyncio.ensure_future(enqueuer.enqueue_forge_job("github", forge_job(n))) for n in (12, 13)]
        await alone  # a replica holds it; the two that gathered behind it are being sent together now
        for process in replicas:  # and the replicas stop reading before any of them can confirm the batch
            assert process is not None
            process.send_signal(19)  # SIGSTOP
        answers = await asyncio.gather(*gathered, return_exceptions=True)
        assert [type(answer) for answer in answers] == [NotReplicated, NotReplicated], answers
    finally:
        for process in replicas:
            assert process is not None
            process.send_signal(18)  # SIGCONT
        await enqueuer.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_replica_the_sentinels_are_only_disconnected_from_still_counts(replicated: ReplicatedStore) -> None:
    """As a failover promotes a replica, it closes the Sentinels' connections to it: counted out, the old primary's
    other replica alone would confirm writes the promotion then drops."""
    primary = replicated.primary()
    replica = next(node for node in replicated.data if node is not primary)
    admin = replicated._data_client(replica)
    count = ReplicaCount(replicated.address())
    try:
        admin.config_set("maxclients", 1)  # the Sentinels cannot connect again while it is asserted
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        deadline = time.monotonic() + 30
        while "disconnected" not in str(replicated._ask(replicated.watchers[0], "REPLICAS", PRIMARY_NAME)):
            assert time.monotonic() < deadline, "the Sentinel never saw the replica disconnected"
            await asyncio.sleep(0.05)
        assert await count.required(("127.0.0.1", primary.port)) == 2
    finally:
        admin.config_set("maxclients", 10_000)
        admin.close()
        await count.close()
        replicated.wait_settled()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_write_to_a_primary_the_sentinels_no_longer_name_is_not_acknowledged() -> None:
    """The state a failover leaves for a moment: the old primary still takes writes and a replica still confirms
    them, but the Sentinels name another node (here they are pointed at a replica; in a failover, the promoted one)."""
    with ReplicatedStore() as store:
        enqueuer = Enqueuer(store.address(), ForgeRouter(no_hosts), replica_wait_ms=300)
        old = store.primary()
        try:
            await enqueuer.enqueue_forge_job("github", forge_job(1))  # the queue's connection reaches the primary
            named = next(node for node in store.data if node is not old)
            for watcher in store.watchers:
                store._ask(watcher, "REMOVE", PRIMARY_NAME)
                store._ask(watcher, "MONITOR", PRIMARY_NAME, "127.0.0.1", str(named.port), "2")
            await asyncio.sleep(ReplicaCount.ttl_s + 0.1)  # the Sentinels' last answer is kept that long
            with pytest.raises(NotPrimary, match=f"name 127.0.0.1:{named.port} primary, not 127.0.0.1:{old.port}"):
                await enqueuer.enqueue_forge_job("github", forge_job(2))
            queue = enqueuer.queues["pi-jobs"]
            assert not queue.client.connection.is_connected  # the next add asks the Sentinels again
            with pytest.raises(StoreConnectionError, match="now a slave"):  # it reaches the node they name: a replica
                await enqueuer.enqueue_forge_job("github", forge_job(3))
        finally:
            await enqueuer.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_take_counts_only_where_the_sentinels_name_the_primary() -> None:
    """A worker's take of a job on a primary that has been replaced (frozen, then woken before it is demoted) is
    not confirmed: its lock is read on the node the Sentinels name, which another worker's take holds."""
    lock = "bull:pi-jobs:gh-d-1:lock"
    with ReplicatedStore() as store:
        check = PrimaryCheck(store.address())
        old = store.primary()
        try:
            first = store._data_client(old)
            first.set(lock, "token-of-w2")
            store.wait_settled()
            assert await check.holds(lock, "token-of-w2") and not await check.holds(lock, "token-of-w1")
            named = next(node for node in store.data if node is not old)
            promoted = store._data_client(named)
            promoted.execute_command("REPLICAOF", "NO", "ONE")  # promoted: what the old primary takes is its own
            for watcher in store.watchers:
                store._ask(watcher, "REMOVE", PRIMARY_NAME)
                store._ask(watcher, "MONITOR", PRIMARY_NAME, "127.0.0.1", str(named.port), "2")
            first.set(lock, "token-of-w1")  # the woken old primary serves w1's take of the same job
            assert not await check.holds(lock, "token-of-w1")  # not where the Sentinels name the primary
            assert await check.holds(lock, "token-of-w2")
            first.close()
            promoted.close()
        finally:
            await check.close()
        for watcher in store.watchers:
            store._ask(watcher, "REMOVE", PRIMARY_NAME)
        unnamed = PrimaryCheck(store.address())
        assert not await unnamed.holds(lock, "token-of-w2")  # no primary named: not confirmed
        await unnamed.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_clients_follow_a_killed_primary_to_the_one_the_sentinels_promote(replicated: ReplicatedStore) -> None:
    address = replicated.address()
    client, queue_client = address.client(), address.queue_connection(single=True)
    assert not isinstance(queue_client, str)
    try:
        await client.set(b"before", b"1")
        await queue_client.ping()
        old = replicated.primary()
        replicated.kill(old)
        killed = time.monotonic()
        answered: dict[str, float] = {}
        while len(answered) < 2 and time.monotonic() - killed < SETTLE_CEILING_S:
            for name, ask in (("client", client.get(b"before")), ("queue", queue_client.set("after", "1"))):
                if name in answered:
                    ask.close()
                    continue
                try:
                    await ask
                    answered[name] = time.monotonic() - killed
                except Exception:
                    pass
            await asyncio.sleep(0.1)
        assert replicated.primary() is not old
        assert set(answered) == {"client", "queue"}, answered  # both reached the new primary, neither for good lost
        assert await client.get(b"before") == b"1"
    finally:
        await client.aclose()
        await queue_client.aclose()
        replicated.restart(old)
        replicated.wait_settled()


async def test_sentinels_that_name_no_primary_are_said_so_without_a_password_in_the_reason() -> None:
    address = StoreAddress(sentinels=(("127.0.0.1", 1),), sentinel_password="hush-hush", password="store-secret")
    client = address.client(timeout_s=0.5)
    try:
        with pytest.raises(Exception, match="none of the 1 Sentinels names a primary 'pi-dispatch'") as caught:
            await client.ping()
    finally:
        await client.aclose()
    assert "hush" not in str(caught.value) and "store-secret" not in str(caught.value)
    assert "VALKEY_SENTINELS" in str(caught.value)


@pytest.mark.redis
@pytest.mark.slow
async def test_a_store_user_the_url_names_logs_in_on_the_primary_the_sentinels_name(
    replicated: ReplicatedStore,
) -> None:
    """A worker's own store user (`core/storeusers.py`) through the Sentinels: its client, its BullMQ adds with the
    replicas' confirmation, and the check of a lock on the named primary all log in as that user."""
    for node in replicated.data:  # each node keeps users of its own: ACLs are not replicated
        admin = replicated._data_client(node)
        admin.execute_command(*WORKER.setuser("worker-password-1234"))
        admin.close()
    sentinels = replicated.address().sentinels
    address = StoreAddress("redis://pi-worker@127.0.0.1/0", "worker-password-1234", sentinels, PRIMARY_NAME)
    client, check = address.client(), PrimaryCheck(address)
    enqueuer = Enqueuer(address, ForgeRouter(no_hosts), replica_wait_ms=1000)
    try:
        assert await client.execute_command("ACL", "WHOAMI") == b"pi-worker"
        placed = await enqueuer.enqueue_forge_job("github", forge_job(7))
        assert not placed.deduplicated  # added, and WAITed for on the replicas the Sentinels see, as pi-worker
        await client.set("users:probe", "as-pi-worker")
        assert await check.holds("users:probe", "as-pi-worker")
    finally:
        await enqueuer.close()
        await check.close()
        await client.aclose()
