"""The webhook surface: one endpoint per registered forge (`forges.registered`), answered exactly as the reference
answers them.

The path alone picks the endpoint (each forge's `path`; anything else is the default forge's), never a header, so a
request cannot choose which check it faces. Each endpoint runs its checks in its forge's order (the order is part
of the wire contract: one forge answers 401 for a missing signature before 400 for missing headers), then asks
the forge about the actor where that forge needs it, runs the gate, fans out replicas and enqueues each copy on the
queue the router picks. 2xx means handled; a delivery the store cannot take now is
spooled on disk and answered 202 (`receiver/spool.py`), drained in order once the store is back; 503 asks the forge
to redeliver (a full spool, an undecided authority).
Logs hold ids, names and reasons only: never a body, a login, an email or a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web
from redis.exceptions import RedisError

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.fleet.enqueue import Enqueuer
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.valkey import describe, is_store_fault
from pi_dispatch.receiver.forges import registered
from pi_dispatch.receiver.forges.authority import Undecided
from pi_dispatch.receiver.forges.spec import JSON_TYPE, Answered, Delivery, Forge, Resolver, Served
from pi_dispatch.receiver.guard import ConnectionLimits, GuardedServer
from pi_dispatch.receiver.metrics import ReceiverMetrics
from pi_dispatch.receiver.replay import ReplayGuard
from pi_dispatch.receiver.routes import Drop
from pi_dispatch.receiver.rules import Rules
from pi_dispatch.receiver.spool import Entry, Spool, SpoolFull

FORGES: Final = registered()
BY_NAME: Final[Mapping[str, Forge]] = {forge.name: forge for forge in FORGES}
BY_PATH: Final[Mapping[str, Forge]] = {forge.path: forge for forge in FORGES if forge.path is not None}
DEFAULT: Final = next(forge for forge in FORGES if forge.path is None)  # the forge that answers every other path


@functools.lru_cache(maxsize=64)
def _encoded(pairs: tuple[tuple[str, str], ...]) -> bytes:
    """A compact JSON body, encoded once: the receiver answers with a handful of fixed bodies."""
    return json.dumps(dict(pairs), separators=(",", ":"), ensure_ascii=False).encode()


REPLAY_PAUSE_S: Final = 1.0
# How long a forge's answer on who may start a job is trusted (a revoked write access lasts at most this long), and
# how many answers are kept.
AUTHORITY_KEPT_S: Final = 60.0
AUTHORITY_KEPT_MAX: Final = 4096

# Refusals worth a log line: a caller without the secret (401), one not allowed (403), a body too slow (408) or too
# large (413).
REFUSALS_LOGGED: Final = frozenset({401, 403, 408, 413})


def answer(status: int, body: Mapping[str, Any] | None = None, close: bool = False) -> web.Response:
    if status == 204 or body is None:
        response = web.Response(status=status)
    else:
        response = web.Response(status=status, body=_encoded(tuple(body.items())), content_type=JSON_TYPE)
    if close:
        response.force_close()
    return response


def endpoint_path(raw_path: str) -> str:
    path = raw_path.split("?", 1)[0]
    return path[:-1] if len(path) > 1 and path.endswith("/") else path


@dataclass
class Receiver:
    """Every forge's endpoint over one enqueuer; `served` holds each served forge's credential, own id and authority
    lookup by its name (a forge not in it answers 404); `rules` is swapped in place when the triggers file changes."""

    rules: Rules
    enqueuer: Enqueuer
    log: EventLog
    served: Mapping[str, Served] = field(default_factory=dict)
    error_log: EventLog | None = None
    clock: Callable[[], float] = time.time
    metrics: ReceiverMetrics | None = None
    spool: Spool | None = None
    replays: ReplayGuard | None = None  # None: signed bodies are not remembered (a receiver without a store client)
    authority_kept_s: float = AUTHORITY_KEPT_S
    store_refusing: bool = False  # the last add, or the spool's last replay, failed: /readyz says so
    _spooling: asyncio.Lock = field(default_factory=asyncio.Lock)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _verdicts: dict[str, tuple[float, object]] = field(default_factory=dict)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        forge = BY_PATH.get(endpoint_path(request.raw_path), DEFAULT)
        response = await self._answer(request, forge)
        if self.metrics is not None:
            self.metrics.answered(forge.name, response.status)
        return response

    async def _answer(self, request: web.BaseRequest, forge: Forge) -> web.StreamResponse:
        served = self.served.get(forge.name)
        if served is None or served.credential is None:
            return answer(404, {"error": f"{forge.name} webhooks are not configured"})
        try:
            return await self._serve(request, forge, served)
        except Answered as answered:
            if answered.status in REFUSALS_LOGGED:  # the reason the forge is told, never the body or a secret
                reason = (answered.body or {}).get("error", "")
                self.log("delivery_refused", {"forge": forge.name, "status": answered.status, "reason": reason})
            return answer(answered.status, answered.body, answered.close)

    async def _serve(self, request: web.BaseRequest, forge: Forge, served: Served) -> web.StreamResponse:
        """One forge's checks in its own order, the authority it needs, its gate, then every replica enqueued."""
        hint = forge.delivery_hint(request.headers)
        try:
            delivery = await forge.verify(request, served.credential, self.clock())
            if await self._seen_before(forge.name, delivery):
                return answer(202, {"status": "deduplicated"})
            rules, own = self.rules.of(forge.name), served.identity
            verdict: object = None  # a gate reads None as "not asked" (where its authority is in the payload)
            lookup = forge.authority
            if lookup.needed(delivery, rules, self.rules.known_flows, own):
                resolver = served.resolver
                verdict = await self._ask(
                    resolver, lookup.event, lookup.error, delivery.id, *lookup.subject(delivery.payload)
                )
            found = forge.gate(delivery, rules, self.rules.known_flows, own, verdict)
            return await self._enqueue(forge.name, found, delivery.id)
        except Answered:
            raise
        except Exception as error:  # broad: the request's edge; a bug on one delivery answers 500, logged
            return self._internal(
                forge.internal_event, forge.internal_fields(hint, error), {"error": forge.internal_error}
            )

    async def _seen_before(self, forge: str, delivery: Delivery) -> bool:
        """Whether this signed body was delivered in the window under another id (`receiver/replay.py`); a store
        that cannot say lets it through: the job's own deduplication still holds, and the spool keeps it."""
        if self.replays is None or not delivery.signature:
            return False
        try:
            replayed = await self.replays.replayed(forge, delivery.signature, delivery.id)
        except (RedisError, OSError) as error:
            self.log("replay_check_skipped", {"delivery": delivery.id, "reason": describe(error)})
            return False
        if replayed:
            self.log("delivery_replayed", {"forge": forge, "delivery": delivery.id})
        return replayed

    def _internal(self, event: str, fields: Mapping[str, Any], body: Mapping[str, Any]) -> web.Response:
        (self.error_log or self.log)(event, fields)
        return answer(500, body)

    async def _ask(self, resolver: Resolver | None, event: str, error: str, delivery: object, *args: Any) -> object:
        """The forge's verdict on the actor (a determinate one kept for `authority_kept_s`: a burst of one
        person's deliveries asks once); Undecided answers 503 so the forge asks again."""
        if resolver is None:
            raise Answered(503, {"error": error})
        key = json.dumps([event, *args], sort_keys=True, default=str)
        now = self.clock()
        kept = self._verdicts.get(key)
        if kept is not None and now - kept[0] < self.authority_kept_s:
            return kept[1]
        verdict = await resolver(*args)
        if isinstance(verdict, Undecided):
            self.log(event, {"delivery": delivery, "reason": verdict.reason})
            raise Answered(503, {"error": error})
        if len(self._verdicts) >= AUTHORITY_KEPT_MAX:  # the oldest answers go first: a flood of names stays bounded
            for stale in list(self._verdicts)[: AUTHORITY_KEPT_MAX // 10]:
                del self._verdicts[stale]
        self._verdicts.pop(key, None)
        self._verdicts[key] = (now, verdict)
        return verdict

    async def _place(self, kind: str, found: Mapping[str, Any], delivery: object, **shown_too: Any) -> int:
        """Every replica of the job on its routed queue; how many were new (the rest deduplicated). Raises what the
        store raised."""
        replicas = found.get("replicas")
        count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 1 else 1
        created = 0
        flow = {"flow": found["flow"]} if "flow" in found else {}
        shown = {"delivery": delivery, "repo": found.get("repo"), "target": BY_NAME[kind].target(found), **flow}
        for replica in range(1, count + 1):
            copy = found if count == 1 else {**found, "replica": replica}
            placed = await self.enqueuer.enqueue_forge_job(kind, copy)
            if placed.deduplicated:
                self.log("deduplicated", {**shown, "jobId": placed.job_id, "survivingJobId": placed.kept})
            else:
                created += 1
        if created:
            self.log("enqueued", {**shown, "replicas": created, **shown_too})
        return created

    async def _enqueue(self, kind: str, found: object, delivery: object) -> web.Response:
        """202 queued (or deduplicated) once every replica is on its queue; 202 spooled when the store could not
        take them (or deliveries already wait in the spool, which keeps their order); 503 when neither can."""
        if isinstance(found, Drop):
            self.log("dropped", {"delivery": delivery, "reason": found.reason})
            return answer(204)
        assert isinstance(found, dict)
        spooling = self.spool is not None and self.spool.enabled
        if spooling and self.spool is not None and self.spool.depth:
            return await self._spooled(kind, found, str(delivery), "behind-spool")
        try:
            created = await self._place(kind, found, delivery)
        except (PiDispatchError, RedisError, OSError) as error:  # the store away or refusing the add; no job id
            self.log("enqueue_failed", {"delivery": delivery, "reason": describe(error)})
            self.store_refusing = is_store_fault(error)
            if not spooling or not self.store_refusing:
                return answer(503, {"error": "enqueue-failed"})
            return await self._spooled(kind, found, str(delivery), "store-refused")
        self.store_refusing = False
        return answer(202, {"status": "queued" if created else "deduplicated"})

    async def _spooled(self, kind: str, found: Mapping[str, Any], delivery: str, why: str) -> web.Response:
        assert self.spool is not None
        try:
            async with self._spooling:
                entry = await asyncio.to_thread(self.spool.put, kind, found, delivery)
        except SpoolFull as full:
            self.log("spool_full", {"delivery": delivery, "entries": self.spool.depth, "held": str(full)})
            self._count("refused")
            return answer(503, {"error": "spool-full"})
        except OSError as error:
            self.log("spool_unwritable", {"delivery": delivery, "reason": error.strerror, "errno": error.errno})
            self._count("refused")
            return answer(503, {"error": "enqueue-failed"})
        if entry is not None:
            self.log("delivery_spooled", {"delivery": delivery, "why": why, "entries": self.spool.depth})
            self._count("spooled")
        self._wake.set()
        return answer(202, {"status": "spooled"})

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.spool_outcomes.labels(outcome).inc()

    async def replay(self, pause_s: float = REPLAY_PAUSE_S) -> None:
        """Drain the spool into the store, oldest first, for as long as the receiver runs: at once when a delivery
        is spooled, then every pause_s while the store refuses (one log line per outage, not one per try)."""
        spool = self.spool
        if spool is None:
            return
        waiting, replayed = False, 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause_s)
            self._wake.clear()
            try:
                while (entry := spool.oldest()) is not None:
                    outcome = await self._replayed(spool, entry, waiting)
                    if outcome == "waiting":
                        waiting = True
                        break
                    waiting, replayed = False, replayed + (outcome == "replayed")
            except OSError as error:  # the spool's folder refusing a read: the drain goes on at the next pause
                (self.error_log or self.log)("spool_replay_failed", {"reason": describe(error)})
            if replayed and not spool.depth:
                self.log("spool_drained", {"replayed": replayed})
                replayed = 0

    async def _replayed(self, spool: Spool, entry: Entry, waiting: bool) -> str:
        waited_ms = max(0, int(self.clock() * 1000) - entry.at_ms)
        try:
            await self._place(entry.kind, entry.job, entry.delivery, spooled=True, waitedMs=waited_ms)
        except Exception as error:  # broad: the store's fault waits; anything else is about the entry (or a bug on it)
            if is_store_fault(error):
                self.store_refusing = True
                if not waiting:
                    self.log("spool_replay_blocked", {"entries": spool.depth, "reason": describe(error)})
                return "waiting"
            async with self._spooling:
                spool.set_aside(entry.path, describe(error), entry)
            self._count("set-aside")
            return "set-aside"
        self.store_refusing = False
        async with self._spooling:
            try:
                await asyncio.to_thread(spool.done, entry)
            except OSError as failure:  # queued all the same; a file left behind is deduplicated at the next boot
                self.log("spool_unwritable", {"entry": entry.path.name, "reason": failure.strerror})
        self._count("replayed")
        return "replayed"


def application(
    receiver: Receiver, limits: ConnectionLimits, capped: Callable[[str, str], None] = lambda _cap, _action: None
) -> GuardedServer:
    """The low-level aiohttp server: every method and path reaches `Receiver.handle`, no router in between, under
    the deadlines and connection caps of `limits` (`receiver/guard.py`)."""
    # lingering: after a 413 the unread body is drained for at most a second (aiohttp's default is ten), so a
    # sender that declares a huge body cannot hold a connection open past its answer.
    return GuardedServer(receiver.handle, limits, capped, lingering_time=1.0)
