"""What each receiver says of itself in the store: its spool's depth and size and whether the store refused its last
write, a few seconds old at most while the store takes writes. One hash (`fleet:receivers`), a field per receiver,
so a reader makes one round trip however many receivers there are; a field that is not one this port wrote is left
out, never fatal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.keys import RECEIVERS

if TYPE_CHECKING:
    import redis.asyncio as aioredis

REPORT_EVERY_S: Final = 5.0
SILENT_AFTER_MS: Final = 30_000  # three missed reports: the receiver is away, or the store refuses its writes
FORGOTTEN_AFTER_MS: Final = 7 * 86_400_000  # a receiver not heard of for a week is left out of what is read


@dataclass(frozen=True)
class ReceiverState:
    """One receiver as it last reported itself."""

    name: str
    spool_entries: int
    spool_bytes: int
    store_refusing: bool
    at_ms: int

    def summary(self, now_ms: int) -> str:
        parts = [f"{self.name} spool {self.spool_entries}"]
        if self.spool_bytes:
            parts[0] += f" ({self.spool_bytes:,} bytes)"
        if self.store_refusing:
            parts.append("store refusing its writes")
        age_s = max(0, now_ms - self.at_ms) // 1000
        if now_ms - self.at_ms > SILENT_AFTER_MS:
            parts.append(f"silent {age_s}s")
        return ", ".join(parts)

    def as_json(self) -> dict[str, Any]:
        """As it is kept in the store and printed by `top --json`."""
        return {
            "name": self.name,
            "spoolEntries": self.spool_entries,
            "spoolBytes": self.spool_bytes,
            "storeRefusing": self.store_refusing,
            "atMs": self.at_ms,
        }


async def report_receiver(client: aioredis.Redis, state: ReceiverState) -> None:
    await client.hset(RECEIVERS, state.name, json.dumps(state.as_json()))  # type: ignore[misc]


def _state(name: Any, raw: Any) -> ReceiverState | None:
    try:
        value = json.loads(raw)
        shown = name.decode() if isinstance(name, bytes) else str(name)
        fields = (value["spoolEntries"], value["spoolBytes"], value["atMs"])
        refusing = value["storeRefusing"]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        return None
    whole = all(isinstance(field, int) and not isinstance(field, bool) and field >= 0 for field in fields)
    if not whole or not isinstance(refusing, bool):
        return None
    return ReceiverState(shown, fields[0], fields[1], refusing, fields[2])


async def read_receivers(client: aioredis.Redis, now_ms: int) -> list[ReceiverState]:
    """Every receiver heard of within a week, by name; one HGETALL."""
    raw: dict[Any, Any] = await client.hgetall(RECEIVERS)  # type: ignore[misc]
    states = (_state(name, value) for name, value in raw.items())
    return sorted(
        (state for state in states if state is not None and now_ms - state.at_ms < FORGOTTEN_AFTER_MS),
        key=lambda state: state.name,
    )
