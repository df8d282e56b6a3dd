"""The operator's facts in the store: a job's cancel and a host's drain, and the message that announces each.

A fact is a key (`control:cancel:<stem>`, `control:drain:<name>`), so it outlives any process: a worker that
restarts, or a job that is handed to another host, meets it again. A message on `control:events` only says "look
now", so every worker acts within a moment; each beat reads the facts again, in case a message was missed while
the store was away. This port's own keys: a Node worker neither reads nor honours them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.keys import CONTROL_CHANNEL, DRAINED_HOSTS, cancel_key, drain_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded

if TYPE_CHECKING:
    import redis.asyncio as aioredis

CANCEL_TTL_MS: Final = 7 * 86_400_000  # a cancel outlives any job's lock, stall and retry window


@dataclass(frozen=True)
class Drain:
    """A host's drain: since when, and (epoch ms) when its running jobs are stopped and put back, if ever."""

    since_ms: int
    deadline_ms: int | None = None

    def as_json(self) -> str:
        return json.dumps({"since": self.since_ms, "deadline": self.deadline_ms}, separators=(",", ":"))

    @classmethod
    def parse(cls, raw: object) -> Drain | None:
        """The fact as stored; a value that cannot be read still drains (the fact's presence is what counts)."""
        if raw is None:
            return None
        try:
            value = json.loads(raw if isinstance(raw, str | bytes) else "")
        except ValueError:
            value = None
        if not isinstance(value, Mapping):
            return cls(0)
        since, deadline = value.get("since"), value.get("deadline")
        return cls(since if isinstance(since, int) else 0, deadline if isinstance(deadline, int) else None)


def message(kind: str, subject: str) -> str:
    return json.dumps({kind: subject}, separators=(",", ":"))


def parse_message(raw: object) -> tuple[str, str] | None:
    """(kind, subject) of a control message, or None for anything else on the channel."""
    try:
        value = json.loads(raw if isinstance(raw, str | bytes) else "")
    except ValueError:
        return None
    if not isinstance(value, dict) or len(value) != 1:
        return None
    ((kind, subject),) = value.items()
    return (kind, subject) if kind in ("cancel", "drain", "resume") and isinstance(subject, str) else None


async def request_cancel(client: aioredis.Redis, job_id: str, now_ms: int, timeout_s: float = OP_TIMEOUT_S) -> None:
    """The cancel as a fact, then the message: whoever holds the job stops it, now or when it next meets it."""
    pipe = client.pipeline(transaction=True)
    pipe.set(cancel_key(record_stem(job_id)), json.dumps({"jobId": job_id, "at": now_ms}), px=CANCEL_TTL_MS)
    pipe.publish(CONTROL_CHANNEL, message("cancel", job_id))
    await bounded(pipe.execute(), timeout_s)


async def clear_cancel(client: aioredis.Redis, job_id: str, timeout_s: float = OP_TIMEOUT_S) -> None:
    await bounded(client.delete(cancel_key(record_stem(job_id))), timeout_s)


async def cancelled_of(client: aioredis.Redis, job_ids: Sequence[str], timeout_s: float = OP_TIMEOUT_S) -> list[str]:
    """Which of these jobs carry a cancel, in one round trip."""
    if not job_ids:
        return []
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.exists(cancel_key(record_stem(job_id)))
    found = await bounded(pipe.execute(), timeout_s)
    return [job_id for job_id, present in zip(job_ids, found, strict=True) if present]


async def request_drain(
    client: aioredis.Redis, worker: str, drain: Drain | None, timeout_s: float = OP_TIMEOUT_S
) -> None:
    """Drain (a Drain) or resume (None) a host: the fact and the routers' index of it first, then the message."""
    pipe = client.pipeline(transaction=True)
    if drain is None:
        pipe.delete(drain_key(worker))
        pipe.srem(DRAINED_HOSTS, worker)
    else:
        pipe.set(drain_key(worker), drain.as_json())
        pipe.sadd(DRAINED_HOSTS, worker)
    pipe.publish(CONTROL_CHANNEL, message("resume" if drain is None else "drain", worker))
    await bounded(pipe.execute(), timeout_s)


async def read_drain(client: aioredis.Redis, worker: str, timeout_s: float = OP_TIMEOUT_S) -> Drain | None:
    raw: Any = await bounded(client.get(drain_key(worker)), timeout_s)
    return Drain.parse(raw)
