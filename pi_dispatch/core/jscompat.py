"""JavaScript value semantics the reference relies on, so ported functions agree with it byte for byte.

The reference runs on V8: strings are UTF-16, `sort()` compares code units, `Number()` and `String()`
coerce loosely and `Date.parse` reads ISO-8601 with its own rollover rules. Python differs on each, and
a wire-compatible port has to agree on every one of them. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final


class _Missing:
    """A key that is absent, which JavaScript reads as `undefined` rather than `null`."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()
DAY_MS: Final = 86_400_000  # a day as Date arithmetic counts it: no leap seconds


def get(obj: object, key: str) -> object:
    """`obj?.key`: MISSING unless obj is a mapping that holds key (None stands for JSON null)."""
    if type(obj) is dict or isinstance(obj, Mapping):  # a parsed JSON object is a dict: skip the ABC check
        return obj.get(key, MISSING)
    return MISSING


def is_number(value: object) -> bool:
    """`typeof value === "number"` for a JSON value: a boolean is not one."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_integer(value: object) -> bool:
    """`Number.isInteger`: 5 and 5.0 are; 5.5, "5" and true are not."""
    return is_number(value) and (isinstance(value, int) or float(value).is_integer())  # type: ignore[arg-type]


def js_length(text: str) -> int:
    """A string's length in UTF-16 code units, as JavaScript counts it."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def nullish(value: object) -> bool:
    """`value == null` in JavaScript: null or undefined."""
    return value is None or value is MISSING


def utf16_key(text: str) -> bytes:
    """A sort key in UTF-16 code-unit order, which is what `Array.prototype.sort()` compares."""
    return text.encode("utf-16-be", "surrogatepass")


def js_sorted(texts: Iterable[str]) -> list[str]:
    """`[...texts].sort()` for strings."""
    return sorted(texts, key=utf16_key)


def code_units(text: str) -> memoryview:
    """The UTF-16 code units of text, as JavaScript's `charCodeAt` sees them."""
    return memoryview(text.encode("utf-16-le", "surrogatepass")).cast("H")


_FNV_OFFSET: Final = 0x811C9DC5
_FNV_PRIME: Final = 0x01000193


def fnv1a32(text: str) -> int:
    """FNV-1a 32-bit over UTF-16 code units (`Math.imul` then `>>> 0`)."""
    value = _FNV_OFFSET
    for unit in code_units(text):
        value = ((value ^ unit) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def truthy(value: object) -> bool:
    """JavaScript truthiness: every object and array is truthy, NaN is not."""
    if value is None or value is MISSING or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return not math.isnan(value) and value != 0
    if isinstance(value, str):
        return value != ""
    return True


def _number_to_string(value: float) -> str:
    """ECMAScript Number::toString: the shortest round-trip digits, laid out by JS's exponent rules."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr is the shortest round-trip form; its digits and exponent, read as Decimal would read them (without
    # loading the decimal module into every worker for it)
    mantissa, _, power = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    exponent = int(power or 0) - len(fraction)
    digits = (whole + fraction).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    k = len(stripped)
    n = k + exponent
    if k <= n <= 21:
        body = stripped + "0" * (n - k)
    elif 0 < n <= 21:
        body = stripped[:n] + "." + stripped[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + stripped
    else:
        tail = stripped[0] + ("." + stripped[1:] if k > 1 else "")
        body = f"{tail}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
    return sign + body


def js_string(value: object) -> str:
    """`String(value)`, for the JSON-shaped values a peer or a job can carry."""
    if value is MISSING:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _number_to_string(float(value)) if abs(value) >= 2**53 else str(value)
    if isinstance(value, float):
        return _number_to_string(value)
    if isinstance(value, list | tuple):
        return ",".join("" if nullish(item) else js_string(item) for item in value)
    return "[object Object]"


# WhiteSpace and LineTerminator as `String.prototype.trim` and `Number()` strip them.
JS_SPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """`String.prototype.trim`: strips JavaScript's whitespace, which is not Python's (U+FEFF is; U+001C is not)."""
    return text.strip(JS_SPACE)


# ASCII digits only: JS reads no other digits, where Python's \d and float() read every script's
_DECIMAL: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_RADIX: Final = {
    "0x": (16, re.compile(r"[0-9a-fA-F]+")),
    "0o": (8, re.compile(r"[0-7]+")),
    "0b": (2, re.compile(r"[01]+")),
}


def _string_to_number(text: str) -> float:
    if text.isascii() and text.isdigit():  # the common case (a stamp, a count): read as JS reads it, at once
        return float(text)
    body = text.strip(JS_SPACE)
    if body == "":
        return 0.0
    if body in ("Infinity", "+Infinity"):
        return math.inf
    if body == "-Infinity":
        return -math.inf
    radix = _RADIX.get(body[:2].lower())
    if radix is not None:
        base, digits = radix
        return float(int(body[2:], base)) if digits.fullmatch(body[2:]) else math.nan
    if _DECIMAL.fullmatch(body):
        return float(body)
    return math.nan


def js_number(value: object) -> float:
    """`Number(value)`: null is 0, undefined is NaN, strings are trimmed and read as JS literals."""
    if value is MISSING:
        return math.nan
    if value is None or value is False:
        return 0.0
    if value is True:
        return 1.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _string_to_number(value)
    if isinstance(value, list | tuple):
        return _string_to_number(js_string(value))
    return math.nan


def finite(value: float) -> bool:
    """`Number.isFinite` on an already-coerced number."""
    return not (math.isnan(value) or math.isinf(value))


_ISO: Final = re.compile(
    r"(?P<year>\d{4}|[+-]\d{6})"
    r"(?:-(?P<month>\d{2})(?:-(?P<day>\d{2}))?)?"
    r"(?:[Tt](?P<hour>\d{2}):(?P<minute>\d{2})"
    r"(?::(?P<second>\d{2})(?:\.(?P<fraction>\d+))?)?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})?)?",
    re.ASCII,  # JS reads ASCII digits alone
)
_MAX_TIME_MS: Final = 8.64e15


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 for a proleptic Gregorian date; day may overflow the month, as in MakeDay."""
    y = year - (month <= 2)
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468 + (day - 1)


def date_parse(value: object) -> float:
    """`Date.parse(String(value))` for the ISO-8601 forms V8 accepts; everything else is NaN.

    V8 rolls a day past the month's end into the next month (`2026-02-31` is March 3rd), accepts
    `24:00` as the end of a day, truncates fractions to milliseconds and refuses `-000000`. A date-time
    without a zone is local time in V8; this port reads it as UTC, which is what every host publishing
    records here writes anyway (records are always stamped with `Z`). V8's legacy fallback for
    non-ISO text (`"1"` is a date there) is deliberately not reproduced: such text is garbage here.
    """
    text = js_string(value)
    match = _ISO.fullmatch(text)
    if match is None or match["year"] == "-000000":
        return math.nan
    year = int(match["year"])
    month = int(match["month"] or 1)
    day = int(match["day"] or 1)
    hour = int(match["hour"] or 0)
    minute = int(match["minute"] or 0)
    second = int(match["second"] or 0)
    millis = int((match["fraction"] or "0")[:3].ljust(3, "0"))
    if not (1 <= month <= 12 and 1 <= day <= 31 and minute <= 59 and second <= 59):
        return math.nan
    if hour > 24 or (hour == 24 and (minute or second or millis)):
        return math.nan
    offset_ms = 0
    zone = match["zone"]
    if zone and zone not in ("Z", "z"):
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[4:6])
        if zone_hours > 23 or zone_minutes > 59:
            return math.nan
        offset_ms = (zone_hours * 60 + zone_minutes) * 60_000 * (1 if zone[0] == "+" else -1)
    days = _days_from_civil(year, month, day)
    time_ms = days * DAY_MS + ((hour * 60 + minute) * 60 + second) * 1000 + millis - offset_ms
    if abs(time_ms) > _MAX_TIME_MS:
        return math.nan
    return float(time_ms)


_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _json_string(text: str) -> str:
    # json.dumps escapes exactly JSON.stringify's set; a lone surrogate is escaped by both as \udxxx.
    encoded = json.dumps(text, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", encoded)


def js_json(value: object) -> str:
    """`JSON.stringify(value)` for JSON-shaped data: compact, numbers as JS prints them, NaN as null."""
    if value is None or value is MISSING:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, int):
        return js_string(value)
    if isinstance(value, float):
        return js_string(value) if finite(value) else "null"
    if isinstance(value, Mapping):
        items = (f"{_json_string(str(key))}:{js_json(item)}" for key, item in value.items() if item is not MISSING)
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(js_json(item) for item in value) + "]"
    return "null"


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def js_json_parse(text: str | bytes) -> object:
    """`JSON.parse`: strict UTF-8, no NaN or Infinity literals (Python's json would accept those)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError as error:  # JSON.parse has no such limit; a reader must still not crash on it
        raise ValueError("nested too deeply to read") from error


def iso_string(epoch_ms: int) -> str:
    """`new Date(epoch_ms).toISOString()`: UTC, milliseconds, a `Z`."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def mapping_at(value: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """An object field as a mapping: empty when absent or not an object (hostile data reads as nothing)."""
    found = value.get(key)
    return found if isinstance(found, Mapping) else {}
