"""This host's side of the limits the fleet shares with Node hosts, in the reference's gate order.

1. A job inside a pause window waits, delayed to the window's end: no record, nothing counted.
2. A job whose scope runs as many jobs as its `concurrent` allows (on this host, then fleet-wide for a forge job on
   a named host: the lease `slot:s:<hash16>:<i>`) waits 5 s, never refused; a local folder runs one job at a time.
3. Just before its container: the day's tokens against PI_DAILY_TOKEN_CAP, then its start counted in its scope's
   ledger and then the fleet's (`fleet/budgets.py`), refusing `scope-cap`, `over-budget` or `soft-hold`; then its
   dollars held (`spend.py`), refusing `dollar-cap`. A start whose container never ran is given back, its dollars
   too; one that ran counts, whatever its end. Its tokens are counted after, and its dollars settled.

The files are read at boot (a bad one is a config error, exit 2) and watched; a bad edit keeps the last good one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from pi_dispatch.core.budget import (
    LIMITS_ROW_FIELD,
    WindowState,
    hash16,
    limits_signature,
    scope_ledger,
    scope_slot_prefix,
    tokens_counted,
)
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.core.exitauth import VERIFIED
from pi_dispatch.core.keys import BUDGET_PREFIX
from pi_dispatch.core.pausewindows import (
    PAUSED_UNTIL,
    PauseWindow,
    PauseWindowsError,
    paused_until,
    read_pause_windows,
)
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.runusage import RunUsage
from pi_dispatch.core.scopedlimits import (
    ScopedLimits,
    ScopedLimitsError,
    concurrency_for,
    is_forge_job,
    job_scope,
    read_scoped_limits,
)
from pi_dispatch.fleet.budgets import Ledger, Reservation, add_tokens, refund, reserve, tokens_spent
from pi_dispatch.fleet.lease import FleetLease, Lease
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.filewatch import FileWatch, Refused
from pi_dispatch.infra.valkey import STORE_FAULTS
from pi_dispatch.worker.gates.scripts import Refusal
from pi_dispatch.worker.gates.spend import Holds, Spend, SpendRefusal

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.core.jobs import QueuedJob
    from pi_dispatch.fleet.limitview import WindowUse

SCOPE_BUSY_RECHECK_MS: Final = 5_000
CLAIM_SLACK_MS: Final = 300_000  # a scope's lease outlives the longest container it can cover by five minutes


@dataclass(frozen=True)
class LimitFile:
    """One of the limit files: the setting naming it, how it reads, and the watch's event names."""

    variable: str
    setting: str
    parse: Callable[[str], Any]
    errors: type[Exception]
    event: str

    def path(self, settings: WorkerSettings) -> Path | None:
        path: Path | None = getattr(settings, self.setting)
        return path

    def read(self, path: Path) -> Any:
        """What the file holds, or Refused saying why not (no content, no path)."""
        try:
            return self.parse(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise Refused(f"unreadable ({error.strerror or type(error).__name__})") from None
        except self.errors as error:
            raise Refused(str(error)) from None


SCOPED: Final = LimitFile(
    "PI_SCOPED_LIMITS_FILE", "scoped_limits_file", read_scoped_limits, ScopedLimitsError, "scoped_limits"
)
PAUSES: Final = LimitFile(
    "PI_PAUSE_WINDOWS_FILE", "pause_windows_file", read_pause_windows, PauseWindowsError, "pause_windows"
)
LimitFiles = tuple[ScopedLimits, tuple[PauseWindow, ...]]


def absent_limit_files(settings: WorkerSettings) -> list[str]:
    """The limit files the settings name that are not on this machine, each said with its fix (for a check made
    away from the host the role writes them on)."""
    return [
        f"{file.variable}: {path} is not on this machine; the worker refuses to start until it is (the role writes "
        f"it from pi_dispatch_worker_{file.event})"
        for file in (SCOPED, PAUSES)
        if (path := file.path(settings)) is not None and not path.exists()
    ]


def read_limit_files(settings: WorkerSettings, *, present_only: bool = False) -> LimitFiles:
    """The scoped limits and pause windows as the worker boots with them; ConfigError naming each bad file (with
    `present_only`, a file that is not there is passed over: `absent_limit_files` says so)."""
    problems: list[Problem] = []
    read: dict[str, Any] = {}
    for file in (SCOPED, PAUSES):
        if (path := file.path(settings)) is None or (present_only and not path.exists()):
            continue
        try:
            read[file.variable] = file.read(path)
        except Refused as refused:
            source = getattr(settings, "sources", {}).get(file.variable, "")  # a handed-over copy keeps no sources
            fix = "fix the file, or unset the variable"
            problems.append(Problem(file.variable, f"{path.name}: {refused}", source, fix))
    if problems:
        raise ConfigError(problems)
    return read.get(SCOPED.variable, ScopedLimits()), read.get(PAUSES.variable, ())


@dataclass(frozen=True)
class ScopeHold:
    """A scope's slot held by one job: on this host (`local`), and fleet-wide (`lease`) where it takes one."""

    local: str | None = None
    lease: Lease | None = None


@dataclass
class Limits:
    settings: WorkerSettings
    client: aioredis.Redis
    now: Callable[[], int]
    log: EventLog
    scoped: ScopedLimits = field(default_factory=ScopedLimits)
    pauses: tuple[PauseWindow, ...] = ()
    running: Counter[str] = field(default_factory=Counter)  # scope -> its jobs running here
    watches: list[FileWatch[Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        settings = self.settings
        self.lease = FleetLease(self.client, settings.worker_name) if settings.worker_name_declared else None
        self.claim_ms = settings.job_timeout_ms + CLAIM_SLACK_MS
        self.spend = Spend(settings, self.client, self.now, self.log, self.claim_ms)
        self._swap_scoped(self.scoped)  # said at boot as on each reload

    def watch(self) -> None:
        """Watch the files for edits (each swapped in when it reads well)."""
        for file, swap in ((SCOPED, self._swap_scoped), (PAUSES, self._swap_pauses)):
            if (path := file.path(self.settings)) is not None:
                self.watches.append(FileWatch(path, partial(file.read, path), swap, self.log, file.event))
        for watch in self.watches:
            watch.start()

    def row_facts(self) -> dict[str, str]:
        """The row's `limits`: what this host's caps and limit files are, so hosts that differ are seen."""
        files = [self.scoped.canonical(), [window.canonical() for window in self.pauses]]
        digest = hash16(json.dumps(files)) if files != [[], []] else ""
        settings = self.settings
        caps = limits_signature(settings.job_caps, settings.soft_hold_pct, settings.daily_token_cap, digest)
        return {LIMITS_ROW_FIELD: caps} | self.spend.fingerprint(self.scoped)

    async def windows(self) -> list[WindowUse]:
        """Every window this host counts in, as the store holds them now (one round trip), for the metrics."""
        from pi_dispatch.fleet.limitview import read_limits  # the operator's view, loaded with metrics on only

        settings = self.settings
        view = await read_limits(
            self.client,
            settings.job_caps,
            settings.daily_token_cap,
            self.scoped,
            rows=(),
            now_ms=self.now(),
            dollars=settings.dollar_caps,
        )
        return [*view.windows, *(use for scope in view.scopes for use in scope.windows)]

    def _swap_scoped(self, scoped: ScopedLimits) -> None:
        self.scoped = scoped
        if scoped.dollar_rows() and self.settings.max_cost_usd is None:  # their jobs are refused config-refused
            self.log("scoped_limits_dollar_rows_without_cap", {"rows": len(scoped.dollar_rows())})

    def _swap_pauses(self, pauses: tuple[PauseWindow, ...]) -> None:
        self.pauses = pauses

    def stop(self) -> None:
        for watch in self.watches:
            watch.stop()

    def paused_until(self, data: Mapping[str, Any]) -> int | None:
        """When a paused job may run (epoch ms), or None when no window holds it now."""
        return paused_until(self.pauses, data, self.now()) if self.pauses else None

    async def unless_paused(self, job: QueuedJob, token: str, data: Mapping[str, Any]) -> None:
        """A job inside a pause window goes to the delayed set until its end (BullMQ's DelayedError is raised)."""
        if (until := self.paused_until(data)) is not None:
            with contextlib.suppress(*STORE_FAULTS):  # what `job` shows, never worth a failed attempt
                await job.updateProgress({PAUSED_UNTIL: until})
            await _delay(job, token, until)

    @contextlib.asynccontextmanager
    async def scope_slot(self, job: QueuedJob, token: str, data: Mapping[str, Any]) -> AsyncIterator[None]:
        """Within: the job's scope slot held. A busy scope delays the job SCOPE_BUSY_RECHECK_MS instead."""
        hold = await self.take_scope(str(job.id), data)
        if hold is None:
            await _delay(job, token, self.now() + SCOPE_BUSY_RECHECK_MS)
        try:
            yield
        finally:
            await self.give_scope(hold)

    async def take_scope(self, job_id: str, data: Mapping[str, Any]) -> ScopeHold | None:
        """The job's scope slot, or None when its scope is busy (the job waits SCOPE_BUSY_RECHECK_MS)."""
        row = self.scoped.row_of(data)
        scope = row.scope if row is not None else job_scope(data)  # every key is named by the matched row
        limit = concurrency_for(data, row)
        if scope is None or limit is None:
            return ScopeHold()
        if self.running[scope] >= limit:
            self.log("scope_busy_deferred", {"jobId": job_id, "kind": _kind(data), "delayMs": SCOPE_BUSY_RECHECK_MS})
            return None
        self.running[scope] += 1
        if row is None or row.concurrent is None or self.lease is None or not is_forge_job(data):
            return ScopeHold(local=scope)
        prefix = scope_slot_prefix(row.scope)
        try:
            lease = await self.lease.acquire(prefix, row.concurrent, job_id, self.claim_ms)
        except STORE_FAULTS as fault:  # the fleet bound degrades to this host's: granted, and released after
            self.log("fleet_lease_unavailable", {"reason": type(fault).__name__})
            return ScopeHold(local=scope, lease=self.lease.unsure(prefix, row.concurrent, job_id))
        except BaseException:  # cancelled mid-call: this host's count must not keep a slot nobody holds
            self._give_local(scope)
            raise
        if lease is None:
            self._give_local(scope)
            fields = {"jobId": job_id, "kind": "forge", "delayMs": SCOPE_BUSY_RECHECK_MS, "where": "fleet"}
            self.log("scope_busy_deferred", fields)
            return None
        return ScopeHold(local=scope, lease=lease)

    def _give_local(self, scope: str) -> None:
        self.running[scope] -= 1
        if self.running[scope] <= 0:
            del self.running[scope]

    async def give_scope(self, hold: ScopeHold) -> None:
        if hold.local is not None:
            self._give_local(hold.local)
        if hold.lease is not None and self.lease is not None:
            with contextlib.suppress(*STORE_FAULTS):  # its TTL ends it
                await self.lease.release(hold.lease)

    def ledgers(self, data: Mapping[str, Any]) -> list[Ledger]:
        """Where the job's start is counted, narrowest first: its scope's row (when it caps a window), the fleet's."""
        settings = self.settings
        row = self.scoped.row_of(data)
        ledgers = [Ledger(scope_ledger(row.scope), row.caps, scope=row.scope)] if row and row.caps.active() else []
        return [*ledgers, Ledger(BUDGET_PREFIX, settings.job_caps, settings.soft_hold_pct)]

    async def reserve(
        self, job_id: str, data: Mapping[str, Any], capabilities: frozenset[str] | None = frozenset()
    ) -> Holds | Refusal:
        """Count the job's start, then hold its dollars; or the refusal of a cap (raises the store's error, nothing
        then held: the attempt is retried). `capabilities`: what the job's image declares it can do."""
        scoped = self.scoped  # one reading of the file for the whole decision
        cap = self.settings.daily_token_cap
        if cap is not None and (spent := await tokens_spent(self.client, self.now())) >= cap:
            self.log("over_token_budget", {"jobId": job_id, "spent": spent, "cap": cap})
            return Refusal(Reason.DAILY_TOKEN_CAP, words={"spent": str(spent), "cap": str(cap)})
        holds = self.spend.plan(job_id, data, scoped, capabilities)
        if isinstance(holds, Refusal):
            return holds
        reservation = await reserve(self.client, self.ledgers(data), self.now())
        if (refused := self._refusal(job_id, data, reservation)) is not None:
            return refused
        holds.held = reservation.held
        try:
            refused = await self.spend.hold(job_id, holds)
        except BaseException:  # a fault or a cancel: the job's starts are given back, nothing of it held
            await self.unspent(holds)
            raise
        if refused is not None:  # every job-count window given back too: the fleet's no longer counts it
            await self.unspent(holds)
        return refused or holds

    def _refusal(self, job_id: str, data: Mapping[str, Any], reservation: Reservation) -> Refusal | None:
        if (ledger := reservation.refused_by) is None:
            return None
        verdict = reservation.verdict
        fields: dict[str, object] = {
            "jobId": job_id,
            "window": str(verdict.window),
            "reserved": verdict.reserved,
            "cap": verdict.cap,
        }
        words = {"window": str(verdict.window), "reserved": str(verdict.reserved), "cap": str(verdict.cap)}
        if ledger.scope is not None:
            self.log("over_scope_budget", {**fields, "scopeKey": ledger.prefix, "kind": _kind(data)})
            scope = str(data.get("repo")) if _kind(data) != "local" else "this folder"
            return SpendRefusal(Reason.SCOPE_CAP, words=words | {"scope": scope}, held=False)
        if verdict.state is WindowState.SOFT_HOLD:
            self.log("soft_hold", {**fields, "pct": self.settings.soft_hold_pct})
            return SpendRefusal(Reason.SOFT_HOLD, words=words | {"pct": str(self.settings.soft_hold_pct)}, held=True)
        self.log("over_budget", fields)
        return SpendRefusal(Reason.OVER_BUDGET, words=words, held=True)

    async def unspent(self, holds: Reservation) -> None:
        """No container started: the start is given back to every window it was counted in, the dollars too."""
        with contextlib.suppress(*STORE_FAULTS):
            await asyncio.shield(refund(self.client, holds))
        if isinstance(holds, Holds):
            await asyncio.shield(self.spend.release(holds))

    async def settle(
        self, job_id: str, holds: Reservation, usage: RunUsage, *, trusted: bool, flow: object
    ) -> dict[str, object]:
        """A run's end counted: its tokens, and its dollars settled. What the record says of them."""
        await self.count_tokens(job_id, usage.total_tokens, verified=usage.exit_auth == VERIFIED)
        fields: dict[str, object] = {"budgetReserved": holds.holds(BUDGET_PREFIX)}
        if isinstance(holds, Holds):
            fields["dollars"] = await self.spend.settle(job_id, holds, usage, trusted=trusted, flow=flow)
        return fields

    async def count_tokens(self, job_id: str, total: int | None, *, verified: bool) -> None:
        """A run's tokens, into the day's counter when it is capped (never fails the run); a run whose exit line
        is not verified counts at least its share of the day (`tokens_counted`)."""
        cap = self.settings.daily_token_cap
        if cap is None:
            return
        counted = tokens_counted(total, verified, cap, self.settings.daily_cap)
        if not counted:
            return
        try:
            await add_tokens(self.client, counted, self.now())
        except STORE_FAULTS as fault:
            self.log("token_spend_error", {"jobId": job_id, "reason": type(fault).__name__})

    async def sweep_holds(self, *, own: bool = False) -> None:
        """Dollar holds left open by a worker that died mid-run settled at the floor: those whose lease has ended
        (each beat, any host), and with `own` those of this worker's earlier run (at boot, its containers gone)."""
        try:
            await self.spend.sweep(own=own)
        except STORE_FAULTS as fault:
            self.log("dollar_holds_sweep_skipped", {"reason": "valkey-fault", "detail": type(fault).__name__})

    async def sweep_claims(self, reaped: bool) -> None:
        """At boot: the scope leases and dollar holds a dead run of this worker left, once its containers are known
        gone."""
        await self.sweep_holds(own=reaped)
        if self.lease is None or not (rows := self.scoped.concurrent_rows()):
            return
        if not reaped:
            self.log("scope_claims_sweep_skipped", {"reason": "reaper-skipped"})
            return
        keys = [f"{scope_slot_prefix(row.scope)}{index}" for row in rows for index in range(row.concurrent or 0)]
        try:
            swept = await self.lease.sweep(keys)
        except STORE_FAULTS as fault:
            self.log("scope_claims_sweep_skipped", {"reason": "valkey-fault", "detail": type(fault).__name__})
            return
        if swept:
            self.log("scope_claims_swept", {"count": swept})


async def _delay(job: QueuedJob, token: str, until_ms: int) -> NoReturn:
    from bullmq import DelayedError

    await job.moveToDelayed(int(until_ms), token)
    raise DelayedError()


def _kind(data: Mapping[str, Any]) -> str:
    return "local" if data.get("kind") == "local" else "forge"
