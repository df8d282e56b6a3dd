"""The jobs under way on this worker: what its attempts keep, and what cancel and drain act on (`host/control.py`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pi_dispatch.worker.run.containers import STOP_GRACE_S, StopRequest


@dataclass
class InFlight:
    """`draining` puts back a job still at its gates; `abort_all` stops running containers with the drain's grace."""

    draining: asyncio.Event = field(default_factory=asyncio.Event)
    aborting: asyncio.Event = field(default_factory=asyncio.Event)
    running: dict[str, StopRequest] = field(default_factory=dict)  # job id -> its container's stop, while it runs
    running_since: dict[str, int] = field(default_factory=dict)  # job id -> when its container started (epoch ms)
    started: set[str] = field(default_factory=set)  # job ids whose attempt is under way here, gates included
    cancelled: set[str] = field(default_factory=set)  # job ids an operator cancelled while they were here

    def abort_all(self) -> None:
        """Stop every running container, each after the drain's grace; a container started later stops at once."""
        self.aborting.set()
        for stop in self.running.values():
            stop.request(STOP_GRACE_S)
