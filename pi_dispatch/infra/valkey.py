"""Valkey connections whose every call is bounded.

redis-py retries and waits by default; a fleet component that blocks on a dead server holds up a job
that has already finished. These clients fail fast and callers wrap each round trip in a deadline too.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Awaitable
from functools import cache
from importlib import resources
from typing import Any, Final, TypeVar, overload
from urllib.parse import quote, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, RedisError
from redis.retry import Retry

DEFAULT_VALKEY_URL: Final = "redis://127.0.0.1:6379"
OP_TIMEOUT_S: Final = 2.0
# What a store that is away, busy, read-only, out of memory or short of replicas raises: worth trying again later,
# unlike an error about what was sent (which the same call would raise again).
STORE_ERRORS: Final = (RedisError, OSError, TimeoutError)


def out_of_memory(error: BaseException) -> bool:
    """Whether the store refused a write because it holds its `maxmemory` (with `noeviction`): it answers, and
    takes reads and writes that free memory, so it is not away."""
    # redis-py raises OutOfMemoryError for a command, a script's error text for a script, a pipeline's annotated
    return isinstance(error, OutOfMemoryError) or "command not allowed when used memory" in str(error)


T = TypeVar("T")


@cache
def packaged_script(name: str) -> str:
    """The text of one of the package's Lua scripts (`pi_dispatch/lua/<name>.lua`), read once per process."""
    return resources.files("pi_dispatch").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def reply_text(value: object) -> str:
    """A reply as text: bytes decoded (what is not UTF-8 replaced, since peers may write anything), a string as
    it is, nothing as empty."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def reply_whole(value: object) -> int | None:
    """A reply that holds a whole number written in ASCII digits alone (as a JS peer writes and reads one), else
    None."""
    text = reply_text(value)
    return int(text) if text.isascii() and text.isdigit() else None


def connect(
    url: str = DEFAULT_VALKEY_URL, password: str | None = None, timeout_s: float = OP_TIMEOUT_S
) -> aioredis.Redis:
    """A client that answers or fails within timeout_s; raw bytes, since peers may write anything."""
    options: dict[str, object] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "retry_on_timeout": False,
        "health_check_interval": 0,
    }
    if password:
        options["password"] = password
    client: aioredis.Redis = aioredis.Redis.from_url(url, **options)  # type: ignore[arg-type]
    return client


_abandoned: set[asyncio.Task[Any]] = set()


def _forget(task: asyncio.Task[Any]) -> None:
    _abandoned.discard(task)
    if not task.cancelled():
        task.exception()


@overload
async def bounded(awaitable: Awaitable[T], timeout_s: float) -> T: ...
@overload
async def bounded(awaitable: Awaitable[T] | T, timeout_s: float) -> T: ...
async def bounded(awaitable: Awaitable[T] | T, timeout_s: float) -> T:
    """Await with a deadline that holds: on expiry raise TimeoutError at once.

    `asyncio.wait_for` waits for the cancelled call to finish its own cleanup, which for a client stuck
    in a connection handshake can take its whole socket timeout; the cancelled call is left to finish in
    the background instead. Takes redis-py's `Awaitable[T] | T` command results as they are typed.
    """
    if not inspect.isawaitable(awaitable):
        return awaitable
    task: asyncio.Task[T] = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.cancel()
    _abandoned.add(task)
    task.add_done_callback(_forget)
    raise TimeoutError(f"no answer within {timeout_s:g} s")


def describe(error: BaseException) -> str:
    """A one-line reason for an I/O failure, never the request that caused it."""
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def fleet_id(url: str) -> str:
    """A short name for the fleet a Valkey URL means, without its password: labels a host's containers."""
    parts = urlsplit(url)
    bare = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))
    return hashlib.sha256(bare.encode()).hexdigest()[:12]


def with_password(url: str, password: str | None) -> str:
    """The URL with the password set as its userinfo, for clients that only take a URL (BullMQ's).

    A password already in the URL wins, as the reference has it. A `unix://` URL carries it the same way
    (`unix://:secret@/run/valkey.sock`), so every client of a socket authenticates too. The result holds the
    secret: keep it in memory, never log or print it.
    """
    parts = urlsplit(url)
    if not password or parts.password:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"))


def redacted(url: str) -> str:
    """The URL with any password in it masked, for showing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:********@{host}"))


def shown(url: str) -> str:
    """The URL as a log line may carry it: password masked, and a socket's path (a path) left out."""
    return "unix://(socket)" if url.startswith("unix://") else redacted(url)
