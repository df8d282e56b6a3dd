"""Structured log lines: one JSON object per event, names and counts only, never paths or secrets."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import TextIO

EventLog = Callable[[str, Mapping[str, object]], None]


def discard(event: str, fields: Mapping[str, object]) -> None:
    """An event log that keeps nothing."""


def json_lines(host: str, stream: TextIO | None = None) -> EventLog:
    """Write `{"event": ..., **fields, "host": host}` lines; `host` is last so a caller cannot override it."""

    def emit(event: str, fields: Mapping[str, object]) -> None:
        line = {"event": event, **fields, "host": host}
        print(json.dumps(line, default=str), file=stream or sys.stderr, flush=True)

    return emit


class Recorder:
    """An event log that keeps what it is told, for callers that report events afterwards."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def __call__(self, event: str, fields: Mapping[str, object]) -> None:
        self.events.append((event, dict(fields)))

    def names(self) -> list[str]:
        return [event for event, _ in self.events]
