"""Each forge's variables as settings: the forms its entry (`core/forges.py`) names, and the settings class with
them added. The receiver reads them all; the worker those an entry marks `worker` (its jobs' tokens and clones)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, TypeVar

from pydantic import BaseModel, SecretStr, create_model

from pi_dispatch.config.declaration import setting
from pi_dispatch.config.forms import TextForm
from pi_dispatch.config.kinds import Password, matching
from pi_dispatch.config.store_settings import SECRET_FIX
from pi_dispatch.core.forges import FORGES, ForgeVariable

T = TypeVar("T", bound=BaseModel)

_URL = TextForm(  # blanks around it are trimmed, as the reference trims these
    pattern=r"[ \t]*https?://[^\x00-\x20\x7f]+[ \t]*",
    what="an http:// or https:// URL",
    blank_is_default=True,
    nullable=True,
)
_ID = TextForm(pattern=r"[1-9][0-9]{0,18}", what="a positive whole number", blank_is_default=True, nullable=True)
_HEADER = TextForm(
    pattern=r"[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]*", what="an HTTP header name", blank_is_default=True, nullable=True
)
_VARIABLE = TextForm(pattern=r"[A-Za-z_][A-Za-z0-9_]{0,127}", what="an environment variable name")
_KEY_PATH = TextForm(pattern=r"/[^\x00-\x1f\x7f]*", what="an absolute path", blank_is_default=True, nullable=True)
_PEM = TextForm(pattern=r"[^\x00]*", what="a PEM private key", blank_is_default=True, secret=True)
HttpUrl = Annotated[str | None, matching(_URL), _URL]
NumericId = Annotated[str | None, matching(_ID), _ID]
HeaderName = Annotated[str | None, matching(_HEADER), _HEADER]
VariableName = Annotated[str, matching(_VARIABLE), _VARIABLE]
KeyPath = Annotated[str | None, matching(_KEY_PATH), _KEY_PATH]
PrivateKey = Annotated[SecretStr | None, matching(_PEM), _PEM]


# A form a forge's entry names for one of its variables, and the fix a secret's refusal gives.
_FORGE_FORMS: Final[Mapping[str, tuple[object, str | None]]] = {
    "secret": (Password, SECRET_FIX),
    "url": (HttpUrl, None),
    "id": (NumericId, None),
    "variable": (VariableName, None),
    "header": (HeaderName, None),
    "absolutePath": (KeyPath, None),
    "pem": (PrivateKey, None),
}


def _forge_field(variable: ForgeVariable) -> tuple[object, object]:
    if isinstance(variable.form, str):
        annotation, fix = _FORGE_FORMS[variable.form]
    else:  # one of a few words
        words = variable.form
        what = f"{', '.join(words[:-1])} or {words[-1]}"
        form = TextForm(pattern="|".join(words), what=what, blank_is_default=True, nullable=True)
        annotation, fix = Annotated[str | None, matching(form), form], None
    declared = setting(variable.name, variable.default, variable.help, variable.fix or fix or "")
    return annotation, declared


def with_forge_variables(base: type[T], name: str, *, worker_only: bool) -> type[T]:
    """The settings class with each forge's variables (the worker's: those its entry marks `worker`)."""
    fields: dict[str, Any] = {
        variable.name.lower(): _forge_field(variable)
        for words in FORGES.values()
        for variable in words.variables
        if variable.worker or not worker_only
    }
    return create_model(name, __base__=base, **fields)


# A forge variable that holds a PEM: an env file writes its lines as `\\n` (the worker and receiver read them back)
MULTILINE_VARIABLES: Final = frozenset(
    variable.name for words in FORGES.values() for variable in words.variables if variable.form == "pem"
)
