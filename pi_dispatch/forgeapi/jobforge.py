"""What the worker asks of a job's forge, one interface for every forge: the job's token, its default branch and
commit, the branch's protection, where to clone it from, a comment, its prompt. Each forge is one module behind it
(`forgeapi/<forge>.py`); `job_forges` builds those this host has credentials for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pi_dispatch.core.errors import Problem
from pi_dispatch.core.prompt import PromptInput
from pi_dispatch.forgeapi.azure import AzureJobs
from pi_dispatch.forgeapi.common import forge_setting, secret_of
from pi_dispatch.forgeapi.forgejo import ForgejoJobs
from pi_dispatch.forgeapi.github import GitHubJobs, github_auth
from pi_dispatch.forgeapi.gitlab import GitLabJobs
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.infra.events import EventLog


class JobForge(Protocol):
    """A forge as a job's preparation and its comments use it. Calls raise `ForgeCallError`: transient (retried)
    or determinate (the deployment's, `config-refused`)."""

    @property
    def kind(self) -> str: ...

    async def mint(self, job: Mapping[str, Any]) -> str: ...

    async def default_branch(self, job: Mapping[str, Any], token: str) -> str: ...

    async def branch_sha(self, job: Mapping[str, Any], token: str, branch: str) -> str: ...

    async def protected(self, job: Mapping[str, Any], token: str, branch: str) -> bool: ...

    def clone_url(self, job: Mapping[str, Any]) -> str: ...

    async def comment(self, job: Mapping[str, Any], token: str, text: str) -> None: ...

    def instance_url(self) -> str | None: ...

    def prompt(self, given: PromptInput) -> str: ...

    async def close(self) -> None: ...


def job_forges(settings: object, client: ForgeClient, log: EventLog) -> dict[str, JobForge]:
    """The forges this host can serve jobs for: GitHub's from its auth source (the gh CLI's login by default),
    each other forge once its token is set. One whose settings do not hold is logged `<kind>_auth_unavailable`
    and left out: its jobs are refused `config-refused`, as a Node host refuses them."""
    held = getattr(settings, "credentials", {})
    environment = {name: secret.get_secret_value() for name, secret in held.items()}
    problems: list[Problem] = []
    auth = github_auth(settings, environment, problems, "environment")
    forges: dict[str, JobForge] = {}
    if problems:
        log("github_auth_unavailable", {"kind": "github", "reason": "; ".join(p.subject for p in problems)})
    else:
        forges["github"] = GitHubJobs(auth, client)
    others = (
        ("gitlab", "GITLAB_URL", "GITLAB_TOKEN", GitLabJobs),
        ("forgejo", "FORGEJO_URL", "FORGEJO_TOKEN", ForgejoJobs),
        ("azure", "AZURE_ORG_URL", "AZURE_TOKEN", AzureJobs),
    )
    for kind, url_variable, token_variable, made in others:
        url, token = forge_setting(settings, url_variable), secret_of(forge_setting(settings, token_variable))
        if token.strip() and url:
            forges[kind] = made(url, token.strip(), client)
        elif token.strip():
            log(f"{kind}_auth_unavailable", {"kind": kind, "reason": f"{url_variable} is not set"})
    return forges
