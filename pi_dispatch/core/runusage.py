"""What a run used, as the runner says it on its exit line, read as the reference reads it
(`../shared/spec/upstream-limits.md` §2): the last `{"event":"exit",…}` object in the last 8 KiB of the container's
stdout, a line glued to stray bytes repaired, each field rebuilt and validated, null when absent or malformed. The
line is telemetry only: it never decides a run's outcome (its exit code does). Also the readers of `tokens` and
`usage` a run record is rebuilt with, whether a Python or a current Node worker wrote it. Pure.
"""

from __future__ import annotations

import codecs
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pi_dispatch.core.exitauth import UNVERIFIED, VERIFIED, authentic_exit_lines
from pi_dispatch.core.jscompat import js_json_parse

TAIL_CHARS: Final = 8192  # the reference's TAIL_CAP_BYTES: an exit line older than this much output is lost
EXIT_EVENT: Final = "exit"
_ANCHOR: Final = '{"event":"'
# The current worker's ordered token keys: only these survive, numbers only (`metered` a boolean)
TOKEN_KEYS: Final = (
    "input",
    "output",
    "total",
    "cost",
    "metered",
    "rootTotal",
    "otherTotal",
    "looseTotal",
    "sessions",
    "calls",
    "unresolved",
    "unpriced",
    "childTotal",
    "childProcesses",
    "unmeteredChildren",
    "costUnreported",
    "costCapMicros",
    "costRefused",
    "boundExceeded",
    "longContext",
    "costUnjudged",
    "costUnanswered",
    "modelRefused",
)
USAGE_COUNTERS: Final = (
    "calls",
    "input",
    "output",
    "cacheRead",
    "cacheWrite",
    "cacheWrite1h",
    "reasoning",
    "total",
    "cost",
    "unpriced",
)
# The current model id: `@cf/…`, `~vendor/…` and `_` in Ollama tags admitted, 64 characters at most
MODEL_REF: Final = re.compile(r"(?=.{1,64}$)[~@]?[a-z0-9][a-z0-9._:/@_-]*")
_PI_AI_VERSION: Final = re.compile(r"\d+\.\d+\.\d+", re.ASCII)
MAX_USAGE_ROWS: Final = 9
SESSION_REASONS: Final = frozenset(
    {
        "resumed",
        "absent",
        "expired",
        "conversation-too-old",
        "resume-chain-too-long",
        "context-too-full",
        "compaction-summary-empty",
        "too-large",
        "unparseable",
        "not-a-regular-file",
        "key-not-a-directory",
        "transcript-diverted",
        "venue-changed",
        "pi-version-changed",
        "transcript-replaced",
        "locked",
        "promote-failed",
        "disabled",
    }
)
RUNNER_POLICY_REASONS: Final = frozenset(
    {
        "provider-auth-refused",
        "cost-cap",
        "model-not-allowed",
        "cost-cap-unenforceable",
        "model-policy-unenforceable",
    }
)
SAFE_INTEGER: Final = 2**53 - 1


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: object) -> bool:
    """`Number.isInteger`: 7.0 is one, as JSON cannot tell it from 7."""
    return _number(value) and float(value).is_integer()  # type: ignore[arg-type]


def _whole(value: object) -> int | None:
    return int(value) if _integer(value) else None  # type: ignore[call-overload]


def read_tokens(value: object) -> dict[str, Any] | None:
    """`tokens` rebuilt through TOKEN_KEYS, in their order; None unless an object with a numeric `total`."""
    if not isinstance(value, Mapping) or not _number(value.get("total")):
        return None
    kept: dict[str, Any] = {}
    for key in TOKEN_KEYS:
        found = value.get(key)
        if (key == "metered" and isinstance(found, bool)) or (key != "metered" and _number(found)):
            kept[key] = found
    return kept


def read_usage(value: object) -> dict[str, Any] | None:
    """The per-model ledger rebuilt from validated parts; None when any part is malformed. `truncated` absent or
    null reads as null (the current worker's rule: nobody measured it)."""
    if not isinstance(value, Mapping) or not _integer(value.get("v")) or value["v"] < 1:
        return None
    pi_ai = value.get("piAi")
    if pi_ai is not None and not (isinstance(pi_ai, str) and _PI_AI_VERSION.fullmatch(pi_ai)):
        return None
    truncated = value.get("truncated")
    if truncated is not None and (not _integer(truncated) or truncated < 0):
        return None
    rows = value.get("models")
    if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_USAGE_ROWS:
        return None
    models = []
    for row in rows:
        if not isinstance(row, Mapping) or not isinstance(row.get("provider"), str):
            return None
        if not isinstance(row.get("model"), str):
            return None
        provider, model = row["provider"].lower(), row["model"].lower()
        if not MODEL_REF.fullmatch(provider) or not MODEL_REF.fullmatch(model):
            return None
        counters = {key: row.get(key, 0) for key in USAGE_COUNTERS}
        if not all(_number(count) and count >= 0 for count in counters.values()):
            return None
        models.append({"provider": provider, "model": model, **counters})
    whole = _whole(truncated)
    return {"v": _whole(value["v"]), "piAi": pi_ai, "truncated": whole, "models": models}


def read_session(value: object) -> dict[str, Any] | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("resumed"), bool):
        return None
    reason = value.get("reason")
    return {"resumed": value["resumed"], "reason": reason if reason in SESSION_REASONS else None}


def read_context(value: object) -> dict[str, int] | None:
    if not isinstance(value, Mapping):
        return None
    tokens, window = _whole(value.get("tokens")), _whole(value.get("window"))
    if tokens is None or window is None or not (0 <= tokens <= SAFE_INTEGER and 0 < window <= SAFE_INTEGER):
        return None
    return {"tokens": tokens, "window": window}


def _parsed(line: str) -> object:
    try:
        return js_json_parse(line)
    except ValueError:
        return None


@dataclass
class StdoutTail:
    """The last TAIL_CHARS of a container's stdout as it arrives (on the thread following it): what the exit line
    is read from. A chunk larger than the tail can hold is decoded only as far back as the tail reaches."""

    text: str = ""
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace")
    )

    def feed(self, chunk: bytes) -> None:
        if len(chunk) > 4 * TAIL_CHARS:  # no UTF-8 character is longer than 4 bytes
            self._decoder.reset()
            chunk, self.text = chunk[-4 * TAIL_CHARS :], ""
        self.text = (self.text + self._decoder.decode(chunk))[-TAIL_CHARS:]


def exit_line(tail: str) -> Mapping[str, Any] | None:
    """The last exit line of `tail` (the last TAIL_CHARS of stdout), its glued lines repaired; None when none is."""
    for raw in reversed(tail[-TAIL_CHARS:].split("\n")):
        line = raw.strip()
        if not line:
            continue
        found = _parsed(line)
        start = line.find(_ANCHOR, 1)
        while found is None and start != -1:  # glued after stray bytes, or after a line cut short
            found = _parsed(line[start:])
            start = line.find(_ANCHOR, start + 1)
        if isinstance(found, dict) and found.get("event") == EXIT_EVENT:
            return found
    return None


@dataclass(frozen=True)
class RunUsage:
    """What the exit line said, each field null unless well formed."""

    turns: int | None = None
    tokens: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    session: dict[str, Any] | None = None
    context: dict[str, int] | None = None
    code: int | None = None  # the code the runner said it exits with
    reason: str | None = None  # a policy reason, only on a line that says code 2
    exit_auth: str | None = None  # with a key: whether a signed line verified (`core/exitauth.py`); else None

    @property
    def total_tokens(self) -> int | None:
        total = self.tokens.get("total") if self.tokens is not None else None
        return int(total) if isinstance(total, int | float) and not isinstance(total, bool) else None

    def telemetry(self) -> dict[str, Any]:
        """The record's fields this line fills (each null when the line did not say it well)."""
        return {
            "turns": self.turns,
            "tokens": self.tokens,
            "usage": self.usage,
            "session": self.session,
            "context": self.context,
        }

    @classmethod
    def of(cls, tail: str, key: str | None = None) -> RunUsage:
        """What the tail's last exit line says; with the attempt's key, only a line signed with it is read."""
        if key is not None:
            tail = authentic_exit_lines(tail, key)
        line = exit_line(tail)
        if line is None:
            return cls(exit_auth=UNVERIFIED if key is not None else None)
        code = _whole(line.get("code")) if not isinstance(line.get("code"), bool) else None
        reason = line.get("reason")
        return cls(
            turns=_whole(line.get("turns")),
            tokens=read_tokens(line.get("tokens")),
            usage=read_usage(line.get("usage")),
            session=read_session(line.get("session")),
            context=read_context(line.get("context")),
            code=code,
            reason=reason if code == 2 and reason in RUNNER_POLICY_REASONS else None,
            exit_auth=VERIFIED if key is not None else None,
        )
