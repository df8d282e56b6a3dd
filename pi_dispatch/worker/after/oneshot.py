"""One-shot triggers: a close rule with `once: true` is spent by its first run, once that run's record exists.

The worker writes `on.disarmed: {at, jobId}` into the entry the job's `trigger.matched.index` names, in the
triggers file it reads (PI_TRIGGERS_FILE, else `./triggers.json`, as the reference falls back). The entry is
never deleted: records name triggers by index, so every later entry keeps its slot; deleting `on.disarmed`
re-arms it. The file is replaced atomically (temp file, fsync, rename), so a receiver watching it reloads one
whole version. An entry that is not that armed rule (another file's index, already spent, edited since) is
left alone and logged: a disarm never writes over what it cannot recognise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.errors import ConfigError
from pi_dispatch.core.jscompat import iso_string, js_json_parse
from pi_dispatch.infra.durable import failure_name, write_atomically
from pi_dispatch.infra.events import EventLog, discard

FALLBACK_FILE: Final = "triggers.json"
MAX_FILE_BYTES: Final = 4 * 1024 * 1024


def one_shot(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The matched rule of a job that spends a one-shot (`trigger.matched.once` literally true), else None."""
    trigger = data.get("trigger")
    matched = trigger.get("matched") if isinstance(trigger, Mapping) else None
    if isinstance(matched, Mapping) and matched.get("once") is True and isinstance(matched.get("index"), int):
        return matched
    return None


def _is_the_armed_rule(entry: object, matched: Mapping[str, Any]) -> str | None:
    """None when entry is the armed one-shot matched names; else why it is not."""
    on = entry.get("on") if isinstance(entry, Mapping) else None
    if not isinstance(on, Mapping):
        return "not-a-trigger"
    if "disarmed" in on:
        return "already-disarmed"
    actions = on.get("action")
    same = (
        on.get("type") == matched.get("type")
        and on.get("once") is True
        and isinstance(actions, list)
        and matched.get("action") in actions
        and ("number" not in matched or on.get("number") == matched.get("number"))
    )
    return None if same else "rule-differs"


class OneShots:
    """Spends one-shot rules in one triggers file. Thread-safe: records are written from the event loop and
    threads alike, and two disarms of one file must not each write over the other's."""

    def __init__(self, path: Path | None, log: EventLog = discard) -> None:
        self.path = path if path is not None else Path.cwd() / FALLBACK_FILE
        self.log = log
        self._lock = threading.Lock()

    def spend(self, job_id: str, data: Mapping[str, Any], now_ms: int) -> bool:
        """Disarm the rule a finished run's job matched, if it was a one-shot. True when the file now says so."""
        matched = one_shot(data)
        if matched is None:
            return False
        index = int(matched["index"])
        with self._lock:
            try:
                return self._spend(job_id, matched, index, now_ms)
            except (OSError, ValueError, ConfigError) as error:
                reason = failure_name(error) if isinstance(error, OSError) else type(error).__name__
                self.log("trigger_disarm_failed", {"jobId": job_id, "index": index, "reason": reason})
                return False

    def _spend(self, job_id: str, matched: Mapping[str, Any], index: int, now_ms: int) -> bool:
        with self.path.open("rb") as handle:
            text = handle.read(MAX_FILE_BYTES + 1)
        if len(text) > MAX_FILE_BYTES:
            raise ValueError("file too large")
        document = js_json_parse(text)
        entries = document.get("triggers") if isinstance(document, dict) else None
        if not isinstance(entries, list) or not 0 <= index < len(entries):
            self.log("trigger_disarm_skipped", {"jobId": job_id, "index": index, "reason": "no-such-index"})
            return False
        if (why := _is_the_armed_rule(entries[index], matched)) is not None:
            self.log("trigger_disarm_skipped", {"jobId": job_id, "index": index, "reason": why})
            return False
        entries[index]["on"]["disarmed"] = {"at": iso_string(now_ms), "jobId": job_id}
        content = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        from pi_dispatch.triggers.file import parse_triggers  # the parser, loaded once a rule is spent

        parse_triggers(content, self.path.name)  # the file stays one every reader loads
        mode = self.path.stat().st_mode & 0o7777
        write_atomically(self.path, content, mode)
        self.log("trigger_disarmed", {"jobId": job_id, "index": index})
        return True
