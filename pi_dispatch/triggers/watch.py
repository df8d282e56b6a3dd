"""Live reload of the triggers file: the directory is watched, so an atomic replace (write, then rename over the
file) is seen as well as an edit in place. Changes are debounced, then the file is parsed again; a file that no
longer loads keeps what was loaded before. Uses watchdog (inotify on Linux). The receiver swaps its rules in;
the worker reconciles its cron schedulers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.errors import ConfigError
from pi_dispatch.infra.events import EventLog
from pi_dispatch.triggers.file import Trigger, read_triggers

DEBOUNCE_S: Final = 0.2
# watchdog's event types that mean the file changed: written and closed, created, replaced by a rename, removed
CHANGES: Final = frozenset({"created", "modified", "moved", "deleted", "closed"})


class TriggerWatch:
    """Calls `swap(triggers)` with the triggers of each new valid version of the file."""

    def __init__(self, path: Path, label: str, swap: Callable[[list[Trigger]], None], log: EventLog) -> None:
        self.path, self.label, self.swap, self.log = path, label, swap, log
        self._observer: Any = None
        self._pending: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reloads = 0

    def reload(self) -> bool:
        """Read the file again and hand its triggers over; on any refusal keep what was loaded before."""
        self._pending = None
        try:
            _, triggers = read_triggers(self.path, self.label)
        except ConfigError as error:
            reason = "; ".join(f"{problem.subject}: {problem.message}" for problem in error.problems[:3])
            self.log("triggers_reload_invalid", {"reason": reason, "kept": True})
            return False
        self.swap(triggers)
        self.reloads += 1
        self.log("triggers_reloaded", {"path": self.path.name, "triggers": len(triggers)})
        return True

    def _changed(self) -> None:
        assert self._loop is not None
        if self._pending is not None:
            self._pending.cancel()
        self._pending = self._loop.call_later(DEBOUNCE_S, self.reload)

    def _event(self, event: Any) -> None:
        """Called on watchdog's thread: only a change to the file counts, never a read of it (reading the file to
        reload it raises open and close events of its own, which would reload it again, for ever)."""
        if getattr(event, "event_type", "") not in CHANGES or getattr(event, "is_directory", False):
            return
        names = {Path(str(getattr(event, "src_path", ""))).name, Path(str(getattr(event, "dest_path", "") or "")).name}
        if self.path.name in names and self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed)

    def start(self, boot_text: bytes) -> bool:
        """Arm the watch; then reload once if the file changed since boot read it. False when no watch is possible."""
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        watch = self

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: Any) -> None:
                watch._event(event)

        self._loop = asyncio.get_running_loop()
        try:
            observer = Observer()
            observer.schedule(_Handler(), str(self.path.parent), recursive=False)
            observer.daemon = True
            observer.start()
        except (OSError, RuntimeError) as error:
            self.log("triggers_watch_unavailable", {"reason": type(error).__name__})
            return False
        self._observer = observer
        self.log("triggers_watching", {"path": self.path.name})
        with contextlib.suppress(OSError):
            if self.path.read_bytes() != boot_text:
                self.log("triggers_reread_after_arming", {"path": self.path.name})
                self.reload()
        return True

    def stop(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
