"""An Azure DevOps job's forge (`JobForge`): the operator's PAT (Basic, empty user), the repository's default
branch and its commit, protection by the branch policies that are enabled and blocking and scoped to it, a comment
(a thread on a pull request, a comment on a work item), and a clone of `<org>/<project>/_git/<repository>`."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.core.forgeprompts import azure_prompt
from pi_dispatch.core.jscompat import mapping_at
from pi_dispatch.core.prompt import PromptInput, target_number
from pi_dispatch.forgeapi.common import COMMIT_SHA, root_url, segment
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import ForgeClient, failure

API_VERSION: Final = "7.1"
HEADS: Final = "refs/heads/"


def basic(token: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f":{token}".encode()).decode()}


def policy_guards(policy: object, repository_id: str, ref: str) -> bool:
    """An enabled, blocking policy with a scope on this repository (or every one) and this branch."""
    if not isinstance(policy, Mapping) or policy.get("isEnabled") is not True or policy.get("isBlocking") is not True:
        return False
    scopes = mapping_at(policy, "settings").get("scope")
    for scope in scopes if isinstance(scopes, list) else []:
        if not isinstance(scope, Mapping) or scope.get("repositoryId") not in (None, repository_id):
            continue
        named, kind = scope.get("refName"), scope.get("matchKind", "Exact")
        if isinstance(named, str) and (ref == named if kind == "Exact" else ref.startswith(named)):
            return True
    return False


class AzureJobs:
    """Azure DevOps' REST API with the operator's PAT."""

    kind: Final = "azure"

    def __init__(self, org_url: str, token: str, client: ForgeClient) -> None:
        self.org, self.token, self.client = root_url(org_url), token, client
        self._ids: dict[tuple[str, str], str] = {}

    async def mint(self, job: Mapping[str, Any]) -> str:
        return self.token

    def _names(self, job: Mapping[str, Any]) -> tuple[str, str]:
        azure = mapping_at(job, "azure")
        project, repository = azure.get("project"), azure.get("repository")
        if not isinstance(project, str) or not project or not isinstance(repository, str) or not repository:
            raise ForgeCallError("an Azure DevOps job names no azure.project and azure.repository", transient=False)
        return project, repository

    async def _get(self, url: str, token: str, what: str) -> Any:
        answer = await self.client.get(url, basic(token))
        if not answer.ok or not isinstance(answer.body, Mapping):
            raise failure(answer, what)
        return answer.body

    def _git(self, project: str) -> str:
        return f"{self.org}/{segment(project)}/_apis/git"

    async def default_branch(self, job: Mapping[str, Any], token: str) -> str:
        project, repository = self._names(job)
        url = f"{self._git(project)}/repositories/{segment(repository)}?api-version={API_VERSION}"
        body = await self._get(url, token, "GET <repository>")
        branch, found = body.get("defaultBranch"), body.get("id")
        if not isinstance(branch, str) or not branch or not isinstance(found, str):
            raise ForgeCallError("the repository has no default branch", transient=False)
        self._ids[(project, repository)] = found
        return branch.removeprefix(HEADS)

    def _id(self, job: Mapping[str, Any]) -> tuple[str, str]:
        project, repository = self._names(job)
        return project, self._ids.get((project, repository)) or repository

    async def branch_sha(self, job: Mapping[str, Any], token: str, branch: str) -> str:
        project, repository_id = self._id(job)
        query = urllib.parse.urlencode({"name": branch, "api-version": API_VERSION})
        body = await self._get(
            f"{self._git(project)}/repositories/{segment(repository_id)}/stats/branches?{query}",
            token,
            "GET <branch> stats",
        )
        sha = mapping_at(body, "commit").get("commitId")
        if not isinstance(sha, str) or not COMMIT_SHA.fullmatch(sha):
            raise ForgeCallError("the branch's answer named no commit", transient=False)
        return sha

    async def protected(self, job: Mapping[str, Any], token: str, branch: str) -> bool:
        project, repository_id = self._id(job)
        ref = HEADS + branch
        query = urllib.parse.urlencode({"repositoryId": repository_id, "refName": ref, "api-version": API_VERSION})
        body = await self._get(
            f"{self._git(project)}/policy/configurations?{query}", token, "GET policy configurations"
        )
        policies = body.get("value")
        return isinstance(policies, list) and any(policy_guards(p, repository_id, ref) for p in policies)

    def clone_url(self, job: Mapping[str, Any]) -> str:
        project, repository = self._names(job)
        return f"{self.org}/{segment(project)}/_git/{segment(repository)}"

    async def comment(self, job: Mapping[str, Any], token: str, text: str) -> None:
        project, repository_id = self._id(job)
        target = mapping_at(job, "target")
        number = target_number(target.get("number"))
        if target.get("type") == "pull_request":
            url = f"{self._git(project)}/repositories/{segment(repository_id)}/pullRequests/{number}/threads"
            payload: Mapping[str, Any] = {
                "comments": [{"parentCommentId": 0, "content": text, "commentType": 1}],
                "status": 1,
            }
            url += f"?api-version={API_VERSION}"
        else:
            url = f"{self.org}/{segment(project)}/_apis/wit/workItems/{number}/comments?api-version=7.1-preview.4"
            payload = {"text": text}
        answer = await self.client.request("POST", url, basic(token), payload)
        if not answer.ok:
            raise failure(answer, "POST <item> comment")

    def instance_url(self) -> str | None:
        return self.org

    def prompt(self, given: PromptInput) -> str:
        return azure_prompt(given)

    async def close(self) -> None:
        await self.client.close()
