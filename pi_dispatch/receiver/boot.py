"""The receiver's life: boot in the reference's order, serve, reload the triggers live, stop on a signal.

Boot: the configuration (exit 2 on a refusal); the identity of each forge the reference connects first (GitHub's,
when served); the store judged (a refused password is a config error, exit 2; no answer within 20 s exits 1); the
queue and the router; the other forges' identities; listen; watch the triggers file. A forge identity that cannot
be had exits 2 when the forge refused and 1 when it did not answer within the retry window. A liveness endpoint,
when configured, listens apart from the webhook port.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from pi_dispatch.core.descriptors import descriptors_needed
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem
from pi_dispatch.fleet.enqueue import Enqueuer, store_router
from pi_dispatch.fleet.receivers import REPORT_EVERY_S, ReceiverState, report_receiver
from pi_dispatch.fleet.storeview import refuse_an_evicting_store
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.primarywatch import primary_watch_loops
from pi_dispatch.infra.store import StoreAddress, store_of
from pi_dispatch.infra.supervise import Loop, OnFailure, Supervisor
from pi_dispatch.infra.valkey import STORE_FAULTS, bounded, describe
from pi_dispatch.receiver.endpoints import ReceiverConfig
from pi_dispatch.receiver.forges import registered
from pi_dispatch.receiver.forges.identity import with_retry
from pi_dispatch.receiver.forges.spec import Retried, Served
from pi_dispatch.receiver.guard import ConnectionLimits, raise_descriptor_limit
from pi_dispatch.receiver.metrics import ReceiverMetrics
from pi_dispatch.receiver.replay import ReplayGuard
from pi_dispatch.receiver.rules import Rules
from pi_dispatch.receiver.server import Receiver, application
from pi_dispatch.receiver.spool import MB, Spool
from pi_dispatch.triggers.file import Trigger
from pi_dispatch.triggers.watch import TriggerWatch

STORE_WINDOW_S: Final = 20.0
CAPPED_LOG_INTERVAL_S: Final = 60.0  # a flood of capped connections is one log line a minute, counted
# What a store says when the credentials are wrong: a fact about the configuration, not an outage.
REFUSALS: Final = ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password", "without any password")


@dataclass
class Stop:
    """Set by a signal handler; `signal` names what stopped the receiver."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    signal: str = ""

    def set(self, signal: str) -> None:
        self.signal = signal
        self.event.set()


async def judge_store(store: StoreAddress, window_s: float = STORE_WINDOW_S) -> None:
    """Return once the store answers; ConfigError when it refuses the credentials; TimeoutError after window_s."""
    client = store.client()
    deadline = time.monotonic() + window_s
    try:
        while True:
            try:
                await bounded(client.ping(), 2)
                return
            except STORE_FAULTS as error:
                if any(word in str(error) for word in REFUSALS):
                    raise ConfigError(
                        [Problem("VALKEY_PASSWORD", "the store refuses it", fix="set the store's password")]
                    ) from None
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"Valkey did not answer within {window_s:g} s ({describe(error)})") from None
            await asyncio.sleep(1)
    finally:
        with contextlib.suppress(*STORE_FAULTS):
            await bounded(client.aclose(), 2)


def _failed(error_log: EventLog, error: BaseException) -> int:
    fields: dict[str, Any] = {"reason": str(error)}
    if isinstance(error, ForgeCallError):
        fields |= {k: v for k, v in (("status", error.status), ("requestId", error.request_id)) if v is not None}
    error_log("receiver_start_failed", fields)
    return int(getattr(error, "exit_code", ExitStatus.FAILURE))


async def _health(
    config: ReceiverConfig, store: Any, metrics: ReceiverMetrics | None, receiver: Receiver
) -> web.AppRunner | None:
    """GET /livez (the loop answers), /readyz (a delivery would be kept: the store answers, or the spool has room;
    with the store's state and the spool's depth) and /metrics, apart from the webhook port."""
    address = config.settings.health_addr
    if not address or metrics is None:
        return None

    async def live(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(_: web.Request) -> web.Response:
        spool = receiver.spool
        assert spool is not None
        try:
            await bounded(store.ping(), 1)
            state = "refusing-writes" if receiver.store_refusing else "ok"
        except STORE_FAULTS:
            state = "unreachable"
        spooling = spool.enabled and spool.bytes < spool.max_bytes
        status = "ok" if state == "ok" else "spooling" if spooling else "store-unreachable"
        shown = {"status": status, "store": state, "spool": {"entries": spool.depth, "bytes": spool.bytes}}
        return web.json_response(shown, status=200 if status != "store-unreachable" else 503)

    async def scraped(_: web.Request) -> web.Response:
        body, content_type = metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/livez", live)
    app.router.add_get("/readyz", ready)
    app.router.add_get("/metrics", scraped)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    await web.TCPSite(runner, host.strip("[]"), int(port)).start()
    return runner


async def _connect(
    config: ReceiverConfig, client: ForgeClient, retried: Retried, log: EventLog, found: _Found, *, early: bool
) -> None:
    """Each armed forge of this phase connected in the reference's order (its own id, its authority lookup); a
    forge that says why it is not served says so."""
    for forge in registered():
        if forge.early != early:
            continue
        arm = config.arms.get(forge.name)
        if arm is None:
            if forge.unarmed:
                log(f"{forge.name}_arm_skipped", {"reason": forge.unarmed})
            continue
        found.served[forge.name] = await forge.connect(arm, client, retried, log)


@dataclass
class _Found:
    served: dict[str, Served] = field(default_factory=dict)
    store: Any = None
    enqueuer: Enqueuer | None = None


def _receiver(
    config: ReceiverConfig, found: _Found, log: EventLog, error_log: EventLog, metrics: ReceiverMetrics | None
) -> Receiver:
    assert found.enqueuer is not None
    replays = ReplayGuard(found.store) if found.store is not None else None
    return Receiver(
        config.rules, found.enqueuer, log, found.served, error_log=error_log, metrics=metrics, replays=replays
    )


def _limits(config: ReceiverConfig, log: EventLog) -> ConnectionLimits:
    """The settings' deadlines and caps, with this process's open-file limit raised to what the caps need."""
    settings = config.settings
    needed = descriptors_needed(settings.max_connections)
    allowed = raise_descriptor_limit(needed)
    if allowed < needed:
        log("descriptors_short", {"allowed": allowed, "needed": needed, "fix": f"LimitNOFILE={needed} in the unit"})
    return ConnectionLimits.of(settings)


def _capped(log: EventLog, metrics: ReceiverMetrics | None) -> Callable[[str, str], None]:
    """What a connection that met a cap is told to: the metric, and at most one log line a minute with the counts."""
    unlogged: dict[str, int] = {}
    last = [-CAPPED_LOG_INTERVAL_S]

    def capped(cap: str, action: str) -> None:
        if metrics is not None:
            metrics.capped.labels(cap, action).inc()
        unlogged[f"{cap}-{action}"] = unlogged.get(f"{cap}-{action}", 0) + 1
        if time.monotonic() - last[0] >= CAPPED_LOG_INTERVAL_S:
            last[0] = time.monotonic()
            log("connections_capped", dict(unlogged))
            unlogged.clear()

    return capped


async def serve(
    config: ReceiverConfig,
    log: EventLog,
    stop: Stop,
    error_log: EventLog,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> int:
    """Boot, serve until stop, shut down. Returns the exit status."""
    settings = config.settings
    client, found = ForgeClient(), _Found()
    store = store_of(settings)

    def retried(forge: str, attempt: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        return with_retry(forge, attempt, settings.identity_retry_seconds * 1000, log, sleep=sleep)

    try:
        await _connect(config, client, retried, log, found, early=True)
        await judge_store(store)
        found.store = store.client()
        await refuse_an_evicting_store(found.store)
        router = store_router(found.store, log=log)
        found.enqueuer = Enqueuer(store, router)
        await _connect(config, client, retried, log, found, early=False)
    except (ConfigError, ForgeCallError, TimeoutError, OSError) as error:
        await _close(client, found)
        return _failed(error_log, error)
    metrics = ReceiverMetrics(config.served) if settings.health_addr else None
    receiver = _receiver(config, found, metrics.observe(log) if metrics else log, error_log, metrics)
    receiver.spool = Spool(_spool_dir(config), settings.spool_max_mb * MB, receiver.log).load()
    if metrics is not None:
        metrics.watch_spool(receiver.spool)
    server = application(receiver, _limits(config, log), _capped(log, metrics))
    runner = web.ServerRunner(server, access_log=None)
    health: web.AppRunner | None = None
    try:
        await runner.setup()
        await web.TCPSite(runner, settings.bind, settings.port, reuse_address=True).start()
        health = await _health(config, found.store, metrics, receiver)
    except OSError as error:
        await runner.cleanup()
        await _close(client, found)
        return _failed(error_log, error)
    log("receiver_started", {"port": settings.port, "bind": settings.bind, "valkey": store.shown()})

    def swap(triggers: list[Trigger]) -> None:
        receiver.rules = Rules.from_triggers(triggers)

    watch = TriggerWatch(config.triggers_path, settings.triggers_file, swap, log)
    watch.start(config.triggers_text)
    name = f"{socket.gethostname()}:{settings.port}"
    supervisor = Supervisor(error_log)
    supervisor.start(
        Loop("spool-replay", receiver.replay, OnFailure.RESTART, "a new drain starts at the oldest spooled"),
        Loop(
            "report",
            functools.partial(_report, found.store, receiver, name),
            OnFailure.RESTART,
            "each report stands alone",
        ),
        *primary_watch_loops(store, log),
    )
    fault = await supervisor.until_stopped(stop.event)
    log("receiver_stopping", {"signal": stop.signal} if fault is None else {"reason": fault})
    watch.stop()
    await supervisor.close()
    await runner.cleanup()
    if health is not None:
        await health.cleanup()
    await _close(client, found)
    return ExitStatus.OK if fault is None else ExitStatus.FAILURE


async def _report(store: Any, receiver: Receiver, name: str) -> None:
    """The receiver's line in the store, for `top`, every few seconds; a store that refuses it is left for the next."""
    spool = receiver.spool
    assert spool is not None
    while True:
        state = ReceiverState(name, spool.depth, spool.bytes, receiver.store_refusing, wall_ms())
        with contextlib.suppress(*STORE_FAULTS):
            await bounded(report_receiver(store, state), 1)
        await asyncio.sleep(REPORT_EVERY_S)


def _spool_dir(config: ReceiverConfig) -> Path:
    """PI_RECEIVER_SPOOL_DIR, relative to the working directory unless absolute."""
    path = Path(config.settings.spool_dir)
    return path if path.is_absolute() else Path.cwd() / path


async def _close(client: ForgeClient, found: _Found) -> None:
    await client.close()
    if found.enqueuer is not None:
        with contextlib.suppress(*STORE_FAULTS):
            await found.enqueuer.close()
    if found.store is not None:
        with contextlib.suppress(*STORE_FAULTS):
            await bounded(found.store.aclose(), 2)
