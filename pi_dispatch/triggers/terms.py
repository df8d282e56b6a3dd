"""What every trigger check shares: the refusal, JavaScript's notion of a non-empty string, the near-miss sweep
of field names, and which model a trigger's job runs on. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from pi_dispatch.core.jscompat import is_integer, js_string, js_trim

MODELS_MAX: Final = 16
COST_MAX: Final = 1_000_000
PROVIDER: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MODEL: Final = re.compile(r"(?:[A-Za-z0-9]|[~@][A-Za-z0-9])[A-Za-z0-9._:/@-]{0,62}")
COST: Final = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]{1,6})?")
_PRINTABLE_ASCII: Final = re.compile(r"[\x20-\x7e]*")

# Near-miss spellings refused rather than dropped: a dropped model, wait, venue or tool switch makes the job run
# differently from what the file reads as. Keys are the spelling with case and separators removed.
_MODEL_MISSES: Final = {
    **dict.fromkeys(("provider", "providers", "providerid", "providerids", "providername"), "run.provider"),
    **dict.fromkeys(("model", "modelid", "modelname"), "run.model"),
    **dict.fromkeys(("models", "modelids", "modelnames", "allowedmodels", "allowedmodel"), "run.models"),
    **dict.fromkeys(("maxturns", "maxturn"), "run.maxTurns"),
    **dict.fromkeys(("maxcostusd", "maxcost"), "run.maxCostUsd"),
}
_SWEEPS: Final = (
    (frozenset({"backend"}), {"backend": "run.backend", "backends": "run.backend"}),
    (frozenset({"waitFor"}), {"waitfor": "run.waitFor"}),
    (
        frozenset({"excludeTools"}),
        dict.fromkeys(("excludetools", "excludetool", "excludedtools"), "run.excludeTools"),
    ),
    (frozenset({"provider", "model", "maxTurns", "models", "maxCostUsd"}), _MODEL_MISSES),
)


class Refusal(ValueError):
    """One refused field of one trigger: the field's path (`run.flow`) and what is wrong, never the value."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class Refusals(ValueError):
    """Every refused field of one trigger, in the order the trigger reads."""

    def __init__(self, refusals: list[Refusal]) -> None:
        self.refusals = refusals
        super().__init__("; ".join(str(refusal) for refusal in refusals))


Checked = TypeVar("Checked")


class Checks:
    """Each field's check run in turn, every refusal kept: one bad field never hides another."""

    def __init__(self) -> None:
        self.refused: list[Refusal] = []

    def take(self, check: Callable[[], Checked]) -> Checked | None:
        """The check's result, or None with its refusals kept."""
        try:
            return check()
        except Refusals as many:
            self.refused += many.refusals
        except Refusal as one:
            self.refused.append(one)
        return None

    def passed(self, check: Callable[[], Checked]) -> tuple[bool, Checked | None]:
        """`take`, and whether the check refused nothing (a field the next checks read must be sound first)."""
        before = len(self.refused)
        return (value := self.take(check)) is not None or len(self.refused) == before, value

    def settle(self) -> None:
        if self.refused:
            raise Refusals(self.refused)


def is_text(value: object) -> bool:
    """A string with something besides whitespace in it (the reference's isNonEmptyString)."""
    return isinstance(value, str) and js_trim(value) != ""


def _squashed(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key, flags=re.IGNORECASE | re.ASCII).lower()


def _subsequence(needle: str, hay: str) -> bool:
    letters = iter(hay)
    return all(letter in letters for letter in needle)


def _near_miss(key: str, targets: Mapping[str, str]) -> str | None:
    squashed = _squashed(key)
    if _PRINTABLE_ASCII.fullmatch(key):
        return targets.get(squashed)
    if len(squashed) < 4:  # a homoglyph key: what survives must still spell a target in order
        return None
    return next((meant for target, meant in targets.items() if _subsequence(squashed, target)), None)


def sweep_near_misses(on: Mapping[str, Any], run: Mapping[str, Any]) -> None:
    """Refuse a key that nearly spells a run field, and any spelling of one under `on`."""
    for exact, targets in _SWEEPS:
        for label, source, exact_is_legal in (("run", run, True), ("on", on, False)):
            for key in source:
                if exact_is_legal and key in exact:
                    continue
                meant = _near_miss(str(key), targets)
                if meant is not None:
                    raise Refusal(f"{label}.{key}", f"is not a field; did you mean {meant}? (a near miss is refused)")
    for key in ("tools", "noTools"):
        if key in run:
            raise Refusal(f"run.{key}", "is not a field: name the tools to take away in run.excludeTools")


def _max_cost(value: object) -> bool:
    text = js_string(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not COST.fullmatch(text):
        return False
    from decimal import Decimal, InvalidOperation  # exact, and only where a triggers file is checked

    try:
        return Decimal(0) < Decimal(text) <= COST_MAX
    except InvalidOperation:
        return False


def model_fields(run: Mapping[str, Any]) -> dict[str, Any]:
    """provider, model, maxTurns, models and maxCostUsd as written; null (the deployment default) is left out."""
    found: dict[str, Any] = {}
    refused: list[Refusal] = []
    checks = (
        ("provider", lambda v: isinstance(v, str) and PROVIDER.fullmatch(v), "1-64 letters, digits, . _ -"),
        ("model", lambda v: isinstance(v, str) and MODEL.fullmatch(v), "1-64 letters, digits, . _ - : / @"),
        ("maxTurns", lambda v: is_integer(v) and v >= 1, "a whole number, 1 or more"),
    )
    for key, valid, what in checks:
        if run.get(key) is not None:
            if not valid(run[key]):
                refused.append(Refusal(f"run.{key}", f"must be {what}, or null for the deployment default"))
            found[key] = run[key]
    if run.get("models") is not None:
        try:
            found["models"] = _models(run["models"], found)
        except Refusal as refusal:
            refused.append(refusal)
    if run.get("maxCostUsd") is not None:
        if not _max_cost(run["maxCostUsd"]):
            refused.append(
                Refusal("run.maxCostUsd", "must be a decimal above 0, at most 1000000, with at most 6 decimals")
            )
        found["maxCostUsd"] = run["maxCostUsd"]
    if refused:
        raise Refusals(refused)
    return found


def _models(models: object, chosen: Mapping[str, Any]) -> list[str]:
    if not isinstance(models, list) or not 1 <= len(models) <= MODELS_MAX:
        raise Refusal("run.models", f"must list 1 to {MODELS_MAX} provider/model entries")
    folded: list[str] = []
    for position, entry in enumerate(models):
        provider, _, model = entry.partition("/") if isinstance(entry, str) else ("", "", "")
        if not (PROVIDER.fullmatch(provider) and MODEL.fullmatch(model)):
            raise Refusal(f"run.models[{position}]", "must be provider/model")
        if entry.lower() in folded:
            raise Refusal(f"run.models[{position}]", "repeats an entry (case-insensitively)")
        folded.append(entry.lower())
    if "provider" in chosen and "model" in chosen and f"{chosen['provider']}/{chosen['model']}".lower() not in folded:
        raise Refusal("run.models", "must include run.provider/run.model when all three are set")
    return [str(entry) for entry in models]
