"""What every forge's calls share, on the receiver and the worker alike: a setting's text, a base URL, a path
segment, an id read from an answer."""

from __future__ import annotations

import urllib.parse
from typing import Any

from pi_dispatch.config.handover import Revealable, secret_text
from pi_dispatch.core.jscompat import is_integer
from pi_dispatch.forgeapi.http import Answer, ForgeCallError, failure


def forge_setting(settings: object, variable: str) -> Any:
    """A forge variable's value (`GITLAB_TOKEN`) from loaded settings or their handed-over values (None: unset),
    declared in the forge's entry (`core/forges.py`) rather than on a settings class."""
    return getattr(settings, variable.lower())


def secret_of(secret: Revealable | None) -> str:
    """A setting's secret as text, empty when unset."""
    return secret_text(secret) or ""


def root_url(url: str | None) -> str:
    """A forge's base URL as its calls extend it: trimmed, without a trailing slash."""
    return (url or "").strip().rstrip("/")


def segment(text: str) -> str:
    """One URL path segment, percent-encoded (`alice[bot]` is `alice%5Bbot%5D`)."""
    return urllib.parse.quote(text, safe="")


def id_of(answer: Answer, what: str) -> int:
    if not answer.ok or not answer.readable:
        raise failure(answer, what)
    value = answer.body.get("id") if isinstance(answer.body, dict) else None
    if not is_integer(value):
        raise ForgeCallError(f"{what} answered without an id", transient=False, status=answer.status)
    return int(value)  # type: ignore[arg-type]
