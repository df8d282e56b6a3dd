"""May this actor start a job? Asked of the forge for every delivery that needs it, never cached.

The answer is `True`/`False` (determinate) or `Undecided(reason)`, which the receiver answers with 503 so the
forge redelivers. GitHub: the closer's repository permission (write or admin), asked only for a close an armed
rule wants. GitLab: project access level 30 (Developer) or more, group membership included. Forgejo: write or
admin on the repository. Azure DevOps: membership of the project, through the Graph API. Malformed names are
refused without a request; reasons never hold a login, an email, a token or a response body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, cast

from pi_dispatch.core.jscompat import is_integer
from pi_dispatch.receiver.endpoints import AzureArm, ForgejoArm, GitLabArm
from pi_dispatch.receiver.forges.http import Answer, ForgeCallError, ForgeClient
from pi_dispatch.receiver.forges.identity import AZURE_API_VERSION, GitHubTokens, azure_headers, github_headers, segment

DEVELOPER: Final = 30
WRITERS: Final = ("admin", "write")
AZURE_PAGES: Final = 20
_UNSAFE: Final = re.compile(r"[/?#\s]")


@dataclass(frozen=True)
class Undecided:
    """The forge could not say; the delivery is answered 503 and redelivered."""

    reason: str


Authority = bool | Undecided


def _name(value: object) -> bool:
    return isinstance(value, str) and value != "" and value not in (".", "..") and _UNSAFE.search(value) is None


def _repository(full_name: object) -> tuple[str, str] | None:
    if not isinstance(full_name, str) or full_name.count("/") != 1:
        return None
    owner, name = full_name.split("/")
    return (owner, name) if _name(owner) and _name(name) else None


def _permission(answer: Answer, what: str, statuses: str) -> Authority:
    if answer.status == 404:
        return False
    if not answer.ok:
        return Undecided(statuses.format(status=answer.status))
    permission = answer.body.get("permission") if isinstance(answer.body, dict) else None
    if not answer.readable or not isinstance(permission, str) or not permission:
        return Undecided(f"{what} answer has no permission")
    return permission in WRITERS


async def github_closer(tokens: GitHubTokens, repository: object, login: object) -> Authority:
    """Whether login may close items in repository: write or admin."""
    parts = _repository(repository)
    if parts is None or not _name(login):
        return False
    owner, name = parts
    try:
        token = await tokens.for_repository(owner, name)
    except ForgeCallError:
        return Undecided("token-mint-failed")
    url = f"{tokens.auth.api_url}/repos/{segment(owner)}/{segment(name)}/collaborators/{segment(str(login))}/permission"
    try:
        answer = await tokens.client.get(url, github_headers(token))
    except ForgeCallError as error:
        return Undecided(error.reason)
    return _permission(answer, "github permission", "status-{status}")


async def gitlab_access(arm: GitLabArm, client: ForgeClient, project_id: object, user_id: object) -> Authority:
    """Whether the user is a Developer or more on the project, membership through groups included."""
    if not is_integer(project_id) or not is_integer(user_id):
        return False
    project, user = int(cast(float, project_id)), int(cast(float, user_id))  # integral numbers, checked above
    url = f"{arm.url}/api/v4/projects/{project}/members/all/{user}"
    try:
        answer = await client.get(url, {"PRIVATE-TOKEN": arm.token})
    except ForgeCallError as error:
        return Undecided(error.reason)
    if answer.status == 404:
        return False
    if not answer.ok:
        return Undecided(f"members lookup returned {answer.status}")
    level = answer.body.get("access_level") if isinstance(answer.body, dict) else None
    if not answer.readable or not is_integer(level):
        return Undecided("members lookup answer has no access level")
    return bool(level >= DEVELOPER)  # type: ignore[operator]


async def forgejo_permission(arm: ForgejoArm, client: ForgeClient, repository: object, login: object) -> Authority:
    """Whether login has write or admin on the repository."""
    if not isinstance(repository, str) or repository.count("/") != 1 or not _name(login):
        return False
    owner, name = repository.split("/")
    if not owner or not name:
        return False
    url = f"{arm.url}/api/v1/repos/{segment(owner)}/{segment(name)}/collaborators/{segment(str(login))}/permission"
    try:
        answer = await client.get(url, {"Authorization": f"token {arm.token}"})
    except ForgeCallError as error:
        return Undecided(error.reason)
    return _permission(answer, "collaborator permission", "collaborator permission lookup returned {status}")


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
