"""This host's clock against the store's: the offset measured with `TIME` at boot and every beat, and whether it is
past PI_CLOCK_SKEW_MAX_MS.

Liveness, staleness, re-homing and wait holds compare times written by many hosts, so each is judged on the store's
clock, which every host shares: the worker's clock is its own plus the measured offset (half the round trip's
uncertainty is the midpoint's). A host whose offset passes the bound takes no job and does not re-home (BullMQ's
own scripts release delayed jobs by the caller's clock) until it is back within it; its row, `hosts`, `top`, the
metrics and `audit --live` (`clock-skew`) show the offset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.events import EventLog, discard
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, STORE_FAULTS, bounded


def offset_of(sent_ms: int, store_time: object, received_ms: int) -> int | None:
    """The store's clock minus this host's, from a `TIME` reply and when it was asked and answered."""
    if not isinstance(store_time, (list, tuple)) or len(store_time) != 2:
        return None
    try:
        store_ms = int(store_time[0]) * 1000 + int(store_time[1]) // 1000
    except (TypeError, ValueError):
        return None
    return store_ms - (sent_ms + received_ms) // 2


@dataclass
class ClockWatch:
    """The measured offset, the clock it corrects, and whether it is past the bound."""

    max_skew_ms: int
    log: EventLog = discard
    local: Callable[[], int] = wall_ms
    offset_ms: int = 0
    measured: bool = False

    @property
    def skewed(self) -> bool:
        return abs(self.offset_ms) > self.max_skew_ms

    def now(self) -> int:
        """The store's time as this host reckons it."""
        return self.local() + self.offset_ms

    async def measure(self, client: object) -> None:
        """Ask the store its time; a store that does not answer leaves the last offset in place."""
        was = self.skewed
        sent = self.local()
        try:
            reply = await bounded(client.time(), OP_TIMEOUT_S)  # type: ignore[attr-defined]
        except STORE_FAULTS:  # an outage says nothing about the clocks
            return
        offset = offset_of(sent, reply, self.local())
        if offset is None:
            return
        self.offset_ms, self.measured = offset, True
        if self.skewed != was:
            event = "clock_skew" if self.skewed else "clock_skew_ended"
            self.log(event, {"offsetMs": offset, "maxMs": self.max_skew_ms})

    def row_facts(self) -> Mapping[str, str]:
        """The row's `clockOffsetMs` (this port's own field), once measured."""
        return {"clockOffsetMs": str(self.offset_ms)} if self.measured else {}
