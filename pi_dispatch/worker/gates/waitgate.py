"""The wait gate: a job's `waitFor` conditions, checked before it spends a slot, held without spending an attempt.

Table lookups refuse first (unreadable, an undeclared profile, an `after` beyond the maximum); an `after` in
the future holds the job until then; then the profiles' checks run in writing order under a local check slot
and, for a declared name, a fleet lease `wait:check:<i>`, so the fleet never runs more checks at once than
PI_WAIT_CHECK_SLOTS. A fleet lease is granted under the store's epoch (`fleet/epoch.py`) and re-read before
each check: once a failover has given the store a new epoch the lease may have been lost and granted to another
host, so the job is held briefly (not a fault) instead of running a check the fleet did not grant. A hold
moves the job to delayed with its hold state in its data and raises BullMQ's DelayedError; the arithmetic of when and
for how long is `core/waits.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.jobs import FORGE_KINDS, QueuedJob, target_separator
from pi_dispatch.core.keys import WAIT_CHECK_LEASE_PREFIX
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.waits import (
    AFTER_NEAR_MS,
    HOLD_KEY,
    HoldState,
    WaitBounds,
    WaitConditions,
    WaitDecision,
    after_check,
    after_denied_slot,
    decide_wait,
    parse_after_instant,
    read_conditions,
)
from pi_dispatch.fleet.epoch import store_epoch
from pi_dispatch.fleet.lease import LEASE_OP_TIMEOUT_S, FleetLease, Lease
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import STORE_FAULTS
from pi_dispatch.worker.gates.scripts import Refusal, is_argument, run_wait_check, script_environment, usable_script

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.config.worker_settings import WorkerSettings

ABORTED_RECHECK_MS: Final = 1_000
MAX_TARGET_CHARS: Final = 1_024
UNLEASED: Final = ""  # the epoch of a check slot that took no fleet lease (no declared worker name)


def wait_target(data: Mapping[str, Any]) -> str | None:
    """The id-only label a wait check is given: `<repo><sep><number>`, or None for a non-forge job."""
    kind, repo, target = data.get("kind"), data.get("repo"), data.get("target")
    if (
        not (isinstance(kind, str) and kind in FORGE_KINDS)
        or not isinstance(repo, str)
        or not isinstance(target, Mapping)
    ):
        return None
    number = target.get("number")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    return f"{repo}{target_separator(kind, target.get('type'))}{number}"


@dataclass
class WaitGate:
    """Go (None), a refusal, or a hold (the job moved to delayed and DelayedError raised) for one job."""

    settings: WorkerSettings
    client: aioredis.Redis
    now: Callable[[], int]
    jitter: Callable[[], float]
    log: EventLog = discard
    slots: asyncio.Semaphore = field(init=False)
    bounds: WaitBounds = field(init=False)
    lease: FleetLease = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        # one slot is always left for running jobs, so checks never starve the machine
        self.slots = asyncio.Semaphore(min(settings.wait_check_slots, max(1, settings.concurrency - 1)))
        self.lease = FleetLease(self.client, settings.worker_name)
        self.bounds = WaitBounds(
            settings.wait_interval_ms, settings.wait_max_ms, settings.wait_max_checks, settings.wait_max_faults
        )

    def _conditions(self, data: Mapping[str, Any]) -> WaitConditions | Refusal:
        """The job's conditions, or the table-lookup refusal that needs no check: unreadable, unknown, too far."""
        conditions = read_conditions(data.get("waitFor"))
        if conditions is None:
            return Refusal(Reason.WAIT_UNREADABLE)
        for profile in conditions.profiles:
            if profile not in self.settings.wait_profiles:
                return Refusal(Reason.WAIT_PROFILE_UNKNOWN, profile)
        if conditions.after is not None:
            instant = parse_after_instant(conditions.after)
            if instant.epoch_ms is None:
                return Refusal(Reason.WAIT_UNREADABLE)
            if instant.epoch_ms - self.now() > self.settings.wait_after_max_ms:
                return Refusal(Reason.WAIT_AFTER_BEYOND_MAX)
        return conditions

    async def admit(self, job: QueuedJob, token: str, data: Mapping[str, Any]) -> Refusal | None:
        """Go (None) or a refusal; a hold raises DelayedError after moving the job to delayed."""
        conditions = self._conditions(data)
        if isinstance(conditions, Refusal):
            return conditions
        if conditions.after is not None:
            instant = parse_after_instant(conditions.after).epoch_ms
            if instant is not None and instant - self.now() > AFTER_NEAR_MS:
                await self._hold(job, token, data, None, instant)
        if not conditions.profiles:
            return None
        target = wait_target(data)
        if target is None:
            return Refusal(Reason.WAIT_UNREADABLE)
        if not is_argument(target, MAX_TARGET_CHARS):
            return Refusal(Reason.JOB_TARGET_INVALID)
        state = HoldState.from_data(data.get(HOLD_KEY))
        decision = await self.run_checks(conditions.profiles, target, str(job.id))
        if decision is None:
            step = after_denied_slot(state, self.now(), self.bounds, self.jitter())
            if step.reason:
                return Refusal(step.reason)
            await self._hold(job, token, data, step.state, self.now() + step.delay_ms)
            return None  # not reached: _hold raises
        if decision.verdict == "go":
            return None
        if decision.aborted:
            await self._hold(job, token, data, state, self.now() + ABORTED_RECHECK_MS)
        step = after_check(state, decision, self.now(), self.bounds, self.jitter())
        if step.reason:
            return Refusal(step.reason)
        await self._hold(job, token, data, step.state, self.now() + step.delay_ms)
        return None  # not reached: _hold raises

    async def run_checks(self, profiles: tuple[str, ...], target: str, job_id: str) -> WaitDecision | None:
        """The profiles' checks under a check slot: their decision, or None when no slot was free."""
        async with self._check_slot(len(profiles), job_id) as epoch:
            if epoch is None:
                return None
            return await self._check_all(profiles, target, epoch)

    async def _check_all(self, profiles: tuple[str, ...], target: str, epoch: str) -> WaitDecision:
        """Each profile's check in writing order, stopping at the first that does not say go, or held (aborted)
        once the lease it runs under is no longer trusted."""
        decision = decide_wait(0)
        for profile in profiles:
            if not await self._lease_trusted(epoch):
                self.log("wait_lease_untrusted", {"reason": "the store failed over since the lease was granted"})
                return decide_wait(None, aborted=True)
            script = usable_script(self.settings.wait_profiles[profile])
            if script is None:
                decision = decide_wait(None, failed_to_start=True)
            else:
                timeout_s = self.settings.wait_check_timeout_ms / 1000
                decision = await run_wait_check(script, target, timeout_s, script_environment(self.settings.script_env))
            if decision.verdict != "go":
                return decision
        return decision

    @contextlib.asynccontextmanager
    async def _check_slot(self, profiles: int, job_id: str) -> AsyncIterator[str | None]:
        """A local check slot, and with a declared name a fleet lease `wait:check:<i>` (the reference's protocol,
        `fleet/lease.py`); yields the store epoch the lease was granted under (UNLEASED without one), or None when
        no slot was free."""
        if self.slots.locked():
            yield None
            return
        async with self.slots:
            if not self.settings.worker_name_declared:
                yield UNLEASED
                return
            ttl_ms = (profiles + 1) * self.settings.wait_check_timeout_ms
            lease = await self._lease(ttl_ms, job_id)
            try:
                yield None if lease is None or lease[0].key is None else lease[1]
            finally:
                if lease is not None:
                    with contextlib.suppress(*STORE_FAULTS):  # away: the lease's TTL ends it
                        await self.lease.release(lease[0])

    async def _lease(self, ttl_ms: int, job_id: str) -> tuple[Lease, str] | None:
        """A free fleet check lease and the epoch it is granted under (read first: a failover between the two
        reads leaves the lease under the older epoch, so it is distrusted at once rather than trusted wrongly). A
        fault grants nothing: the slots it may have taken are released, and the job waits."""
        slots = self.settings.wait_check_slots
        try:
            epoch = await store_epoch(self.client, LEASE_OP_TIMEOUT_S)
            if epoch is None:
                return None
            lease = await self.lease.acquire(WAIT_CHECK_LEASE_PREFIX, slots, job_id, ttl_ms)
        except STORE_FAULTS as error:
            self.log("wait_lease_unreachable", {"reason": type(error).__name__})
            return self.lease.unsure(WAIT_CHECK_LEASE_PREFIX, slots, job_id), ""
        return (lease, epoch) if lease is not None else None

    async def _lease_trusted(self, epoch: str) -> bool:
        """Whether the store still has the epoch the lease was granted under (always, without a fleet lease)."""
        if epoch == UNLEASED:
            return True
        try:
            return await store_epoch(self.client, LEASE_OP_TIMEOUT_S) == epoch
        except STORE_FAULTS:  # cannot be told: not trusted
            return False

    async def _hold(
        self, job: QueuedJob, token: str, data: Mapping[str, Any], state: HoldState | None, until_ms: int
    ) -> None:
        """Move the job to delayed until until_ms without spending an attempt, keeping its hold state."""
        from bullmq import DelayedError

        if state is not None:
            await job.updateData({**data, HOLD_KEY: state.to_data()})
        await job.moveToDelayed(int(until_ms), token)
        self.log(
            "wait_hold",
            {
                "jobId": str(job.id),
                "delayMs": max(0, int(until_ms) - self.now()),
                "checks": state.checks if state else 0,
            },
        )
        raise DelayedError()
