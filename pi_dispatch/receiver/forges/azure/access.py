"""Azure DevOps' access: its shared webhook secret (`Authorization: Basic <secret>` or a named header; no HMAC, no
replay window), how it is armed from the settings, the harness's own identity, and project membership through the
Graph API."""

from __future__ import annotations

import base64
import functools
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pi_dispatch.core.jscompat import js_trim
from pi_dispatch.forgeapi.common import forge_setting, root_url, secret_of, segment
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import Answer, ForgeClient, failure
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.forges.authority import Authority, Undecided
from pi_dispatch.receiver.forges.spec import Arming, Retried, Served

AZURE_API_VERSION: Final = "7.1-preview.1"
AZURE_PAGES: Final = 20


def secret_equals(presented: str, expected: str) -> bool:
    """Byte equality of two UTF-8 strings in constant time; different lengths are unequal, never an error."""
    left, right = presented.encode(), expected.encode()
    return len(left) == len(right) and hmac.compare_digest(left, right)


@dataclass(frozen=True)
class AzureVerifier:
    """Azure DevOps' shared secret: `Authorization: Basic <secret>` or a named header; no HMAC, no replay window."""

    mode: str
    secret: str
    header: str = ""

    def accepts(self, headers: Mapping[str, str]) -> bool:
        if self.mode == "basic":
            authorization = headers.get("Authorization", "")
            return authorization.startswith("Basic ") and secret_equals(js_trim(authorization[6:]), self.secret)
        if self.mode == "header" and self.header:
            return secret_equals(headers.get(self.header, ""), self.secret)
        return False


@dataclass(frozen=True)
class AzureArm:
    verifier: AzureVerifier
    token: str
    org_url: str


def arm(arming: Arming) -> AzureArm | None:
    """Armed when any of its variables is set, and then requiring all of them (the header's name in header mode)."""
    settings = arming.settings
    mode, secret, token = (
        forge_setting(settings, "AZURE_WEBHOOK_MODE"),
        secret_of(forge_setting(settings, "AZURE_WEBHOOK_SECRET")),
        secret_of(forge_setting(settings, "AZURE_TOKEN")),
    )
    org = root_url(forge_setting(settings, "AZURE_ORG_URL"))
    if not (mode or secret or token or org):
        return None
    header = (forge_setting(settings, "AZURE_WEBHOOK_HEADER") or "").strip()
    named: dict[str, object] = {"AZURE_WEBHOOK_MODE": mode}
    if mode == "header":
        named["AZURE_WEBHOOK_HEADER"] = header
    named |= {"AZURE_WEBHOOK_SECRET": secret.strip(), "AZURE_ORG_URL": org, "AZURE_TOKEN": token.strip()}
    if not arming.require(named, "Azure DevOps") or mode is None:
        return None
    return AzureArm(AzureVerifier(mode, secret, header), token, org)


def azure_headers(token: str) -> dict[str, str]:
    basic = base64.b64encode(f":{token}".encode()).decode()
    return {"authorization": f"Basic {basic}", "accept": "application/json"}


@dataclass(frozen=True)
class AzureSelf:
    id: str | None
    email: str | None

    def as_identity(self) -> dict[str, str]:
        return {key: value for key, value in (("id", self.id), ("email", self.email)) if value}


async def azure_identity(arm: AzureArm, client: ForgeClient) -> AzureSelf:
    url = f"{arm.org_url}/_apis/connectionData?api-version={AZURE_API_VERSION}"
    answer = await client.get(url, azure_headers(arm.token))
    if not answer.ok or not answer.readable or not isinstance(answer.body, dict):
        raise failure(answer, "Azure connectionData")
    user = answer.body.get("authenticatedUser")
    ident = user.get("id") if isinstance(user, dict) else None
    properties = user.get("properties") if isinstance(user, dict) else None
    account = properties.get("Account") if isinstance(properties, dict) else None
    email = account.get("$value") if isinstance(account, dict) else account
    found = AzureSelf(
        ident if isinstance(ident, str) and ident else None,
        email.lower() if isinstance(email, str) and "@" in email else None,
    )
    if found.id is None and found.email is None:
        raise ForgeCallError("Azure connectionData named no user id or account", transient=False)
    return found


class _AzureGraph:
    def __init__(self, arm: AzureArm, client: ForgeClient) -> None:
        self.client = client
        self.base = arm.org_url.replace("https://dev.azure.com", "https://vssps.dev.azure.com", 1)
        self.headers = azure_headers(arm.token)

    async def get(self, path: str) -> Answer:
        answer = await self.client.get(f"{self.base}{path}", self.headers)
        if not answer.ok:
            raise ForgeCallError(f"azure lookup returned {answer.status}", transient=True)
        if not answer.readable:
            raise ForgeCallError("azure lookup answer is unreadable", transient=True)
        return answer

    async def descriptor(self, subject: str) -> str | None:
        answer = await self.get(f"/_apis/graph/descriptors/{segment(subject)}?api-version={AZURE_API_VERSION}")
        value = answer.body.get("value") if isinstance(answer.body, dict) else None
        return value if isinstance(value, str) and value else None

    async def user_by_email(self, email: str) -> str | Undecided | None:
        query = f"/_apis/graph/users?subjectTypes=aad,msa&api-version={AZURE_API_VERSION}"
        continuation: str | None = None
        for _ in range(AZURE_PAGES):
            suffix = f"&continuationToken={segment(continuation)}" if continuation else ""
            answer = await self.get(query + suffix)
            users = answer.body.get("value") if isinstance(answer.body, dict) else None
            for user in users if isinstance(users, list) else []:
                names = [user.get(key) for key in ("principalName", "mailAddress")] if isinstance(user, dict) else []
                if any(isinstance(name, str) and name.lower() == email for name in names):
                    found = user.get("descriptor")
                    return found if isinstance(found, str) and found else None
            continuation = answer.headers.get("x-ms-continuationtoken")
            if not continuation:
                return None
        return Undecided(f"azure user list longer than {AZURE_PAGES} pages")


async def azure_membership(
    arm: AzureArm, client: ForgeClient, project_id: object, actor: Mapping[str, str]
) -> Authority:
    """Whether the actor (a GUID or an email) is a member of the project."""
    if not isinstance(project_id, str) or not project_id:
        return False
    graph = _AzureGraph(arm, client)
    try:
        if "id" in actor:
            subject = await graph.descriptor(actor["id"])
        elif "email" in actor:
            found = await graph.user_by_email(actor["email"].lower())
            if isinstance(found, Undecided):
                return found
            subject = found
        else:
            return False
        if subject is None:
            return False
        project = await graph.descriptor(project_id)
        if project is None:
            return Undecided("azure project has no descriptor")
        answer = await graph.get(
            f"/_apis/graph/memberships/{segment(subject)}?direction=up&api-version={AZURE_API_VERSION}"
        )
    except ForgeCallError as error:
        return Undecided(error.reason)
    memberships = answer.body.get("value") if isinstance(answer.body, dict) else None
    if not isinstance(memberships, list):
        return Undecided("azure memberships answer has no list")
    return any(isinstance(item, dict) and item.get("containerDescriptor") == project for item in memberships)


async def connect(arm: AzureArm, client: ForgeClient, retried: Retried, log: EventLog) -> Served:
    """Its own identity (retried within the window), and the lookup of each delivery's actor."""
    own = await retried("azure", lambda: azure_identity(arm, client))
    mode = arm.verifier.mode
    log("self_identity", {"forge": "azure", "id": own.id, "hasAccountName": own.email is not None, "mode": mode})
    return Served(arm.verifier, own.as_identity(), functools.partial(azure_membership, arm, client))
