"""Valkey connections whose every call is bounded.

redis-py retries and waits by default; a fleet component that blocks on a dead server holds up a job
that has already finished. These clients fail fast and callers wrap each round trip in a deadline too.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from importlib import resources
from typing import Any, Final, TypeVar, overload
from urllib.parse import quote, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.client import Pipeline
from redis.backoff import NoBackoff
from redis.retry import Retry

from pi_dispatch.core.errors import PiDispatchError

DEFAULT_VALKEY_URL: Final = "redis://127.0.0.1:6379"
OP_TIMEOUT_S: Final = 2.0
KEYS_PER_SCRIPT: Final = 1000  # a script over many keys holds the store a few ms at most
# What a store that is away, busy, read-only, out of memory or short of replicas raises: worth trying again later,
# unlike an error about what was sent (which the same call would raise again). Connection errors include a Sentinel
# that names no primary, a server still LOADING its data and our own NotPrimary (`infra/storeprobes.py`).
OUTAGE_CLASSES: Final = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,
    redis_errors.OutOfMemoryError,
    redis_errors.TryAgainError,
    redis_errors.ClusterDownError,
    OSError,
    TimeoutError,
)
# The same states, when the store reports them as a reply's text (a script's error, a command redis-py has no class
# for): the first word of the error.
OUTAGE_WORDS: Final = frozenset({"MASTERDOWN", "NOREPLICAS", "LOADING", "READONLY", "OOM", "BUSY", "TRYAGAIN"})
FULL_TEXT: Final = "command not allowed when used memory"


class StoreUnavailable(PiDispatchError):
    """The store cannot take this call now: away, timed out, loading, read-only, out of memory, without its primary
    or its replicas. The one error an outage produces: what catches it knows the store is the cause, and a bug in our
    own code (a TypeError, a KeyError) is never mistaken for one. Raised by the clients of `connect` and
    `StoreAddress.client`, by `bounded` and within `outages_named`, each made by `unavailable`: it is also of the
    class of the error it stands for (redis-py's OutOfMemoryError, a TimeoutError, ...), with its text, so what names
    that precise error still catches it."""

    cause: BaseException | None = None

    @property
    def full(self) -> bool:
        """The store answers but holds its `maxmemory` (with `noeviction`): it takes reads and writes that free
        memory, so it is not away."""
        return self.cause is not None and out_of_memory(self.cause)


_JOINED: dict[type[BaseException], type[StoreUnavailable]] = {}


def _unavailable_as(cause_type: type[BaseException]) -> type[StoreUnavailable]:
    """StoreUnavailable joined with the class of its cause, named as the cause (a log's reason reads the same); one
    class per cause's class, made once."""
    if (joined := _JOINED.get(cause_type)) is None:
        joined = _JOINED[cause_type] = type(
            cause_type.__name__, (StoreUnavailable, cause_type), {"__module__": cause_type.__module__}
        )
    return joined


def unavailable(cause: BaseException) -> StoreUnavailable:
    """The StoreUnavailable an outage's error stands for."""
    if isinstance(cause, StoreUnavailable):
        return cause
    try:
        error = _unavailable_as(type(cause))(*cause.args)
    except TypeError:  # a class whose constructor wants more than its args: the outage, without its class
        error = StoreUnavailable(describe(cause))
    error.cause = cause
    return error


# What a call to the store may raise that is no bug of ours: an outage, or the store refusing the command itself (a
# key of another type, written by hand or by a peer; a script's own refusal). Reads of what peers write catch both.
STORE_FAULTS: Final = (StoreUnavailable, redis_errors.ResponseError)


def is_outage(error: BaseException) -> bool:
    """Whether an error of the store, or of the way to it, says it cannot take calls now (not what was sent)."""
    if isinstance(error, (StoreUnavailable, *OUTAGE_CLASSES)):
        return True
    return isinstance(error, redis_errors.ResponseError) and _first_word(error) in OUTAGE_WORDS


def is_store_fault(error: BaseException) -> bool:
    """Whether an error is one of `STORE_FAULTS` once named: an outage, or the store refusing the command itself."""
    return is_outage(error) or isinstance(error, redis_errors.ResponseError)


@contextmanager
def outages_named() -> Iterator[None]:
    """Within: an outage's error (of redis-py, of the socket) raised as the StoreUnavailable it stands for; any other
    error goes on as it is."""
    try:
        yield
    except StoreUnavailable:
        raise
    except (redis_errors.RedisError, OSError) as error:
        if not is_outage(error):
            raise
        raise unavailable(error) from error


def _first_word(error: BaseException) -> str:
    text = str(error)
    # a pipeline's error is annotated first ("Command # 2 (EVALSHA …) of pipeline caused error: OOM …")
    text = text.rsplit("caused error: ", 1)[-1]
    return text.split(" ", 1)[0].strip()


def out_of_memory(error: BaseException) -> bool:
    """Whether the store refused a write because it holds its `maxmemory` (with `noeviction`): it answers, and
    takes reads and writes that free memory, so it is not away."""
    if isinstance(error, StoreUnavailable) and error.cause is not None:
        error = error.cause
    # redis-py raises OutOfMemoryError for a command, a script's error text for a script, a pipeline's annotated
    return isinstance(error, redis_errors.OutOfMemoryError) or FULL_TEXT in str(error)


class StorePipeline(Pipeline):
    """A pipeline of a StoreClient: an outage while it executes is a StoreUnavailable."""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        with outages_named():
            return await super().execute(raise_on_error)


class StoreClient(aioredis.Redis):
    """redis-py's client whose every outage is a StoreUnavailable (`is_outage`); any other error (a key of another
    type, a script's own error) is redis-py's, as it was."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        with outages_named():
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> StorePipeline:
        return StorePipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


T = TypeVar("T")


@cache
def packaged_script(name: str) -> str:
    """The text of one of the package's Lua scripts (`pi_dispatch/lua/<name>.lua`), read once per process."""
    return resources.files("pi_dispatch").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


async def per_key_script(client: Any, name: str, keys: Sequence[str]) -> list[Any]:
    """A packaged script that reads each of its keys (`rows`, `present`), run over many keys KEYS_PER_SCRIPT a call,
    every call in one round trip: each call's reply, in order."""
    if not keys:
        return []
    text = packaged_script(name)  # sent whole: a SHA would cost a SCRIPT EXISTS round trip first
    async with client.pipeline(transaction=False) as pipe:
        for start in range(0, len(keys), KEYS_PER_SCRIPT):
            part = keys[start : start + KEYS_PER_SCRIPT]
            pipe.eval_ro(text, len(part), *part)  # read-only: a store user that may only read its keys may run it
        return list(await pipe.execute())


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
    client: aioredis.Redis = StoreClient.from_url(url, **options)  # type: ignore[arg-type]
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
    """Await a round trip to the store with a deadline that holds: on expiry raise StoreUnavailable at once, as for
    any outage the call itself meets.

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
        with outages_named():  # BullMQ's own clients raise redis-py's errors
            return task.result()
    task.cancel()
    _abandoned.add(task)
    task.add_done_callback(_forget)
    raise unavailable(TimeoutError(f"no answer within {timeout_s:g} s"))


def describe(error: BaseException) -> str:
    """A one-line reason for an I/O failure, never the request that caused it."""
    if isinstance(error, StoreUnavailable) and error.cause is not None:
        error = error.cause
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
