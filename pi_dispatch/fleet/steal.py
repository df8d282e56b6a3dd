"""Work stealing: a host with a free slot and nothing to take on its own or the shared queue takes the oldest job
waiting on a live peer's own queue that it can serve, so no capable slot idles while routed work waits.

Routing at enqueue stays the reference's decision; stealing corrects it afterwards. A host with work waiting on
its own queue says so in `steal:offers` (this port's own key: a sorted set of host queues, scored by when the
backlog was first seen), from its beat and whenever its slots fill; an idle host reads the offers older than the
stealing delay (one round trip), the offering hosts' own rows and the drains (one more: a silent, drained or
unrelated peer is passed over), the oldest few job ids of each (one more), their fields (one more), and moves
the first it can serve with the re-homing script in its steal mode: only a waiting job (never one its host has
taken, never a held one), once per wait, never a local job or a cron run bound to its host.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.capabilities import is_live, out_of_service, parse_caps, with_drains
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.keys import DRAINED_HOSTS, STEAL_OFFERS, bull_key, host_queue_name, worker_of_queue
from pi_dispatch.fleet.moves import ROUTED_FIELD, STOLEN_FIELD, JobMover
from pi_dispatch.fleet.registry import host_from_row, queue_row_reads, row_of
from pi_dispatch.fleet.snapshot import SNAPSHOT_FIELDS, drained_names
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, reply_text

if TYPE_CHECKING:
    import redis.asyncio as aioredis

OFFERS_READ: Final = 32  # offers read per try, the oldest backlog first
QUEUES_READ: Final = 8  # of those, the queues whose jobs are read
JOBS_READ: Final = 8  # job ids looked at per queue, the oldest first
# A queue's backlog, and since when, in one call: offered with the time first seen, withdrawn once empty.
_OFFER_SCRIPT: Final = """
local waiting = redis.call("LLEN", KEYS[1]) + redis.call("ZCARD", KEYS[2])
if waiting > 0 then redis.call("ZADD", KEYS[3], "NX", ARGV[1], ARGV[2]) else redis.call("ZREM", KEYS[3], ARGV[2]) end
return waiting
"""
JOB_FIELDS: Final = ("data", "timestamp", "ats", STOLEN_FIELD, "rjk", "deid")


@dataclass(frozen=True)
class Waiting:
    """A job waiting on a peer's queue, as a stealer sees it."""

    queue: str
    job_id: str
    data: object  # parsed job data; None when unreadable
    enqueued_ms: int
    stolen_already: bool
    bound: bool  # a local job or a cron run: it waits for its own host
    dedup_id: str


def parse_waiting(queue: str, job_id: str, fields: Sequence[bytes | str | None]) -> Waiting | None:
    """One job's fields as `JOB_FIELDS` lists them; None for a job that is gone."""
    data_text, stamp, taken, stolen, repeat_key, dedup = map(reply_text, fields)
    if not data_text and not stamp:
        return None
    try:
        data = json.loads(data_text) if data_text else None
    except ValueError:
        data = None
    local = isinstance(data, dict) and data.get("kind") == LOCAL_KIND
    return Waiting(
        queue=queue,
        job_id=job_id,
        data=data,
        enqueued_ms=int(stamp) if stamp.isdigit() else 0,
        stolen_already=bool(stolen) and stolen == (taken or "0"),
        bound=local or bool(repeat_key) or job_id.startswith("repeat:"),
        dedup_id=dedup,
    )


async def offer(client: aioredis.Redis, queue: str, now_ms: int, timeout_s: float = OP_TIMEOUT_S) -> int:
    """Offer this host's queue while jobs wait on it (withdraw it when none do); returns how many wait."""
    keys = [bull_key(queue, "wait"), bull_key(queue, "prioritized"), STEAL_OFFERS]
    return int(await bounded(client.eval(_OFFER_SCRIPT, len(keys), *keys, str(now_ms), queue), timeout_s))


async def read_offers(
    client: aioredis.Redis, seen_before_ms: int, count: int = OFFERS_READ, timeout_s: float = OP_TIMEOUT_S
) -> list[tuple[str, int]]:
    """Queues offered since before `seen_before_ms`, the oldest backlog first: (queue, since)."""
    raw = await bounded(
        client.zrangebyscore(STEAL_OFFERS, "-inf", seen_before_ms, start=0, num=count, withscores=True), timeout_s
    )
    return [(reply_text(member), int(score)) for member, score in raw]


async def read_waiting(
    client: aioredis.Redis, queues: Sequence[str], count: int = JOBS_READ, timeout_s: float = OP_TIMEOUT_S
) -> list[Waiting]:
    """The oldest `count` jobs waiting on each queue, oldest first per queue, in two round trips."""
    if not queues:
        return []
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.lrange(bull_key(queue, "wait"), -count, -1)
    listed = await bounded(pipe.execute(), timeout_s)
    ids = [
        (queue, reply_text(job_id)) for queue, found in zip(queues, listed, strict=True) for job_id in reversed(found)
    ]
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for queue, job_id in ids:
        pipe.hmget(bull_key(queue, job_id), list(JOB_FIELDS))
    answers = await bounded(pipe.execute(), timeout_s)
    found = (parse_waiting(queue, job_id, fields) for (queue, job_id), fields in zip(ids, answers, strict=True))
    return [waiting for waiting in found if waiting is not None]


def steal_peers(rows: Iterable[Mapping[str, object]], caps: frozenset[str]) -> frozenset[str]:
    """The peers whose queues a steal may take from: live and not draining (a silent host's queue is re-homing's; a
    draining or unhealthy one's moves anyway; a stuck one's is just where a steal helps), sharing a capability with
    this host (a job routed to a peer needs some of the peer's capabilities; one this host can run needs only its
    own). A worker keeps these names from its beat, not the rows: its memory stays flat as the fleet grows."""
    return frozenset(
        str(row.get("name"))
        for row in rows
        if is_live(row) and not out_of_service(row) and parse_caps(row.get("caps")) & caps
    )


def peer_queues(offers: Sequence[tuple[str, int]], own_queue: str, peers: Collection[str]) -> list[str]:
    """The offered queues a steal may take from, at most QUEUES_READ: those of `peers` (`steal_peers`)."""
    chosen = []
    for queue, _ in offers:
        host = worker_of_queue(queue)
        if host is None or queue == own_queue or host not in peers:
            continue
        chosen.append(queue)
    return chosen[:QUEUES_READ]


async def read_peers(
    client: aioredis.Redis, hosts: Collection[str], caps: frozenset[str], now_ms: int
) -> frozenset[str]:
    """Of these offering hosts, those a steal may take from (`steal_peers`), judged by their own rows (the routing
    fields a snapshot keeps) and the operator's drains as they are now, in one round trip. A worker reads the few
    hosts that offer, never the whole registry: its memory and its idle load stay flat as the fleet grows."""
    listed = sorted(set(hosts))
    if not listed:
        return frozenset()
    pipe = client.pipeline(transaction=False)
    queue_row_reads(pipe, listed, SNAPSHOT_FIELDS)
    pipe.smembers(DRAINED_HOSTS)
    *replies, members = await bounded(pipe.execute(raise_on_error=False), OP_TIMEOUT_S)
    rows: list[dict[str, object]] = []
    for name, reply in zip(listed, replies, strict=True):
        row = row_of(reply, SNAPSHOT_FIELDS)
        read = host_from_row(name, row, now_ms) if isinstance(row, dict) and row else None  # gone or no hash: skip
        if isinstance(read, dict):
            rows.append(read)
    drained = drained_names(members)
    return steal_peers(rows if drained is None else with_drains(rows, drained), caps)


@dataclass
class Stealer:
    """One named host's stealing: `find` the job it would take, `take` it onto its own queue."""

    client: aioredis.Redis
    name: str
    after_ms: int  # a job must have waited this long: a peer about to free a slot keeps its job
    caps: frozenset[str]  # this host's capability tokens
    refuses: Callable[[object], bool]  # the host's own pre-spend refusals, so it never steals what it refuses
    now: Callable[[], int]
    _mover: JobMover = field(init=False)

    def __post_init__(self) -> None:
        self._mover = JobMover(self.client)
        self.queue = host_queue_name(self.name)

    async def offer(self) -> int:
        return await offer(self.client, self.queue, self.now())

    async def find(self) -> list[Waiting]:
        """The waiting jobs this host could run from its peers' queues, the oldest first (none stolen yet)."""
        now = self.now()
        offers = await read_offers(self.client, now)
        offering = {host for queue, _ in offers if (host := worker_of_queue(queue)) is not None}
        queues = peer_queues(offers, self.queue, await read_peers(self.client, offering, self.caps, now))
        candidates = [job for job in await read_waiting(self.client, queues) if self._serves(job)]
        return sorted(candidates, key=lambda job: job.enqueued_ms)

    def stealable(self, job: Waiting) -> bool:
        return self.now() - job.enqueued_ms >= self.after_ms

    async def take(self, job: Waiting) -> bool:
        """Move the job to this host's own queue, next to be taken; False when another host was first."""
        result = await self._mover.move(job.queue, self.queue, job.job_id, job.dedup_id, steal=True)
        return isinstance(result, str)

    def _serves(self, job: Waiting) -> bool:
        return not job.bound and not job.stolen_already and isinstance(job.data, dict) and not self.refuses(job.data)


def routed_to(job_data: dict[str, Any] | None) -> str | None:
    """The queue a stolen job was routed to, from its stored fields (None when it was never stolen)."""
    value = (job_data or {}).get(ROUTED_FIELD)
    text = reply_text(value) if isinstance(value, bytes | str) else ""
    return text or None
