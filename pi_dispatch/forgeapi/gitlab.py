"""A GitLab job's forge (`JobForge`): the operator's token (a project access token reaches one project), the
project's default branch and its commit by the job's numeric project id, protection by the protected-branch rules
(a name, or a `*` pattern), a note on the issue or merge request, and a clone of `<GITLAB_URL>/<path>.git`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.core.forgeprompts import gitlab_prompt
from pi_dispatch.core.jscompat import mapping_at
from pi_dispatch.core.prompt import PromptInput, target_number
from pi_dispatch.forgeapi.common import COMMIT_SHA, root_url, segment
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import ForgeClient, failure

PROJECT_PATH: Final = re.compile(r"(?!.*\.\.)[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+")


def rule_matches(rule: object, branch: str) -> bool:
    """A protection rule's name against a branch: exactly, or with `*` matching anything (`/` included)."""
    if not isinstance(rule, str) or not rule:
        return False
    pattern = ".*".join(re.escape(part) for part in rule.split("*"))
    return re.fullmatch(pattern, branch) is not None


def first_commit(body: object, *fields: str) -> str:
    commit = body.get("commit") if isinstance(body, Mapping) else None
    for name in fields:
        sha = commit.get(name) if isinstance(commit, Mapping) else None
        if isinstance(sha, str) and COMMIT_SHA.fullmatch(sha):
            return sha
    raise ForgeCallError("the branch's answer named no commit", transient=False)


class GitLabJobs:
    """GitLab's API v4 with the operator's token (`PRIVATE-TOKEN`)."""

    kind: Final = "gitlab"

    def __init__(self, url: str, token: str, client: ForgeClient) -> None:
        self.url, self.token, self.client = root_url(url), token, client

    async def mint(self, job: Mapping[str, Any]) -> str:
        return self.token

    def _project(self, job: Mapping[str, Any]) -> str:
        project = job.get("projectId")
        if isinstance(project, bool) or not isinstance(project, int | str) or not str(project).isdigit():
            raise ForgeCallError("a GitLab job names no numeric projectId", transient=False)
        return f"{self.url}/api/v4/projects/{project}"

    async def _get(self, url: str, token: str, what: str) -> Any:
        answer = await self.client.get(url, {"private-token": token})
        if not answer.ok or answer.body is None:
            raise failure(answer, what)
        return answer.body

    async def default_branch(self, job: Mapping[str, Any], token: str) -> str:
        branch = mapping_at({"p": await self._get(self._project(job), token, "GET /projects/<id>")}, "p").get(
            "default_branch"
        )
        if not isinstance(branch, str) or not branch:
            raise ForgeCallError("the project has no default branch", transient=False)
        return branch

    async def branch_sha(self, job: Mapping[str, Any], token: str, branch: str) -> str:
        url = f"{self._project(job)}/repository/branches/{segment(branch)}"
        return first_commit(await self._get(url, token, "GET <project>/repository/branches/<b>"), "id")

    async def protected(self, job: Mapping[str, Any], token: str, branch: str) -> bool:
        rules = await self._get(f"{self._project(job)}/protected_branches", token, "GET <project>/protected_branches")
        return isinstance(rules, list) and any(
            isinstance(r, Mapping) and rule_matches(r.get("name"), branch) for r in rules
        )

    def clone_url(self, job: Mapping[str, Any]) -> str:
        path = str(job.get("repo") or "").strip("/")
        if not PROJECT_PATH.fullmatch(path):
            raise ForgeCallError("a GitLab job's repository is not a project path", transient=False)
        return f"{self.url}/{path}.git"

    async def comment(self, job: Mapping[str, Any], token: str, text: str) -> None:
        target = mapping_at(job, "target")
        items = "merge_requests" if target.get("type") == "pull_request" else "issues"
        url = f"{self._project(job)}/{items}/{target_number(target.get('number'))}/notes"
        answer = await self.client.request("POST", url, {"private-token": token}, {"body": text})
        if not answer.ok:
            raise failure(answer, "POST <item>/notes")

    def instance_url(self) -> str | None:
        return self.url

    def prompt(self, given: PromptInput) -> str:
        return gitlab_prompt(given)

    async def close(self) -> None:
        await self.client.close()
