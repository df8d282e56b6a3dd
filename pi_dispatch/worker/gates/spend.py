"""What a job may spend in dollars, held before its container and settled after it, as current Node hosts do it
(upstream-limits §3.5-3.6), on the same keys (`fleet/dollars.py`).

Before the container (after the job-count windows): the job's cap, the smaller of the host's PI_MAX_COST_USD and
its trigger's `maxCostUsd` (which can only lower it), is held in each dollar window that applies to it
(`core/dollarplan.py`); a window past its cap refuses the job `dollar-cap`, every window given back. A capped job
whose image does not declare `costCap` is refused first (its runner would not know its cap). An image that declares
`exitAuth` is handed a key on stdin to sign its exit line with; a line that does not verify is read as absent.

After it: the hold settles to the run's metered cost only when its exit line is trusted (the worker did not stop
the container, the line says the code the container exited with, and signed when it could be) and complete; else
the whole hold is kept (the floor). No container: the hold is given back. A worker that dies in between leaves its
hold open where a restart or any peer settles it at the floor once its lease ends.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.dollarplan import FPUSD_ROW_FIELD, DollarLedger, dollar_ledgers, host_usd_fingerprint
from pi_dispatch.core.exitauth import (
    COST_CAP_CAPABILITY,
    EXIT_AUTH_CAPABILITY,
    EXIT_AUTH_CHANNEL,
    EXIT_AUTH_VARIABLE,
    new_exit_key,
)
from pi_dispatch.core.jobs import COST_CAP_VARIABLE
from pi_dispatch.core.money import (
    FLOOR,
    METERED,
    dollar_settlement,
    effective_cost_cap_micros,
    format_micros,
    model_settlement,
)
from pi_dispatch.core.reasons import Reason
from pi_dispatch.core.runusage import RunUsage
from pi_dispatch.core.scopedlimits import ScopedLimits
from pi_dispatch.fleet.budgets import Reservation
from pi_dispatch.fleet.dollars import (
    DollarHold,
    DollarRefusal,
    hold_dollars,
    own_open_holds,
    release,
    settle,
    take_open_holds,
)
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.valkey import STORE_FAULTS
from pi_dispatch.worker.gates.scripts import Refusal

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.config.worker_settings import WorkerSettings

REFUNDED, UNRESERVED = "refunded", "unreserved"
SETTLE_OUTCOMES: Final = {1: "dollar_settle_key_missing", 2: "dollar_settle_clamped"}


@dataclass
class Holds(Reservation):
    """What an attempt holds before its container: its job-count windows, and its dollars."""

    dollars: DollarHold | None = None
    cap: int | None = None  # the job's cost cap in micro-dollars (None: not capped)
    ledgers: list[DollarLedger] = field(default_factory=list)  # the dollar windows it holds its cap in
    exit_key: str | None = field(default=None, repr=False)  # the key its exit line is signed with
    environment: dict[str, str] = field(default_factory=dict)  # PI_MAX_COST_MICROS, PI_EXIT_AUTH


@dataclass(frozen=True)
class SpendRefusal(Refusal):
    """A refusal before the container, saying whether the fleet's job window still counts it and what it held."""

    held: bool = False
    dollars: Mapping[str, object] | None = None

    def result(self) -> dict[str, object]:
        return {**super().result(), "budgetReserved": self.held, "dollars": self.dollars}


def dollars_field(reserved: int, settled: int, basis: str, model_basis: str | None = None) -> dict[str, object]:
    return {"reservedMicros": reserved, "settledMicros": settled, "basis": basis, "modelBasis": model_basis}


@dataclass
class Spend:
    settings: WorkerSettings
    client: aioredis.Redis
    now: Callable[[], int]
    log: EventLog
    lease_ms: int  # how long a hold may stay open before a peer settles it: the longest run, plus a margin

    def fingerprint(self, scoped: ScopedLimits) -> dict[str, str]:
        """The row's `fpUsd`: what this host caps in dollars (hosts that differ are seen by `audit --live`)."""
        settings = self.settings
        return {FPUSD_ROW_FIELD: host_usd_fingerprint(settings.max_cost_usd, settings.dollar_caps, scoped)}

    def cap_of(self, job_id: str, data: Mapping[str, Any]) -> int | None:
        """The job's cost cap: its trigger's only narrows the host's; a malformed one reads as 0 (spend nothing)."""
        host = self.settings.max_cost_usd
        trigger = data.get("maxCostUsd")
        cap = effective_cost_cap_micros(trigger, format_micros(host) if host is not None else None)
        if trigger is not None and cap == 0:
            self.log("job_cost_cap_malformed", {"jobId": job_id, "key": "maxCostUsd"})
        return cap

    def plan(
        self, job_id: str, data: Mapping[str, Any], scoped: ScopedLimits, capabilities: frozenset[str] | None
    ) -> Holds | Refusal:
        """What the job will hold, and how its container is told; or a refusal before anything is counted. With
        `capabilities` None (the image's labels unknown: not here, Docker away), the container's start decides."""
        capabilities = capabilities if capabilities is not None else frozenset({COST_CAP_CAPABILITY})
        cap = self.cap_of(job_id, data)
        ledgers = dollar_ledgers(self.settings.dollar_caps, scoped, data)
        if cap is None and ledgers:
            self.log("dollar_rows_without_cap", {"jobId": job_id})
            return SpendRefusal(Reason.CONFIG_REFUSED)
        if cap is not None and COST_CAP_CAPABILITY not in capabilities:
            return SpendRefusal(Reason.JOB_IMAGE_COST_CAP_UNSUPPORTED)
        holds = Holds(cap=cap, ledgers=ledgers)
        if cap is not None:
            holds.environment[COST_CAP_VARIABLE] = str(cap)
        if EXIT_AUTH_CAPABILITY in capabilities:
            holds.exit_key = new_exit_key()
            holds.environment[EXIT_AUTH_VARIABLE] = EXIT_AUTH_CHANNEL
        return holds

    async def hold(self, job_id: str, holds: Holds) -> Refusal | None:
        """Hold the job's cap in its dollar windows (raises the store's error: nothing is then held)."""
        if not holds.cap:
            return None
        hold_id = f"{self.settings.worker_name}#{job_id}#{secrets.token_hex(4)}"
        held = await hold_dollars(
            self.client, holds.ledgers, holds.cap, self.now(), hold_id=hold_id, lease_ms=self.lease_ms
        )
        if isinstance(held, DollarHold):
            holds.dollars = held if held.keys else None
            return None
        self._refused(job_id, held, holds.cap)
        return SpendRefusal(Reason.DOLLAR_CAP, dollars=dollars_field(holds.cap, 0, REFUNDED))

    def _refused(self, job_id: str, refusal: DollarRefusal, amount: int) -> None:
        ledger: DollarLedger = refusal.ledger
        fields: dict[str, object] = {
            "jobId": job_id,
            "ledger": ledger.kind,
            "window": str(refusal.window),
            "reservedMicros": refusal.reserved,
            "capMicros": refusal.cap,
            "amountMicros": amount,
            "capBelowJob": refusal.cap < amount,
            "refunded": True,
        }
        if ledger.kind != "deployment":
            fields["key"] = ledger.prefix
        if ledger.model is not None:
            fields["model"] = ledger.model
        self.log("over_dollar_budget", fields)

    async def settle(
        self, job_id: str, holds: Holds, usage: RunUsage, *, trusted: bool, flow: object
    ) -> dict[str, object] | None:
        """Settle a run's hold (its container ran): metered when trusted and complete, else the floor. A store that
        refuses leaves the hold open, and the sweep settles it at the floor."""
        if holds.cap is None:
            return None
        if not holds.cap:
            return dollars_field(0, 0, UNRESERVED)
        hold = holds.dollars or DollarHold(holds.cap)  # no dollar window applies: valued all the same, nothing moved
        tokens = usage.tokens
        charged, basis = dollar_settlement(tokens, usage.usage is not None, trusted=trusted, reserved=hold.amount)
        calls = tokens.get("calls") if tokens is not None else None
        amounts, model_bases = [], []
        for ledger, _ in hold.ledgers:
            if ledger.model is None:
                amounts.append(charged)
                continue
            amount, model_basis = model_settlement(
                usage.usage, ledger.model, job_basis=basis, trusted=trusted, calls=calls, reserved=hold.amount
            )
            amounts.append(amount)
            model_bases.append(model_basis)
        model_basis_of = (FLOOR if FLOOR in model_bases else METERED) if model_bases else None
        try:
            outcomes = await settle(self.client, hold, amounts) if hold.keys else []
        except STORE_FAULTS as fault:
            self.log(
                "dollar_settle_error",
                {"jobId": job_id, "code": type(fault).__name__, "applied": 0, "of": len(hold.keys)},
            )
            return dollars_field(hold.amount, hold.amount, FLOOR, model_basis_of and FLOOR)
        for key, outcome in zip(hold.keys, outcomes or [], strict=False):
            if outcome in SETTLE_OUTCOMES:
                self.log(SETTLE_OUTCOMES[outcome], {"jobId": job_id, "key": key})
        dollars = dollars_field(hold.amount, charged, basis, model_basis_of)
        rows = (usage.usage or {}).get("models") or []
        model = f"{rows[0].get('provider')}/{rows[0].get('model')}" if rows else "unknown"
        self.log(
            "dollar_settled", {"jobId": job_id, **dollars, "exitAuth": usage.exit_auth, "flow": flow, "model": model}
        )
        return dollars

    async def release(self, holds: Holds) -> None:
        """No container ran: the hold is given back whole (a store that refuses leaves it to the sweep)."""
        if holds.dollars is not None:
            try:
                await release(self.client, holds.dollars)
            except STORE_FAULTS as fault:
                self.log("dollar_release_error", {"code": type(fault).__name__})

    async def sweep(self, *, own: bool = False) -> int:
        """Settle at the floor the open holds whose lease has ended, and with `own` (at boot, this worker's earlier
        run known dead) every hold this worker took. Raises the store's error."""
        mine = await own_open_holds(self.client, self.settings.worker_name) if own else []
        taken = await take_open_holds(self.client, self.now(), mine)
        for hold in taken:
            self.log(
                "dollar_hold_swept",
                {"hold": hold.hold_id, "reservedMicros": hold.amount, "settledMicros": hold.amount, "basis": FLOOR},
            )
        return len(taken)
