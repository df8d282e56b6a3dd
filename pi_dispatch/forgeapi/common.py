"""What every forge's calls share, on the receiver and the worker alike: a setting's text, a base URL, a path
segment, an id read from an answer."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.config.handover import Revealable, secret_text
from pi_dispatch.core.jscompat import is_integer
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import Answer, failure


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


COMMIT_SHA: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# One segment of a repository's path as a forge names it: never `.` or `..`, never a separator or a blank.
REPO_SEGMENT: Final = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9_.-]{1,100}")


def repository_parts(job: Mapping[str, Any]) -> tuple[str, str]:
    """A job's `owner/name` (its first two segments), each a plain name; a ForgeCallError (determinate) else."""
    repo = job.get("repo")
    parts = repo.split("/") if isinstance(repo, str) else []
    if len(parts) < 2 or not all(REPO_SEGMENT.fullmatch(part) for part in parts[:2]):
        raise ForgeCallError("the job's repository is not owner/name", transient=False)
    return parts[0], parts[1]
