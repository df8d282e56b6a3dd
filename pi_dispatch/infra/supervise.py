"""One supervisor for a process's long-running loops, so none can die unseen and leave the process half-alive.

Each loop is declared with what its failure means (`Loop.on_failure`), and why, beside it where the process starts
it: `RESTART` starts it again after a backoff (doubling to a ceiling, from the first again once it has run a while);
`STOP` ends the process with exit 1 so systemd starts it again. A failure is logged once, as the event `loop_failed`
with the loop's name, what follows, and the traceback as frames in one field (`events.failure_fields`): never on a
terminal, never a path. A loop that means to end the process for a reason of its own raises `ProcessFault`: that is
the reason the process gives, with no traceback. A loop that returns has finished its work and is not started again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from pi_dispatch.infra.events import EventLog, failure_fields

BACKOFF_FIRST_S: Final = 1.0
BACKOFF_MAX_S: Final = 60.0
SETTLED_AFTER_S: Final = 60.0
CANCEL_TRIES: Final = 10  # a loop cancelled this many times, CANCEL_WAIT_S apart, and still running is left, said so
CANCEL_WAIT_S: Final = 1.0  # a loop that ran this long before it failed is started again at the first backoff


class OnFailure(StrEnum):
    RESTART = "restart"  # started again after a backoff: its state is rebuilt by its next run
    STOP = "stop"  # the process ends with exit 1: without this loop it would run on half-alive


class ProcessFault(Exception):
    """A loop's deliberate end of the process: its text is the one-line reason the process exits 1 with."""


@dataclass(frozen=True)
class Loop:
    """A long-running coroutine of a process: its name in the log, what its failure means, and why."""

    name: str
    run: Callable[[], Awaitable[object]]
    on_failure: OnFailure
    why: str


@dataclass
class Supervisor:
    """Runs loops; `ended` completes with the reason once a loop stops the process (`STOP`, or a `ProcessFault`)."""

    log: EventLog
    backoff_first_s: float = BACKOFF_FIRST_S
    backoff_max_s: float = BACKOFF_MAX_S
    settled_after_s: float = SETTLED_AFTER_S
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    restarts: dict[str, int] = field(default_factory=dict)  # per loop, how many times it was started again
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _ended: asyncio.Future[str] | None = None

    @property
    def ended(self) -> asyncio.Future[str]:
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        return self._ended

    async def until_stopped(self, stop: asyncio.Event) -> str | None:
        """Wait for `stop` or for a loop to end the process: None once stopped, else the reason (a stop wins a tie)."""
        stopping = asyncio.ensure_future(stop.wait())
        either: set[asyncio.Future[Any]] = {stopping, self.ended}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        return None if stop.is_set() else self.ended.result()

    def start(self, *loops: Loop) -> None:
        for loop in loops:
            assert loop.name not in self._tasks, f"two loops named {loop.name}"
            self._tasks[loop.name] = asyncio.ensure_future(self._keep(loop))

    async def close(self, *, keep: Collection[str] = ()) -> None:
        """Cancel every loop (but those named in `keep`, which a shutdown still needs) and wait for them to unwind."""
        closing = {name: task for name, task in self._tasks.items() if name not in keep}
        pending = set(closing.values())
        for _ in range(CANCEL_TRIES):  # a library that turns a cancel into its own timeout swallows it: asked again
            for task in pending:
                task.cancel()
            if not pending:
                break
            _, pending = await asyncio.wait(pending, timeout=CANCEL_WAIT_S)
        if pending:
            left = sorted(name for name, task in closing.items() if task in pending)
            self.log("loops_not_ended", {"loops": left})
        for name in closing:
            del self._tasks[name]

    async def _keep(self, loop: Loop) -> None:
        backoff_s = self.backoff_first_s
        while True:
            began = time.monotonic()
            try:
                await loop.run()
                return
            except ProcessFault as fault:
                self._end(str(fault))
                return
            except Exception as error:  # broad: the supervisor's one catch, so that no loop ever ends unseen
                self.log("loop_failed", {"loop": loop.name, "then": loop.on_failure.value, **failure_fields(error)})
                if loop.on_failure is OnFailure.STOP:
                    self._end(f"its {loop.name} loop failed ({type(error).__name__})")
                    return
            if time.monotonic() - began >= self.settled_after_s:
                backoff_s = self.backoff_first_s
            await self.sleep(backoff_s)
            backoff_s = min(self.backoff_max_s, backoff_s * 2)
            self.restarts[loop.name] = self.restarts.get(loop.name, 0) + 1
            self.log("loop_restarted", {"loop": loop.name, "restarts": self.restarts[loop.name]})

    def _end(self, reason: str) -> None:
        if not self.ended.done():
            self.ended.set_result(reason)
