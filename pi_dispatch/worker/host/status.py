"""The worker's one-line state for systemd (`STATUS=`), so `systemctl status pi-dispatch-worker` says what it is
doing: its slots in use, its last job and how it ended, the store's state, and a drain."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.sdnotify import notify

# The events that end an attempt, and the word the line says for each (job_done carries its own outcome).
ENDINGS: Final = {
    "job_done": "",
    "job_failed": "failed",
    "job_held": "held",
    "job_put_back": "put back",
    "job_refused": "refused",
}


@dataclass
class StatusLine:
    """What the line is made of, kept from the worker's own events (as the metrics are)."""

    clock: Callable[[], float] = time.monotonic
    last: tuple[str, str, float] | None = field(default=None)  # job id, how it ended, when

    def observe(self, log: EventLog) -> EventLog:
        def seen(event: str, fields: Mapping[str, object]) -> None:
            log(event, fields)
            if event in ENDINGS and "jobId" in fields:
                ended = ENDINGS[event] or str(fields.get("outcome", "done"))
                self.last = (str(fields["jobId"]), ended, self.clock())

        return seen

    def line(self, running: int, slots: int, store_down_s: float, draining: bool) -> str:
        parts = [f"{running}/{slots} slots in use"]
        if self.last is None:
            parts.append("no job yet")
        else:
            job_id, ended, at = self.last
            parts.append(f"last job {job_id} {ended} {int(self.clock() - at)} s ago")
        parts.append(f"store unreachable for {int(store_down_s)} s" if store_down_s > 0 else "store ok")
        if draining:
            parts.append("draining")
        return "; ".join(parts)

    def publish(self, running: int, slots: int, store_down_s: float, draining: bool) -> bool:
        """Tell systemd (a no-op outside a notify unit)."""
        return notify("STATUS=" + self.line(running, slots, store_down_s, draining))
