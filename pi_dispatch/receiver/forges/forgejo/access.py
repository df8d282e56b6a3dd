"""Forgejo's access: how it is armed from the settings (its webhook is signed as GitHub's is), the harness's own
user id (or FORGEJO_BOT_ID), and a user's permission on a repository."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pi_dispatch.forgeapi.common import forge_setting, id_of, root_url, secret_of, segment
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.forges.authority import Authority, Undecided, permission_of, plain_name
from pi_dispatch.receiver.forges.spec import Arming, Retried, Served


@dataclass(frozen=True)
class ForgejoArm:
    secret: bytes
    token: str
    url: str
    bot_id: int | None


def arm(arming: Arming) -> ForgejoArm | None:
    """Armed when any of its variables is set, and then requiring all of them."""
    read = functools.partial(forge_setting, arming.settings)
    secret, token = secret_of(read("FORGEJO_WEBHOOK_SECRET")), secret_of(read("FORGEJO_TOKEN"))
    url = root_url(read("FORGEJO_URL"))
    if not (secret or token or url):
        return None
    named = {"FORGEJO_URL": url, "FORGEJO_WEBHOOK_SECRET": secret.strip(), "FORGEJO_TOKEN": token.strip()}
    if not arming.require(named, "Forgejo"):
        return None
    bot = int(read("FORGEJO_BOT_ID")) if read("FORGEJO_BOT_ID") else None
    return ForgejoArm(secret.encode(), token, url, bot)


async def forgejo_identity(arm: ForgejoArm, client: ForgeClient) -> int:
    if arm.bot_id is not None:
        return arm.bot_id
    answer = await client.get(f"{arm.url}/api/v1/user", {"Authorization": f"token {arm.token}"})
    if answer.status in (401, 403):
        raise ForgeCallError(
            f"Forgejo GET /user returned {answer.status}: the token may lack read:user; set FORGEJO_BOT_ID to the "
            "harness's user id instead",
            transient=False,
            status=answer.status,
        )
    return id_of(answer, "Forgejo GET /user")


async def forgejo_permission(arm: ForgejoArm, client: ForgeClient, repository: object, login: object) -> Authority:
    """Whether login has write or admin on the repository."""
    if not isinstance(repository, str) or repository.count("/") != 1 or not plain_name(login):
        return False
    owner, name = repository.split("/")
    if not owner or not name:
        return False
    url = f"{arm.url}/api/v1/repos/{segment(owner)}/{segment(name)}/collaborators/{segment(str(login))}/permission"
    try:
        answer = await client.get(url, {"Authorization": f"token {arm.token}"})
    except ForgeCallError as error:
        return Undecided(error.reason)
    return permission_of(answer, "collaborator permission", "collaborator permission lookup returned {status}")


async def connect(arm: ForgejoArm, client: ForgeClient, retried: Retried, log: EventLog) -> Served:
    """Its own user id (retried within the window), and the lookup of each delivery's actor."""
    identity = await retried("forgejo", lambda: forgejo_identity(arm, client))
    log(
        "self_identity",
        {"forge": "forgejo", "id": identity, "source": "FORGEJO_BOT_ID" if arm.bot_id is not None else "api"},
    )
    return Served(arm.secret, identity, functools.partial(forgejo_permission, arm, client))
