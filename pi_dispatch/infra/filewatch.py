"""Live reload of a file an operator edits while the process runs (the triggers, the scoped limits, the pause
windows): the directory is watched, so an atomic replace (write, then rename over the file) is seen as well as an
edit in place. Changes are debounced, then the file is read again; a file that no longer loads keeps what was loaded
before, and says why. Uses watchdog (inotify on Linux).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from pi_dispatch.infra.events import EventLog

DEBOUNCE_S: Final = 0.2
# watchdog's event types that mean the file changed: written and closed, created, replaced by a rename, removed
CHANGES: Final = frozenset({"created", "modified", "moved", "deleted", "closed"})

T = TypeVar("T")


class Refused(Exception):
    """A file the reader will not take, and why (no path, no content: the log gets this text)."""


class FileWatch(Generic[T]):
    """Calls `swap(value)` with what `read()` makes of each new version of the file that it takes. Its log events
    are `<event>_reloaded`, `<event>_reload_invalid`, `<event>_watching`, `<event>_watch_unavailable`."""

    def __init__(self, path: Path, read: Callable[[], T], swap: Callable[[T], None], log: EventLog, event: str) -> None:
        self.path, self.read, self.swap, self.log, self.event = path, read, swap, log, event
        self._observer: Any = None
        self._pending: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reloads = 0

    def reload(self) -> bool:
        """Read the file again and hand it over; on a refusal keep what was loaded before."""
        self._pending = None
        try:
            value = self.read()
        except Refused as refused:
            self.log(f"{self.event}_reload_invalid", {"reason": str(refused), "kept": True})
            return False
        self.swap(value)
        self.reloads += 1
        self.log(f"{self.event}_reloaded", {"path": self.path.name})
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

    def start(self, boot_text: bytes | None = None) -> bool:
        """Arm the watch; then reload once if the file changed since boot read it (`boot_text`; None: always
        once, to be sure). False when no watch is possible."""
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
            self.log(f"{self.event}_watch_unavailable", {"reason": type(error).__name__})
            return False
        self._observer = observer
        self.log(f"{self.event}_watching", {"path": self.path.name})
        with contextlib.suppress(OSError):
            if boot_text is None or self.path.read_bytes() != boot_text:
                self.log(f"{self.event}_reread_after_arming", {"path": self.path.name})
                self.reload()
        return True

    def stop(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
