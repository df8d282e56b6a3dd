"""How each kind of setting value reads in the published JSON Schemas and in an env file: its `Form`.

A form says what the schemas publish for a kind (the env string's pattern, the inventory's typed value), what a
valid value is in words, and how an inventory value is written into the env file; the kinds themselves, their
validators and the problems they raise are in `kinds.py`. Bounds are the field's own `ge`/`le`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.config.patterns import grouped, schema_pattern, schema_tail, whole_number_pattern
from pi_dispatch.core.money import MAX_MICROS, MICROS_PER_USD, USD_AMOUNT_PATTERN, format_micros, parse_usd_micros
from pi_dispatch.core.names import PROFILE_NAME_RE
from pi_dispatch.core.profiles import ABSOLUTE_SCRIPT, MAX_PROFILES, TABLE_PATTERN, render_profiles

CPUS: Final = r"[1-9][0-9]{0,3}(?:\.[0-9]{1,2})?|0\.(?:[1-9][0-9]?|0[1-9])"
BLANKS: Final = "[ \\t]*"
MAX_LIST: Final = 64

Bounds = tuple[float | None, float | None]


@dataclass(frozen=True, kw_only=True)
class Form:
    """What the schemas publish for one kind of setting, and how an inventory value is written in the env file."""

    blank_is_default: bool = False  # an empty value in an env file leaves the setting at its default
    secret: bool = False  # never quoted in a message, write-only in the schemas

    def host_types(self) -> tuple[type, ...]:
        """The types an inventory may declare the setting as (bool is never an int here)."""
        return (str,)

    def noun(self, bounds: Bounds) -> str:
        """What a valid value is, in words, for messages and fixes."""
        return "valid"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        raise NotImplementedError

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        raise NotImplementedError

    def env_text(self, value: object) -> str:
        """An inventory value as the env file holds it."""
        return str(value)


@dataclass(frozen=True, kw_only=True)
class WholeForm(Form):
    unit: str = ""

    def host_types(self) -> tuple[type, ...]:
        return (int,)

    def noun(self, bounds: Bounds) -> str:
        low, high = bounds
        return f"a whole number{self.unit} from {low:g} to {high:g}"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        low, high = (int(limit or 0) for limit in bounds)
        return {"pattern": schema_pattern(f"{BLANKS}{grouped(whole_number_pattern(low, high))}{BLANKS}")}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"type": "integer", "minimum": bounds[0], "maximum": bounds[1]}


@dataclass(frozen=True, kw_only=True)
class OptionalWholeForm(WholeForm):
    """A whole number, or empty (None) for a limit that is off."""

    blank_is_default: bool = True

    def noun(self, bounds: Bounds) -> str:
        return f"{super().noun(bounds)}, or empty for none"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        low, high = (int(limit or 0) for limit in bounds)
        return {"pattern": schema_pattern(f"{BLANKS}(?:{grouped(whole_number_pattern(low, high))})?{BLANKS}")}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"type": ["integer", "null"], "minimum": bounds[0], "maximum": bounds[1]}

    def env_text(self, value: object) -> str:
        return "" if value is None else str(value)


@dataclass(frozen=True, kw_only=True)
class CpusForm(Form):
    def host_types(self) -> tuple[type, ...]:
        return (int, float)

    def noun(self, bounds: Bounds) -> str:
        return f"a number of CPUs from {bounds[0]:g} to {bounds[1]:g}, two decimals at most"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"pattern": schema_pattern(f"{BLANKS}(?:{CPUS}){BLANKS}")}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"type": "number", "minimum": bounds[0], "maximum": bounds[1]}

    def env_text(self, value: object) -> str:
        return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, kw_only=True)
class FlagForm(Form):
    def host_types(self) -> tuple[type, ...]:
        return (bool,)

    def noun(self, bounds: Bounds) -> str:
        return "1 or 0"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"enum": ["", "0", "1"]}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"type": "boolean"}

    def env_text(self, value: object) -> str:
        return "1" if value is True else "0"


@dataclass(frozen=True, kw_only=True)
class TextForm(Form):
    """A string whose whole value matches pattern; with blank_is_default, an empty env value means the default."""

    pattern: str
    what: str
    nullable: bool = False  # the inventory may declare null, the same as leaving it out
    reserved_tail: str | None = None  # a pattern the value may not end with

    def host_types(self) -> tuple[type, ...]:
        return (str, type(None)) if self.nullable else (str,)

    def noun(self, bounds: Bounds) -> str:
        return self.what

    def _marks(self) -> dict[str, Any]:
        refusal = {"not": {"type": "string", "pattern": schema_tail(self.reserved_tail)}} if self.reserved_tail else {}
        return {**refusal, **({"writeOnly": True} if self.secret else {})}

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        pattern = f"|{self.pattern}" if self.blank_is_default else self.pattern
        return {"pattern": schema_pattern(pattern), **self._marks()}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        kind: Any = ["string", "null"] if self.nullable else "string"
        return {"type": kind, "pattern": schema_pattern(self.pattern), **self._marks()}


@dataclass(frozen=True, kw_only=True)
class UsdForm(TextForm):
    """An amount of US dollars (the reference's grammar, read into integer micro-dollars), or empty for none; an
    inventory may declare it as a number too, written into the env file in the canonical form."""

    pattern: str = USD_AMOUNT_PATTERN
    what: str = "an amount of US dollars above 0 and at most 1000000, six decimals at most (such as 2.50)"
    blank_is_default: bool = True
    nullable: bool = True

    def host_types(self) -> tuple[type, ...]:
        return (str, int, float, type(None))

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {
            "type": ["string", "number", "null"],
            "pattern": schema_pattern(self.pattern),
            "exclusiveMinimum": 0,
            "maximum": MAX_MICROS // MICROS_PER_USD,
        }

    def env_text(self, value: object) -> str:
        micros = parse_usd_micros(value)
        return "" if value is None else format_micros(micros) if micros is not None else str(value)


@dataclass(frozen=True, kw_only=True)
class ProfilesForm(Form):
    blank_is_default: bool = True

    def host_types(self) -> tuple[type, ...]:
        return (dict,)

    def noun(self, bounds: Bounds) -> str:
        return "a profile table"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"pattern": schema_pattern(TABLE_PATTERN), "format": "pi-profile-table"}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {
            "type": "object",
            "maxProperties": MAX_PROFILES,
            "propertyNames": {"pattern": schema_pattern(PROFILE_NAME_RE.pattern)},
            "additionalProperties": {"type": "string", "pattern": schema_pattern(ABSOLUTE_SCRIPT)},
        }

    def env_text(self, value: object) -> str:
        table = value if isinstance(value, Mapping) else {}
        return render_profiles({str(name): str(path) for name, path in table.items()})


@dataclass(frozen=True, kw_only=True)
class ListForm(Form):
    """Comma-separated items in the env file, a list in the inventory; empty means none."""

    item: str
    what: str
    blank_is_default: bool = True

    def host_types(self) -> tuple[type, ...]:
        return (list,)

    def noun(self, bounds: Bounds) -> str:
        return f"{self.what}, comma separated"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        item = grouped(self.item)
        return {"pattern": schema_pattern(f"|{item}(?:,{item})*")}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {
            "type": "array",
            "items": {"type": "string", "pattern": schema_pattern(self.item)},
            "maxItems": MAX_LIST,
        }

    def env_text(self, value: object) -> str:
        return ",".join(str(item) for item in value) if isinstance(value, list | tuple) else str(value)
