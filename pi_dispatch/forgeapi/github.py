"""GitHub's tokens, for the receiver's lookups and the worker's jobs alike: where they come from (a PAT, the gh CLI's
login, or a GitHub App, whose JWT signed with the App key mints installation tokens, narrowed to one repository),
read from the settings the same way on both."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.errors import Problem
from pi_dispatch.core.prompt import PromptInput, github_prompt, target_number
from pi_dispatch.forgeapi.common import COMMIT_SHA, forge_setting, repository_parts, root_url, secret_of, segment
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.http import ForgeClient, failure

GITHUB_API_VERSION: Final = "2022-11-28"
GH_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class GitHubAuth:
    """Where GitHub tokens come from. `explicit`: GITHUB_AUTH_SOURCE was set (it then serves GitHub on its own)."""

    source: str
    explicit: bool
    api_url: str
    token: str = ""  # source pat: the value of the variable GITHUB_PAT_VAR names
    app_id: str = ""
    installation_id: str = ""
    private_key: str = ""
    secret: bytes = b""  # WEBHOOK_SECRET, which its deliveries are signed with (set once it is served)


def _private_key(settings: object, problems: list[Problem], source: str) -> str:
    inline = secret_of(forge_setting(settings, "GITHUB_APP_PRIVATE_KEY"))
    path = forge_setting(settings, "GITHUB_APP_PRIVATE_KEY_PATH")
    if inline and path:
        problems.append(
            Problem(
                "GITHUB_APP_PRIVATE_KEY",
                "and GITHUB_APP_PRIVATE_KEY_PATH are both set",
                source,
                "keep one: the key file (preferred) or the key itself",
            )
        )
        return ""
    if path:
        try:
            return Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "is not text"
            problems.append(
                Problem("GITHUB_APP_PRIVATE_KEY_PATH", f"cannot be read ({reason})", source, "point it at the PEM")
            )
            return ""
    if inline:
        return inline if "\n" in inline else inline.replace("\\n", "\n")
    problems.append(
        Problem("GITHUB_APP_PRIVATE_KEY_PATH", "is required with GITHUB_AUTH_SOURCE=app", source, "the App's PEM file")
    )
    return ""


def github_auth(settings: object, environment: Mapping[str, str], problems: list[Problem], source: str) -> GitHubAuth:
    read = functools.partial(forge_setting, settings)
    chosen = read("GITHUB_AUTH_SOURCE")
    auth = GitHubAuth(chosen or "gh", chosen is not None, root_url(read("GITHUB_API_URL")))
    if auth.source == "pat":
        pat_var = read("GITHUB_PAT_VAR")
        token = environment.get(pat_var, "").strip()
        if not token:
            problems.append(
                Problem(
                    pat_var,
                    "is empty, and GITHUB_AUTH_SOURCE=pat reads the token from it",
                    source,
                    f"put the token in {pat_var}, or name another variable in GITHUB_PAT_VAR",
                )
            )
        return GitHubAuth("pat", True, auth.api_url, token=token)
    if auth.source == "app":
        ids = {variable: read(variable) for variable in ("GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID")}
        for variable, value in ids.items():
            if value is None:
                problems.append(Problem(variable, "is required with GITHUB_AUTH_SOURCE=app", source, "the App's id"))
        key = _private_key(settings, problems, source)
        return GitHubAuth(
            "app",
            True,
            auth.api_url,
            app_id=ids["GITHUB_APP_ID"] or "",
            installation_id=ids["GITHUB_APP_INSTALLATION_ID"] or "",
            private_key=key,
        )
    return auth


def github_headers(token: str) -> dict[str, str]:
    return {
        "accept": "application/vnd.github+json",
        "x-github-api-version": GITHUB_API_VERSION,
        "authorization": f"Bearer {token}",
    }


class GitHubTokens:
    """The token each GitHub call uses: the operator's (pat, gh), or an App installation's, narrowed per repo."""

    def __init__(self, auth: GitHubAuth, client: ForgeClient, clock: Callable[[], float] = time.time) -> None:
        self.auth, self.client, self.clock = auth, client, clock
        self._operator = auth.token

    async def operator_token(self) -> str:
        """The pat, or the gh CLI's token, read once (the token comes on gh's stdout, never a command line)."""
        if self._operator:
            return self._operator
        try:
            done = await asyncio.to_thread(
                subprocess.run, ["gh", "auth", "token"], capture_output=True, timeout=GH_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ForgeCallError(
                "GITHUB_AUTH_SOURCE is gh (the default), but the gh CLI cannot be run: install it and `gh auth "
                "login`, or set GITHUB_AUTH_SOURCE=pat with GITHUB_PAT, or app",
                transient=isinstance(error, subprocess.TimeoutExpired),
            ) from None
        token = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0 or not token:
            raise ForgeCallError(
                "the gh CLI has no login: run `gh auth login`, or set GITHUB_AUTH_SOURCE=pat or app", transient=False
            )
        self._operator = token
        return token

    def app_jwt(self) -> str:
        """A ten-minute App JWT (RS256), backdated a minute for clock drift."""
        import jwt

        now = int(self.clock())
        claims = {"iat": now - 60, "exp": now + 540, "iss": self.auth.app_id}
        try:
            return str(jwt.encode(claims, self.auth.private_key, algorithm="RS256"))
        except (ValueError, TypeError) as error:
            raise ForgeCallError("the GitHub App private key cannot sign", transient=False) from error

    async def installation_token(self, permissions: Mapping[str, str] | None, repository: str | None = None) -> str:
        """An installation token for one repository (or all the installation's), with the installation's whole
        grant unless narrowed: a job's is not narrowed, as the reference mints it."""
        url = f"{self.auth.api_url}/app/installations/{segment(self.auth.installation_id)}/access_tokens"
        body: dict[str, Any] = {} if permissions is None else {"permissions": dict(permissions)}
        if repository is not None:
            body["repositories"] = [repository]
        answer = await self.client.request("POST", url, github_headers(self.app_jwt()), body)
        token = answer.body.get("token") if isinstance(answer.body, dict) else None
        if not answer.ok or not isinstance(token, str) or not token:
            raise failure(answer, "installation token")
        return token

    async def for_repository(self, owner: str, name: str) -> str:
        """A token that can read one repository's collaborators: narrowed to it under an App."""
        if self.auth.source == "app":
            return await self.installation_token({"metadata": "read"}, name)
        return await self.operator_token()


def web_root(api_url: str) -> str:
    """Where a repository's git lives for an API base: github.com for api.github.com, the host itself for GitHub
    Enterprise Server's `https://<host>/api/v3` (and for a stand-in on that shape)."""
    parts = urllib.parse.urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return "https://github.com"
    path = parts.path.removesuffix("/").removesuffix("/api/v3")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class GitHubJobs:
    """A GitHub job's forge: its token (an App installation's scoped to the job's one repository, else the
    operator's), its default branch and commit, the branch's protection, its clone URL, a comment."""

    kind: Final = "github"

    def __init__(self, auth: GitHubAuth, client: ForgeClient) -> None:
        self.tokens = GitHubTokens(auth, client)
        self.auth, self.client = auth, client

    async def mint(self, job: Mapping[str, Any]) -> str:
        if self.auth.source != "app":
            return await self.tokens.operator_token()
        if not isinstance(job.get("repo"), str) or not job["repo"]:
            raise ForgeCallError("an App token names one repository, and run.github jobs have none", transient=False)
        _, name = repository_parts(job)
        return await self.tokens.installation_token(None, name)

    def _repo_url(self, job: Mapping[str, Any]) -> str:
        owner, name = repository_parts(job)
        return f"{self.auth.api_url}/repos/{segment(owner)}/{segment(name)}"

    async def _json(self, url: str, token: str, what: str) -> Mapping[str, Any]:
        answer = await self.client.get(url, github_headers(token))
        if not answer.ok or not isinstance(answer.body, dict):
            raise failure(answer, what)
        return answer.body

    async def default_branch(self, job: Mapping[str, Any], token: str) -> str:
        branch = (await self._json(self._repo_url(job), token, "GET /repos/<repo>")).get("default_branch")
        if not isinstance(branch, str) or not branch:
            raise ForgeCallError("GET /repos/<repo> gave no default branch", transient=False)
        return branch

    async def branch_sha(self, job: Mapping[str, Any], token: str, branch: str) -> str:
        url = f"{self._repo_url(job)}/branches/{segment(branch)}"
        commit = (await self._json(url, token, "GET /repos/<repo>/branches/<branch>")).get("commit")
        sha = commit.get("sha") if isinstance(commit, Mapping) else None
        if not isinstance(sha, str) or not COMMIT_SHA.fullmatch(sha):
            raise ForgeCallError("GET /repos/<repo>/branches/<branch> gave no commit", transient=False)
        return sha

    async def protected(self, job: Mapping[str, Any], token: str, branch: str) -> bool:
        """2xx: protected; 404: not; any other answer is retried, never read as unprotected."""
        url = f"{self._repo_url(job)}/branches/{segment(branch)}/protection"
        answer = await self.client.get(url, github_headers(token))
        if answer.ok:
            return True
        if answer.status == 404:
            return False
        raise ForgeCallError(f"GET <branch>/protection returned {answer.status}", transient=True, status=answer.status)

    def clone_url(self, job: Mapping[str, Any]) -> str:
        owner, name = repository_parts(job)
        return f"{web_root(self.auth.api_url)}/{owner}/{name}.git"

    async def comment(self, job: Mapping[str, Any], token: str, text: str) -> None:
        number = job.get("target", {}).get("number") if isinstance(job.get("target"), Mapping) else None
        url = f"{self._repo_url(job)}/issues/{target_number(number)}/comments"
        answer = await self.client.request("POST", url, github_headers(token), {"body": text})
        if not answer.ok:
            raise failure(answer, "POST <issue>/comments")

    def instance_url(self) -> str | None:
        return None  # GitHub's CLI finds its host from the clone

    def prompt(self, given: PromptInput) -> str:
        return github_prompt(given)

    async def close(self) -> None:
        await self.client.close()
