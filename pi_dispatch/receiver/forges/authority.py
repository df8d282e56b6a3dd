"""May this actor start a job? Asked of the forge for every delivery that needs it (the receiver keeps an answer a
minute).

The answer is `True`/`False` (determinate) or `Undecided(reason)`, which the receiver answers with 503 so the
forge redelivers. Each forge's own lookup is in its package (`forges/<forge>/access.py`); here is what they share:
the answer's type, names checked before any request (malformed ones are refused without one), and a permission
read from an answer. Reasons never hold a login, an email, a token or a response body.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from pi_dispatch.forgeapi.http import Answer

WRITERS: Final = ("admin", "write")
_UNSAFE: Final = re.compile(r"[/?#\s]")


@dataclass(frozen=True)
class Undecided:
    """The forge could not say; the delivery is answered 503 and redelivered."""

    reason: str


Authority = bool | Undecided


def plain_name(value: object) -> bool:
    return isinstance(value, str) and value != "" and value not in (".", "..") and _UNSAFE.search(value) is None


def repository_of(full_name: object) -> tuple[str, str] | None:
    if not isinstance(full_name, str) or full_name.count("/") != 1:
        return None
    owner, name = full_name.split("/")
    return (owner, name) if plain_name(owner) and plain_name(name) else None


def permission_of(answer: Answer, what: str, statuses: str) -> Authority:
    if answer.status == 404:
        return False
    if not answer.ok:
        return Undecided(statuses.format(status=answer.status))
    permission = answer.body.get("permission") if isinstance(answer.body, dict) else None
    if not answer.readable or not isinstance(permission, str) or not permission:
        return Undecided(f"{what} answer has no permission")
    return permission in WRITERS


def stood_in(*writers: str) -> Callable[[object, object], Awaitable[Authority]]:
    """A stand-in for a forge's permission answer where there is no forge to ask (the demo, a benchmark's receiver):
    these logins have write on every repository, nobody else has."""
    allowed = frozenset(writers)

    async def permission(_repository: object, login: object) -> Authority:
        return isinstance(login, str) and login in allowed

    return permission
