"""Live reload of the triggers file (`infra/filewatch.py`): a file that no longer loads keeps what was loaded before.
The receiver swaps its rules in; the worker reconciles its cron schedulers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pi_dispatch.core.errors import ConfigError
from pi_dispatch.infra.events import EventLog
from pi_dispatch.infra.filewatch import FileWatch, Refused
from pi_dispatch.triggers.file import Trigger, read_triggers


class TriggerWatch(FileWatch[list[Trigger]]):
    """Calls `swap(triggers)` with the triggers of each new valid version of the file."""

    def __init__(self, path: Path, label: str, swap: Callable[[list[Trigger]], None], log: EventLog) -> None:
        def read() -> list[Trigger]:
            try:
                return read_triggers(path, label)[1]
            except ConfigError as error:
                reasons = (f"{problem.subject}: {problem.message}" for problem in error.problems[:3])
                raise Refused("; ".join(reasons)) from None

        super().__init__(path, read, swap, log, "triggers")
