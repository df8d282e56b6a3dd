"""A Forgejo job's forge (`JobForge`): the operator's repository-scoped token, `owner/name`'s default branch and
its commit, protection by the branch-protection rules (`rule_name`, or the older `branch_name`), a comment on the
issue or pull request, and a clone of `<FORGEJO_URL>/<owner>/<name>.git`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.core.forgeprompts import forgejo_prompt
from pi_dispatch.core.jscompat import mapping_at
from pi_dispatch.core.prompt import PromptInput, target_number
from pi_dispatch.forgeapi.common import REPO_SEGMENT, root_url, segment
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.gitlab import first_commit, rule_matches
from pi_dispatch.forgeapi.http import ForgeClient, failure


class ForgejoJobs:
    """Forgejo's API v1 with the operator's token (`Authorization: token`)."""

    kind: Final = "forgejo"

    def __init__(self, url: str, token: str, client: ForgeClient) -> None:
        self.url, self.token, self.client = root_url(url), token, client

    async def mint(self, job: Mapping[str, Any]) -> str:
        return self.token

    def _repo(self, job: Mapping[str, Any]) -> tuple[str, str]:
        parts = str(job.get("repo") or "").split("/")
        if len(parts) != 2 or not all(REPO_SEGMENT.fullmatch(part) for part in parts):
            raise ForgeCallError("a Forgejo job's repository is not owner/name", transient=False)
        return parts[0], parts[1]

    def _api(self, job: Mapping[str, Any]) -> str:
        owner, name = self._repo(job)
        return f"{self.url}/api/v1/repos/{segment(owner)}/{segment(name)}"

    async def _get(self, url: str, token: str, what: str) -> Any:
        answer = await self.client.get(url, {"authorization": f"token {token}"})
        if not answer.ok or answer.body is None:
            raise failure(answer, what)
        return answer.body

    async def default_branch(self, job: Mapping[str, Any], token: str) -> str:
        body = await self._get(self._api(job), token, "GET /repos/<repo>")
        branch = body.get("default_branch") if isinstance(body, Mapping) else None
        if not isinstance(branch, str) or not branch:
            raise ForgeCallError("the repository has no default branch", transient=False)
        return branch

    async def branch_sha(self, job: Mapping[str, Any], token: str, branch: str) -> str:
        body = await self._get(f"{self._api(job)}/branches/{segment(branch)}", token, "GET <repo>/branches/<b>")
        return first_commit(body, "id", "sha")

    async def protected(self, job: Mapping[str, Any], token: str, branch: str) -> bool:
        rules = await self._get(f"{self._api(job)}/branch_protections", token, "GET <repo>/branch_protections")
        return isinstance(rules, list) and any(
            isinstance(rule, Mapping) and rule_matches(rule.get("rule_name") or rule.get("branch_name"), branch)
            for rule in rules
        )

    def clone_url(self, job: Mapping[str, Any]) -> str:
        owner, name = self._repo(job)
        return f"{self.url}/{owner}/{name}.git"

    async def comment(self, job: Mapping[str, Any], token: str, text: str) -> None:
        number = target_number(mapping_at(job, "target").get("number"))
        url = f"{self._api(job)}/issues/{number}/comments"
        answer = await self.client.request("POST", url, {"authorization": f"token {token}"}, {"body": text})
        if not answer.ok:
            raise failure(answer, "POST <issue>/comments")

    def instance_url(self) -> str | None:
        return self.url

    def prompt(self, given: PromptInput) -> str:
        return forgejo_prompt(given)

    async def close(self) -> None:
        await self.client.close()
