"""The trail of what operators did to the fleet: every cancel, retry, drain and resume, who asked for it (a Unix user
from the command line, a console login from the web console), through what, when, and how it ended. This port's
key, `actions:trail`, a stream capped at its newest TRAIL_MAX entries; `pi-dispatch actions` lists it.

A job id or a host name in it is as the operator gave it (hostile text to a reader, which shows it escaped); nothing
else of the job is written, and never a secret."""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.keys import TRAIL_KEY
from pi_dispatch.infra.valkey import OP_TIMEOUT_S, bounded, reply_text

if TYPE_CHECKING:
    import redis.asyncio as aioredis

TRAIL_MAX: Final = 10_000  # entries kept (XADD MAXLEN ~: trimmed in whole nodes, at least this many)
FIELD_MAX: Final = 512  # a target or a name longer than this is cut: the trail is no place for a payload
ACTIONS: Final = ("cancel", "retry", "drain", "resume")


@dataclass(frozen=True)
class Action:
    at_ms: int
    who: str  # the Unix user (`cli`) or the console login (`console`)
    via: str  # cli or console
    what: str  # one of ACTIONS
    target: str  # the job id or the host name
    outcome: str  # what came of it, in the command's own words (queued, missing, cancelled, draining...)

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def unix_user() -> str:
    """Who runs this command, as the trail names a command-line action's author."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no name (a container's): its number says who
        import os

        return f"uid {os.getuid()}"


async def record_action(client: aioredis.Redis, action: Action) -> None:
    """Append one action to the trail (raises the store's error: the action's own write went to the same store)."""
    fields: dict[Any, Any] = {name: str(value)[:FIELD_MAX] for name, value in asdict(action).items()}
    await bounded(client.xadd(TRAIL_KEY, fields, maxlen=TRAIL_MAX, approximate=True), OP_TIMEOUT_S)


def _action(fields: Mapping[bytes | str, bytes | str]) -> Action | None:
    said = {reply_text(key): reply_text(value) for key, value in fields.items()}
    at = said.get("at_ms", "")
    if not at.isdigit():
        return None
    return Action(
        int(at),
        said.get("who", ""),
        said.get("via", ""),
        said.get("what", ""),
        said.get("target", ""),
        said.get("outcome", ""),
    )


async def read_trail(client: aioredis.Redis, count: int) -> list[Action]:
    """The newest `count` actions, newest first (an entry that is not one is passed over). One round trip."""
    raw = await bounded(client.xrevrange(TRAIL_KEY, "+", "-", count=count), OP_TIMEOUT_S)
    return [action for _, fields in raw if (action := _action(fields)) is not None]
