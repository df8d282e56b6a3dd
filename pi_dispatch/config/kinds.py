"""The kinds of value a setting holds: how each is read from an env file, declared in an inventory, published.

A field of `WorkerSettings` (or of the role's own variables) is typed with one of the `Annotated` kinds below.
The kind's validator reads the string an env file holds, and takes an already typed value as it is; its
`Form` says what the JSON Schemas publish for it (the env string's pattern, the inventory's typed value),
what a valid value is in words, and how an inventory value is written into the env file. Bounds are the
field's own `ge`/`le`. `field_problems` turns a validation error into one `Problem` per field, worded by
the same forms, never quoting a secret. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, SecretStr, ValidationError, ValidationInfo
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import NoDecode

from pi_dispatch.config.patterns import grouped, schema_pattern, schema_tail, whole_number_pattern
from pi_dispatch.core.errors import Problem
from pi_dispatch.core.names import (
    IMAGE_REFERENCE_RE,
    PROFILE_NAME_RE,
    RESERVED_TAIL_RE,
    WORKER_NAME_RE,
    worker_name_problem,
)
from pi_dispatch.core.profiles import (
    ABSOLUTE_SCRIPT,
    MAX_PROFILES,
    TABLE_PATTERN,
    ProfileKind,
    parse_profiles,
    render_profiles,
)

X_FIX: Final = "x-fix"
X_HOST_VAR: Final = "x-host-var"
PATH_CHARS: Final = r"[^\x00-\x1f\x7f]*"
ABSOLUTE_PATH: Final = "/" + PATH_CHARS
NO_CONTROL: Final = PATH_CHARS
VALKEY_URL: Final = r"(?:redis|rediss|unix)://[^\x00-\x20\x7f]+"
ZONE: Final = r":?[A-Za-z0-9_+./-]+"
CPUS: Final = r"[1-9][0-9]{0,3}(?:\.[0-9]{1,2})?|0\.(?:[1-9][0-9]?|0[1-9])"
HOST_PORT: Final = r"[A-Za-z0-9.:%_\[\]-]{1,255}:[0-9]{1,5}"
_BLANKS: Final = "[ \\t]*"
MAX_LIST: Final = 64
_WHOLE: Final = re.compile(r"[ \t]*(0|[1-9][0-9]{0,17})[ \t]*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")

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
        return {"pattern": schema_pattern(f"{_BLANKS}{grouped(whole_number_pattern(low, high))}{_BLANKS}")}

    def host_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"type": "integer", "minimum": bounds[0], "maximum": bounds[1]}


@dataclass(frozen=True, kw_only=True)
class CpusForm(Form):
    def host_types(self) -> tuple[type, ...]:
        return (int, float)

    def noun(self, bounds: Bounds) -> str:
        return f"a number of CPUs from {bounds[0]:g} to {bounds[1]:g}, two decimals at most"

    def env_schema(self, bounds: Bounds) -> dict[str, Any]:
        return {"pattern": schema_pattern(f"{_BLANKS}(?:{CPUS}){_BLANKS}")}

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


def refused(message: str = "", problems: list[Problem] | None = None) -> PydanticCustomError:
    """A refusal for `field_problems` to word: message (or the form's noun) and any problems found in the value."""
    return PydanticCustomError("pi_dispatch", "{message}", {"message": message, "problems": problems or []})


def _whole(value: object) -> object:
    if isinstance(value, bool) or (isinstance(value, str) and not _WHOLE.fullmatch(value)):
        raise refused()
    return int(value.strip(" \t")) if isinstance(value, str) else value


def _cpus(value: object) -> object:
    if isinstance(value, bool) or (isinstance(value, str) and not re.fullmatch(f"{_BLANKS}(?:{CPUS}){_BLANKS}", value)):
        raise refused()
    return float(value.strip(" \t")) if isinstance(value, str) else value


def _flag(value: object) -> object:
    if isinstance(value, str):
        if value not in ("", "0", "1"):
            raise refused()
        return value == "1"
    return value


def matching(form: TextForm) -> BeforeValidator:
    compiled = re.compile(form.pattern)

    def check(value: object) -> object:
        if isinstance(value, str):
            if form.secret and _CONTROL.search(value):
                raise refused("holds a control character")
            if compiled.fullmatch(value) is None or (form.reserved_tail and re.search(form.reserved_tail, value)):
                raise refused()
        return value

    return BeforeValidator(check)


def _items(form: ListForm) -> BeforeValidator:
    compiled = re.compile(form.item)

    def split(value: object) -> object:
        if isinstance(value, str):
            items = [item for item in value.split(",") if item] if value else []
            if len(items) > MAX_LIST or any(compiled.fullmatch(item) is None for item in items):
                raise refused()
            return tuple(items)
        return value

    return BeforeValidator(split)


def _worker_name(value: object) -> object:
    if isinstance(value, str) and (problem := worker_name_problem(value)):
        raise refused(f"{value!r} {problem}")
    return value


def _profiles(value: object, info: ValidationInfo) -> object:
    if isinstance(value, str):
        kind: ProfileKind = "wait" if info.field_name == "wait_profiles" else "secret"
        parsed = parse_profiles(value, kind, "")
        if parsed.problems:
            raise refused(problems=parsed.problems)
        return dict(parsed.table)
    return value


WORKER_NAME_FORM: Final = TextForm(
    pattern=WORKER_NAME_RE.pattern,
    what="a worker name",
    blank_is_default=True,
    nullable=True,
    reserved_tail=RESERVED_TAIL_RE.pattern,
)
_URL = TextForm(pattern=VALKEY_URL, what="a redis://, rediss:// or unix:// URL")
_PASSWORD = TextForm(pattern=NO_CONTROL, what="one line", blank_is_default=True, secret=True)
# empty names no Sentinel (VALKEY_URL is the store), so empty is a value here too
_SENTINELS = TextForm(pattern=f"|{HOST_PORT}(?:{_BLANKS},{_BLANKS}{HOST_PORT}){{0,8}}", what="host:port list, or empty")
_PRIMARY_NAME = TextForm(pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", what="a name", blank_is_default=True)
_HOST_DIR = TextForm(pattern=ABSOLUTE_PATH, what="an absolute path", blank_is_default=True)
_IMAGE = TextForm(pattern=IMAGE_REFERENCE_RE.pattern, what="an image reference")
_ZONE = TextForm(pattern=ZONE, what="a zone name", blank_is_default=True)
_FILE = TextForm(pattern=ABSOLUTE_PATH, what="an absolute path", blank_is_default=True, nullable=True)
_IMAGES = ListForm(item=IMAGE_REFERENCE_RE.pattern, what="image references")
_USER = TextForm(
    pattern=r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?",
    what="a user[:group] name or id",
    blank_is_default=True,
)
# an empty address turns the listener off, so empty is a value here, not "the default"
_METRICS = TextForm(pattern=f"|{HOST_PORT}", what="host:port, or empty for none")
_NETWORK = TextForm(pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", what="a Docker network name", blank_is_default=True)

Whole = Annotated[int, BeforeValidator(_whole), WholeForm()]
WholeMs = Annotated[int, BeforeValidator(_whole), WholeForm(unit=" of milliseconds")]
Cpus = Annotated[float, BeforeValidator(_cpus), CpusForm()]
Flag = Annotated[bool, BeforeValidator(_flag), FlagForm()]
WorkerName = Annotated[str, BeforeValidator(_worker_name), WORKER_NAME_FORM]
# NoDecode: an env value is the profile grammar, not the JSON pydantic-settings reads a dict from by default
SecretProfiles = Annotated[dict[str, str], NoDecode, BeforeValidator(_profiles), ProfilesForm()]
WaitProfiles = Annotated[dict[str, str], NoDecode, BeforeValidator(_profiles), ProfilesForm()]
ValkeyUrl = Annotated[str, matching(_URL), _URL]
Password = Annotated[SecretStr | None, matching(_PASSWORD), _PASSWORD]
Sentinels = Annotated[str, matching(_SENTINELS), _SENTINELS]
PrimaryName = Annotated[str, matching(_PRIMARY_NAME), _PRIMARY_NAME]
# The replicated store's three settings, the same for the worker and the receiver (`infra/store.py` reads them).
SENTINELS_HELP: Final = (
    "The Sentinels of a replicated store, host:port comma separated: the primary is found through them, and "
    "VALKEY_URL then gives only the database number. Empty: VALKEY_URL is the store.",
    "host:port entries separated by commas, such as store1:26379,store2:26379,store3:26379; or empty",
)
PRIMARY_NAME_HELP: Final = (
    "The name the Sentinels monitor the store's primary under (their `sentinel monitor <name>`).",
    "letters, digits, dot, dash and underscore, up to 64, such as pi-dispatch",
)
SENTINEL_PASSWORD_HELP: Final = (
    "The Sentinels' own password (their requirepass), when they ask for one; VALKEY_PASSWORD stays the store's.",
    "one line, no control characters; keep it in a vault and the env file 0600",
)
HostDir = Annotated[Path, matching(_HOST_DIR), _HOST_DIR]
HostFile = Annotated[Path | None, matching(_FILE), _FILE]
ImageReference = Annotated[str, matching(_IMAGE), _IMAGE]
Zone = Annotated[str | None, matching(_ZONE), _ZONE]
JobNetwork = Annotated[str | None, matching(_NETWORK), _NETWORK]
ImageList = Annotated[tuple[str, ...], NoDecode, _items(_IMAGES), _IMAGES]
ContainerUser = Annotated[str | None, matching(_USER), _USER]
ListenAddress = Annotated[str, matching(_METRICS), _METRICS]


def form_of(field: FieldInfo) -> Form:
    """The form a field's kind declares."""
    found = next((item for item in field.metadata if isinstance(item, Form)), None)
    if found is None:
        raise TypeError(f"a setting's type must carry a Form: {field}")
    return found


def bounds_of(field: FieldInfo) -> Bounds:
    """The field's ge/le constraints."""
    low = next((item.ge for item in field.metadata if hasattr(item, "ge")), None)
    high = next((item.le for item in field.metadata if hasattr(item, "le")), None)
    return low, high


def extra(field: FieldInfo, key: str) -> str:
    """One of the `x-` facts a field declares (its fix, its host variable)."""
    values = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return str(values.get(key) or "")


def field_problems(
    error: ValidationError, model: type[BaseModel], raw: Mapping[str, object], source: str
) -> list[Problem]:
    """One Problem per refused value, naming its variable, what is wrong and the field's fix; never a secret."""
    fields = {str(field.validation_alias or name): field for name, field in model.model_fields.items()}
    found: list[Problem] = []
    for item in error.errors():
        variable = str(item["loc"][0]) if item["loc"] else "(settings)"
        field = fields.get(variable)
        if field is None:
            found.append(Problem(variable, str(item["msg"]), source))
            continue
        form, context = form_of(field), item.get("ctx") or {}
        nested = context.get("problems") or []
        if nested:
            found += [replace(problem, source=source) for problem in nested]
            continue
        value = raw.get(variable)
        if form.secret:
            message = str(context.get("message") or f"is not {form.noun(bounds_of(field))}")
        else:
            message = str(context.get("message") or f"{value!r} is not {form.noun(bounds_of(field))}")
        found.append(Problem(variable, message, source, extra(field, X_FIX)))
    return found
