"""Structured log lines: one JSON object per event, names and counts only, never paths or secrets."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from pythonjsonlogger.json import JsonFormatter

EventLog = Callable[[str, Mapping[str, object]], None]


def discard(event: str, fields: Mapping[str, object]) -> None:
    """An event log that keeps nothing."""


# Events that say something went wrong (a warning: the process carries on) or that it cannot go on (an error).
WARNING_WORDS: Final = (
    "failed",
    "unreachable",
    "error",
    "refused",
    "lost",
    "invalid",
    "missing",
    "unavailable",
    "stuck",
    "degraded",
    "unwritten",
    "blocked",
    "untrusted",
    "unreadable",
    "stalled",
    "passed",
    "fenced",
    "late",
    "out_of_memory",
)
ERROR_EVENTS: Final = frozenset({"worker_failing", "receiver_start_failed"})
# journald reads a `<N>` prefix on a line as its syslog priority (systemd's SyslogLevelPrefix=, on by default)
JOURNAL_PRIORITY: Final = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}
FIELDS: Final = "pi_dispatch_fields"  # the LogRecord attribute an event's fields travel in


def failure_fields(error: BaseException) -> dict[str, object]:
    """An unexpected failure as a log line's fields: its type and first line, and its traceback as module:line frames
    in one field (no file paths, and nothing printed on a terminal)."""
    frames = traceback.extract_tb(error.__traceback__)
    text = str(error).splitlines()[0][:200] if str(error) and not isinstance(error, OSError) else ""
    return {
        "error": f"{type(error).__name__}: {text}" if text else type(error).__name__,
        "traceback": " < ".join(f"{_module_of(frame.filename)}:{frame.lineno} {frame.name}" for frame in frames[::-1]),
    }


def _module_of(filename: str) -> str:
    """A source file by its dotted name from the package down (`pi_dispatch.worker.gates.spend`), never its path."""
    parts = filename.removesuffix(".py").replace("\\", "/").split("/")
    for root in ("pi_dispatch", "bullmq", "redis", "asyncio", "docker", "aiohttp"):
        if root in parts:
            return ".".join(parts[parts.index(root) :])
    return parts[-1]


def level_of(event: str) -> int:
    if event in ERROR_EVENTS:
        return logging.ERROR
    return logging.WARNING if any(word in event for word in WARNING_WORDS) else logging.INFO


class EventFormatter(JsonFormatter):
    """One JSON object per line: timestamp (UTC, ISO 8601), level, event, then the event's fields. A library's own
    log lines and Python warnings come out the same way (`logging.captureWarnings`)."""

    def __init__(self, *, journal: bool) -> None:
        super().__init__(
            "%(levelname)s %(message)s",
            rename_fields={"levelname": "level", "message": "event"},
            json_default=str,
            json_ensure_ascii=False,
        )
        self.journal = journal

    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        log_record.pop(FIELDS, None)
        line = {"timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")}
        line = {**line, **log_record}
        for key, value in getattr(record, FIELDS, {}).items():
            line.setdefault(key, value)  # an event's field never overwrites the line's own
        log_record.clear()
        log_record.update(line)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        return f"<{JOURNAL_PRIORITY.get(record.levelno, 6)}>{line}" if self.journal else line


def _handler(stream: TextIO, *, below: int | None = None, at_least: int = logging.DEBUG) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EventFormatter(journal=bool(os.environ.get("JOURNAL_STREAM"))))
    handler.setLevel(at_least)
    if below is not None:
        handler.addFilter(lambda record: record.levelno < below)
    return handler


def json_lines(host: str | None, stream: TextIO | None = None, errors: TextIO | None = None) -> EventLog:
    """Route the process's logging (ours, its libraries', Python's warnings) to one JSON object per line on
    `stream` (stderr by default; with `errors`, warnings and worse go there instead) and return the event log
    that writes `{timestamp, level, event, **fields, host}`: `host` last, so a caller cannot override it."""
    root = logging.getLogger()
    if errors is None:
        root.handlers[:] = [_handler(stream or sys.stderr)]
    else:
        root.handlers[:] = [
            _handler(stream or sys.stdout, below=logging.WARNING),
            _handler(errors, at_least=logging.WARNING),
        ]
    root.setLevel(logging.WARNING)  # a library's warnings and errors; its chatter (access lines) stays out
    logging.captureWarnings(True)
    logger = logging.getLogger("pi_dispatch")
    logger.setLevel(logging.INFO)
    stamp = {} if host is None else {"host": host}

    def emit(event: str, fields: Mapping[str, object]) -> None:
        logger.log(level_of(event), event, extra={FIELDS: {**fields, **stamp}})

    return emit


class Recorder:
    """An event log that keeps what it is told, for callers that report events afterwards."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def __call__(self, event: str, fields: Mapping[str, object]) -> None:
        self.events.append((event, dict(fields)))

    def names(self) -> list[str]:
        return [event for event, _ in self.events]
