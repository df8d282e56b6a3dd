"""Dollar amounts as the reference reads them: integer micro-dollars (1 USD = 1,000,000), never a float multiply.

A string must be a plain decimal of at most seven whole digits and six decimals; a number is judged by the form
JavaScript prints it in (`String(n)`), so `0.1 + 0.2` and `1e-7` are refused as they are on a Node host. An amount
must be above 0 and at most 1,000,000 USD. A refusal says which key, never the value. Pure.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

from pi_dispatch.core.budget import hash16
from pi_dispatch.core.jscompat import js_string

MICROS_PER_USD: Final = 1_000_000
USD_SETTINGS: Final = ("maxCostUsd", "dailyCostUsd", "weeklyCostUsd", "monthlyCostUsd")
INVALID: Final = "invalid"
Amount = int | str | None  # micros, INVALID, or None for unset
SAFE_INTEGER: Final = 2**53 - 1
# The exit line's counters that each say the runner could not price all of the run: any one of them absent or not 0
# and the cost it reports is a floor, not a meter
FLOOR_COUNTERS: Final = (
    "unresolved",
    "unpriced",
    "boundExceeded",
    "longContext",
    "costUnjudged",
    "costUnanswered",
    "unmeteredChildren",
    "costUnreported",
)
METERED, FLOOR = "metered", "floor"
BASES: Final = frozenset({METERED, FLOOR, "refunded", "unreserved"})
MODEL_BASES: Final = frozenset({METERED, FLOOR, "refunded"})
MAX_MICROS: Final = 1_000_000 * MICROS_PER_USD
AMOUNT_RE: Final = re.compile(r"(0|[1-9][0-9]{0,6})(?:\.([0-9]{1,6}))?")
# The amounts AMOUNT_RE reads that are also above 0 and at most 1,000,000: what a schema can say of a setting
USD_AMOUNT_PATTERN: Final = (
    r"[1-9][0-9]{0,5}(?:\.[0-9]{1,6})?|1000000(?:\.0{1,6})?"
    r"|0\.(?:[1-9][0-9]{0,5}|0[1-9][0-9]{0,4}|00[1-9][0-9]{0,3}|000[1-9][0-9]{0,2}|0000[1-9][0-9]?|00000[1-9])"
)


def parse_usd_micros(value: object) -> int | None:
    """The amount in micro-dollars, or None when it is not one the reference takes."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = value if isinstance(value, str) else js_string(value)
    found = AMOUNT_RE.fullmatch(text)
    if found is None:
        return None
    micros = int(found[1]) * MICROS_PER_USD + int((found[2] or "").ljust(6, "0"))
    return micros if 0 < micros <= MAX_MICROS else None


def format_micros(micros: int) -> str:
    """Micro-dollars as the reference prints them: at least two decimals, no trailing zeros past them."""
    whole, fraction = divmod(micros, MICROS_PER_USD)
    decimals = f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return f"{whole}.{decimals}"


def effective_cost_cap_micros(trigger: object, deployment: object) -> int | None:
    """A job's cost cap: the smaller of its trigger's (`run.maxCostUsd`) and the host's (`PI_MAX_COST_USD`), each
    counted only when set. A trigger can only narrow: a malformed trigger value reads as 0 (the job may spend
    nothing), never as no cap."""
    caps = []
    if trigger is not None:
        caps.append(parse_usd_micros(trigger) or 0)
    if deployment is not None and (host := parse_usd_micros(deployment)) is not None:
        caps.append(host)
    return min(caps) if caps else None


def usd_fingerprint(
    settings: Mapping[str, Amount], rows: Sequence[Mapping[str, Amount]], untargeted: Sequence[str] | str
) -> str:
    """The registry row's `fpUsd`: 16 hex of SHA-256 over the canonical JSON (keys sorted, compact) of the dollar caps
    a host runs with, its dollar rows by their key prefix (`counter`), and the model rows a job without its own list
    reserves in. Two hosts that would cap the same spend print the same; no scope or amount shows in it."""
    document = {
        "settings": {name: settings.get(name) for name in USD_SETTINGS},
        "rows": sorted((dict(row) for row in rows), key=lambda row: str(row.get("counter"))),
        "untargeted": untargeted if isinstance(untargeted, str) else sorted(untargeted),
    }
    return hash16(json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def metered_micros(cost: object) -> int | None:
    """A runner's dollar cost (a float of USD) in micro-dollars, rounded up; None when it is not a cost."""
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0:
        return None
    micros = math.ceil(cost * MICROS_PER_USD)
    return micros if micros <= SAFE_INTEGER else None


def _whole_zero(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


def dollar_settlement(
    tokens: Mapping[str, object] | None, ledger: bool, *, trusted: bool, reserved: int
) -> tuple[int, str]:
    """What a run that held `reserved` micros is charged, and on what basis: its metered cost only when the line is
    trusted, metered, within its own cap, with every floor counter present and 0, and a ledger (or no call at all);
    else the floor, the hold or the reported cost if larger."""
    cost = metered_micros(tokens.get("cost")) if tokens is not None else None
    floor = (max(reserved, cost) if cost is not None else reserved, FLOOR)
    if not trusted or tokens is None or tokens.get("metered") is not True or cost is None:
        return floor
    cap = tokens.get("costCapMicros")
    if isinstance(cap, bool) or not isinstance(cap, int | float) or cap > reserved:
        return floor
    if not all(_whole_zero(tokens.get(counter)) for counter in FLOOR_COUNTERS):
        return floor
    if not ledger and not (_whole_zero(tokens.get("calls")) and cost == 0):
        return floor
    return cost, METERED


def model_settlement(
    usage: Mapping[str, object] | None, model: str, *, job_basis: str, trusted: bool, calls: object, reserved: int
) -> tuple[int, str]:
    """What a model's window is charged: the run's rows for that model (case-insensitive `provider/model`), summed,
    when the run was metered and its ledger whole; else the floor (the hold)."""
    rows = usage.get("models") if usage is not None else None
    if job_basis != METERED or not trusted:
        return reserved, FLOOR
    if usage is None:
        return (0, METERED) if _whole_zero(calls) else (reserved, FLOOR)
    listed = rows if isinstance(rows, list) else []
    other = [row for row in listed if isinstance(row, Mapping) and row.get("provider") == row.get("model") == "other"]
    if not _whole_zero(usage.get("truncated")) or any(not _whole_zero(row.get("cost")) for row in other):
        return reserved, FLOOR
    wanted = model.lower()
    costs = [
        row.get("cost")
        for row in listed
        if isinstance(row, Mapping) and f"{row.get('provider')}/{row.get('model')}".lower() == wanted
    ]
    total = metered_micros(sum(cost for cost in costs if isinstance(cost, int | float)))
    return (total, METERED) if total is not None else (reserved, FLOOR)


def read_dollars(value: object) -> dict[str, object] | None:
    """A record's `dollars` rebuilt from its named fields (`reservedMicros`, `settledMicros`, `basis`, `modelBasis`),
    or None when any of them is not what the reference writes."""
    if not isinstance(value, Mapping):
        return None
    micros = [value.get("reservedMicros"), value.get("settledMicros")]
    if not all(isinstance(each, int) and not isinstance(each, bool) and 0 <= each <= SAFE_INTEGER for each in micros):
        return None
    basis, model_basis = value.get("basis"), value.get("modelBasis")
    if basis not in BASES or not (model_basis is None or model_basis in MODEL_BASES):
        return None
    return {"reservedMicros": micros[0], "settledMicros": micros[1], "basis": basis, "modelBasis": model_basis}
