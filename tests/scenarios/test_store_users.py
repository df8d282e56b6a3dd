"""Each process as its own store user (`core/storeusers.py`) on a real redis-server: a worker, a receiver and a console
do all they do (a delivery routed and run, a job that fails retried from the console, a host drained and resumed, a
waiting job cancelled, every page read) and the store refuses none of it (its ACL LOG stays empty); and each user is
refused the store's administration and every key its process never writes."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from pi_dispatch.config.console_settings import parse_logins
from pi_dispatch.core.storeusers import CONSOLE, RECEIVER, STORE_USERS, WORKER, StoreUser, acl_file
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.testing.services import RedisServer
from pi_dispatch.web.app import console_app
from pi_dispatch.web.auth import Access
from tests.support.egress import free_port
from tests.support.receiving import github_labeled, rules_of, served
from tests.support.workers import finished_job, job_in_state, running_worker, settings_of, worker_env

pytestmark = [pytest.mark.redis]
TOKEN = "operator-token-of-some-length"
EXAMPLE = Path(__file__).resolve().parents[2] / "inventory.example"
# What none of them may run: the store's administration, and what would read or wipe every key at once.
ADMINISTRATION = (
    ("CONFIG", "GET", "requirepass"),
    ("CONFIG", "SET", "appendonly", "no"),
    ("ACL", "LIST"),
    ("FLUSHALL",),
    ("KEYS", "*"),
    ("DEBUG", "SLEEP", "0"),
    ("MONITOR",),
    ("SHUTDOWN",),
    ("REPLICAOF", "NO", "ONE"),
    ("CLIENT", "KILL", "TYPE", "normal"),
)


def as_user(url: str, user: StoreUser, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user.name}:{quote(password, safe='')}@{parts.netloc}"))


@pytest.fixture
async def store(private_redis: RedisServer) -> AsyncIterator[tuple[aioredis.Redis, dict[str, str]]]:
    """The admin's client, and each role's URL as its own user."""
    admin = connect(private_redis.url)
    passwords = {user.role: secrets.token_hex(16) for user in STORE_USERS}
    for user in STORE_USERS:
        await admin.execute_command(*user.setuser(passwords[user.role]))
    try:
        yield admin, {user.role: as_user(private_redis.url, user, passwords[user.role]) for user in STORE_USERS}
    finally:
        await admin.aclose()


async def refused(admin: aioredis.Redis, user: StoreUser, *command: str) -> bool:
    """Whether the store would refuse `command` from `user` (ACL DRYRUN: judged, never run)."""
    answer = await admin.execute_command("ACL", "DRYRUN", user.name, *command)
    return answer != b"OK"


async def test_no_store_user_may_administer_the_store_and_each_writes_only_its_own_keys(
    store: tuple[aioredis.Redis, dict[str, str]],
) -> None:
    admin, _ = store
    for user in STORE_USERS:
        assert [command for command in ADMINISTRATION if not await refused(admin, user, *command)] == [], user.name
        assert not await refused(admin, user, "INFO", "replication"), user.name  # BullMQ's version check, the gauges
        assert not await refused(admin, user, "HGETALL", "runs:rec:x"), user.name  # every one of them reads
    for own in (
        ("ZADD", "bull:pi-jobs@mini1:wait", "1", "j"),
        ("SET", "recv:seen:ab", "d"),
        ("HSET", "fleet:receivers", "r", "{}"),
    ):
        assert not await refused(admin, RECEIVER, *own), own
    for foreign in (
        ("SET", "runs:rec:x", "{}"),
        ("DEL", "host:live"),
        ("HSET", "host:h:mini1", "a", "b"),
        ("SET", "control:drain:mini1", "{}"),
        ("INCR", "budget:2026-12-07"),
        ("SET", "other:key", "1"),
        ("PUBLISH", "control:events", "x"),
    ):
        assert await refused(admin, RECEIVER, *foreign), foreign
    for own in (
        ("SET", "control:cancel:gh-1", "{}"),
        ("XADD", "actions:trail", "*", "a", "b"),
        ("SADD", "control:drained", "mini1"),
        ("PUBLISH", "control:events", "x"),
    ):
        assert not await refused(admin, CONSOLE, *own), own
    for foreign in (
        ("HSET", "host:h:mini1", "a", "b"),
        ("SET", "host:live", "x"),
        ("INCR", "budget:2026-12-07"),
        ("SET", "recv:seen:ab", "d"),
    ):
        assert await refused(admin, CONSOLE, *foreign), foreign
    assert not await refused(admin, WORKER, "SET", "runs:rec:x", "{}")


def test_the_acl_file_keeps_only_digests_and_refuses_a_short_or_unknown_password() -> None:
    written = acl_file("the-stores-own-password", {"worker": "w" * 16, "receiver": "r" * 16})
    assert "the-stores-own-password" not in written and "w" * 16 not in written
    assert hashlib.sha256(b"w" * 16).hexdigest() in written
    assert [line.split()[1] for line in written.splitlines()] == ["default", "pi-worker", "pi-receiver"]
    for admin, passwords in (
        ("short", {}),
        ("the-stores-own-password", {"console": "short"}),
        ("the-stores-own-password", {"scheduler": "s" * 16}),
    ):
        with pytest.raises(ValueError):
            acl_file(admin, passwords)


async def until_listed(client: aioredis.Redis, name: str) -> None:
    """Until the worker's first beat is in the registry the receiver routes by."""
    for _ in range(600):
        live = await read_live_hosts(client)
        if isinstance(live, LiveHosts) and name in {row.get("name") for row in live.hosts}:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{name} never reached the registry")


async def console_pages(http: TestClient[Any, Any], job_id: str) -> list[tuple[str, int]]:
    answers = []
    for path in ("/runs", "/fleet", "/limits", "/audit", f"/jobs/{job_id}", f"/jobs/{job_id}/output"):
        answers.append((path, (await http.get(path)).status))
    return answers


async def act(http: TestClient[Any, Any], csrf: str, what: str, target: str) -> str:
    answer = await http.post(f"/act/{what}/{target}", data={"csrf": csrf, "confirm": "yes"})
    assert answer.status == 200, (what, target)
    return await answer.text()


@pytest.mark.docker
@pytest.mark.slow
async def test_a_worker_a_receiver_and_a_console_each_as_its_own_user_do_all_they_do_unrefused(
    store: tuple[aioredis.Redis, dict[str, str]], tmp_path: Any, job_image: str, private_redis: RedisServer
) -> None:
    from bullmq import Queue

    admin, urls = store
    await admin.execute_command("ACL", "LOG", "RESET")
    rules = rules_of({"on": {"type": "label", "any": ["pi:run"]}, "run": {"kind": "github", "flow": "plain"}})
    env = worker_env(tmp_path, urls["worker"], job_image, "acl-mini", PI_METRICS_ADDR=f"127.0.0.1:{free_port()}")
    operator = Access(
        parse_logins(f"ops:operate:{hashlib.sha256(TOKEN.encode()).hexdigest()}"), actions=True, tls=False
    )
    console = StoreAddress(urls["console"])
    shared = Queue("pi-jobs", {"connection": private_redis.url})  # the operator's own: the test's reads
    try:
        async with running_worker(settings_of(env), beat_ms=300), served(urls["receiver"], rules) as receiver:
            await until_listed(admin, "acl-mini")
            assert (await receiver.github("issues", github_labeled("pi:run", 1), "users-1"))[0] == 202
            assert (await finished_job(shared, "gh-users-1")).returnvalue["outcome"] == "completed"  # no needs: shared
            await shared.add("github", forge_job(2, trigger={"demoExit": 1}), {"jobId": "gh-fails", "attempts": 1})
            await job_in_state(shared, "gh-fails", ("failed",))
            async with TestClient(TestServer(console_app(console.client(), console, operator, EXAMPLE))) as http:
                signed_in = await http.post("/login", data={"token": TOKEN})
                csrf = (await signed_in.text()).split('name="csrf" value="')[1].split('"')[0]
                assert await console_pages(http, "gh-users-1") == [
                    (path, 200)
                    for path in ("/runs", "/fleet", "/limits", "/audit", "/jobs/gh-users-1", "/jobs/gh-users-1/output")
                ]
                assert "1 of 1 queued" in await act(http, csrf, "retry-failed", "*")
                await act(http, csrf, "drain", "acl-mini")
                assert (await receiver.github("issues", github_labeled("pi:run", 3), "users-3"))[0] == 202
                assert "cancelled" in await act(http, csrf, "cancel", "gh-users-3")
                await act(http, csrf, "resume", "acl-mini")
            assert await job_in_state(shared, "gh-fails", ("failed",)) == "failed"
    finally:
        await shared.close()
        print("refused:", await admin.execute_command("ACL", "LOG"))  # what the store refused, when a step fails
    assert await admin.execute_command("ACL", "LOG") == []
