"""The kinds of value a setting holds: how each is read from an env file, declared in an inventory, published.

A field of `WorkerSettings` (or of the role's own variables) is typed with one of the `Annotated` kinds below.
The kind's validator reads the string an env file holds, and takes an already typed value as it is; its
`Form` (`forms.py`) says what the JSON Schemas publish for it, what a valid value is in words, and how an
inventory value is written into the env file. `field_problems` turns a validation error into one `Problem` per
field, worded by the same forms, never quoting a secret. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Final

from pydantic import BaseModel, BeforeValidator, SecretStr, ValidationError, ValidationInfo
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import NoDecode

from pi_dispatch.config.forms import (
    BLANKS,
    CPUS,
    MAX_LIST,
    Bounds,
    CpusForm,
    FlagForm,
    Form,
    ListForm,
    OptionalWholeForm,
    ProfilesForm,
    TextForm,
    UsdForm,
    WholeForm,
)
from pi_dispatch.core.egress import egress_armed
from pi_dispatch.core.errors import Problem
from pi_dispatch.core.money import parse_usd_micros
from pi_dispatch.core.names import (
    IMAGE_REFERENCE_RE,
    PROFILE_NAME_RE,
    RESERVED_TAIL_RE,
    WORKER_NAME_RE,
    worker_name_problem,
)
from pi_dispatch.core.profiles import (
    ProfileKind,
    parse_profiles,
)
from pi_dispatch.core.runtimes import RUNTIME_NAME_RE

X_FIX: Final = "x-fix"
X_HOST_VAR: Final = "x-host-var"
PATH_CHARS: Final = r"[^\x00-\x1f\x7f]*"
ABSOLUTE_PATH: Final = "/" + PATH_CHARS
NO_CONTROL: Final = PATH_CHARS
VALKEY_URL: Final = r"(?:redis|rediss|unix)://[^\x00-\x20\x7f]+"
ZONE: Final = r":?[A-Za-z0-9_+./-]+"
HOST_PORT: Final = r"[A-Za-z0-9.:%_\[\]-]{1,255}:[0-9]{1,5}"
_WHOLE: Final = re.compile(r"[ \t]*(0|[1-9][0-9]{0,17})[ \t]*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def refused(message: str = "", problems: list[Problem] | None = None) -> PydanticCustomError:
    """A refusal for `field_problems` to word: message (or the form's noun) and any problems found in the value."""
    return PydanticCustomError("pi_dispatch", "{message}", {"message": message, "problems": problems or []})


def _whole(value: object) -> object:
    if isinstance(value, bool) or (isinstance(value, str) and not _WHOLE.fullmatch(value)):
        raise refused()
    return int(value.strip(" \t")) if isinstance(value, str) else value


def _optional_whole(value: object) -> object:
    return None if value is None or (isinstance(value, str) and not value.strip(" \t")) else _whole(value)


def _usd(value: object) -> object:
    """An amount of dollars as integer micro-dollars, None for empty; a typed value is micro-dollars already."""
    if isinstance(value, str):
        if not value:
            return None
        if (micros := parse_usd_micros(value)) is None:
            raise refused()
        return micros
    return value


def _cpus(value: object) -> object:
    if isinstance(value, bool) or (isinstance(value, str) and not re.fullmatch(f"{BLANKS}(?:{CPUS}){BLANKS}", value)):
        raise refused()
    return float(value.strip(" \t")) if isinstance(value, str) else value


def _flag(value: object) -> object:
    if isinstance(value, str):
        if value not in ("", "0", "1"):
            raise refused()
        return value == "1"
    return value


def _switch(value: object) -> object:
    if isinstance(value, str):
        try:
            return egress_armed(value)
        except ValueError:
            raise refused() from None
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
        kinds: dict[str | None, ProfileKind] = {"wait_profiles": "wait", "egress_profiles": "egress"}
        kind = kinds.get(info.field_name, "secret")
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
_SENTINELS = TextForm(pattern=f"|{HOST_PORT}(?:{BLANKS},{BLANKS}{HOST_PORT}){{0,8}}", what="host:port list, or empty")
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
_CONTRACT = TextForm(pattern="reference|event", what="reference or event", blank_is_default=True)
_PROVIDER = TextForm(pattern=r"[a-z0-9][a-z0-9._-]{0,63}", what="a pi provider id such as anthropic")
_MODEL = TextForm(pattern=r"|[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}", what="a model id, or empty")
_RUNTIME = TextForm(pattern=RUNTIME_NAME_RE.pattern, what="a Docker runtime name", blank_is_default=True)
_NAMES = ListForm(item=PROFILE_NAME_RE.pattern, what="profile names")
_ENV_NAMES = ListForm(item=r"[A-Za-z_][A-Za-z0-9_]{0,127}", what="environment variable names")

Whole = Annotated[int, BeforeValidator(_whole), WholeForm()]
OptionalWhole = Annotated[int | None, BeforeValidator(_optional_whole), OptionalWholeForm()]
WholeMs = Annotated[int, BeforeValidator(_whole), WholeForm(unit=" of milliseconds")]
Cpus = Annotated[float, BeforeValidator(_cpus), CpusForm()]
UsdMicros = Annotated[int | None, BeforeValidator(_usd), UsdForm()]
Flag = Annotated[bool, BeforeValidator(_flag), FlagForm()]
# On unless exactly 0: the reference's strict switch (PI_EGRESS), where an empty value keeps it on.
Switch = Annotated[bool, BeforeValidator(_switch), FlagForm(blank_is_default=True)]
WorkerName = Annotated[str, BeforeValidator(_worker_name), WORKER_NAME_FORM]
# NoDecode: an env value is the profile grammar, not the JSON pydantic-settings reads a dict from by default
SecretProfiles = Annotated[dict[str, str], NoDecode, BeforeValidator(_profiles), ProfilesForm()]
WaitProfiles = Annotated[dict[str, str], NoDecode, BeforeValidator(_profiles), ProfilesForm()]
EgressProfiles = Annotated[dict[str, str], NoDecode, BeforeValidator(_profiles), ProfilesForm()]
ValkeyUrl = Annotated[str, matching(_URL), _URL]
Password = Annotated[SecretStr | None, matching(_PASSWORD), _PASSWORD]
Sentinels = Annotated[str, matching(_SENTINELS), _SENTINELS]
PrimaryName = Annotated[str, matching(_PRIMARY_NAME), _PRIMARY_NAME]
# The replicated store's three settings (`config/store_settings.py` declares them once; `infra/store.py` reads them).
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
JobRuntime = Annotated[str | None, matching(_RUNTIME), _RUNTIME]
JobContract = Annotated[str, matching(_CONTRACT), _CONTRACT]
ProviderId = Annotated[str, matching(_PROVIDER), _PROVIDER]
ModelId = Annotated[str, matching(_MODEL), _MODEL]
ProfileNames = Annotated[tuple[str, ...], NoDecode, _items(_NAMES), _NAMES]
EnvNames = Annotated[tuple[str, ...], NoDecode, _items(_ENV_NAMES), _ENV_NAMES]
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
