"""GitHub's access: where its tokens come from (a PAT, the gh CLI's login, or a GitHub App, whose JWT signed with
the App key mints installation tokens), whether it is served (a GitHub rule, or GITHUB_AUTH_SOURCE set explicitly)
and its webhook secret, the harness's own user id, and a sender's permission on a repository."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pi_dispatch.core.errors import Problem
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.forges.authority import Authority, Undecided, permission_of, plain_name, repository_of
from pi_dispatch.receiver.forges.http import ForgeCallError, ForgeClient, failure
from pi_dispatch.receiver.forges.identity import id_of, root_url, secret_of, segment
from pi_dispatch.receiver.forges.spec import Arming, Retried, Served, forge_setting

if TYPE_CHECKING:
    from pi_dispatch.config.receiver_settings import ReceiverSettings

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


def _private_key(settings: ReceiverSettings, problems: list[Problem], source: str) -> str:
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


def _github(
    settings: ReceiverSettings, environment: Mapping[str, str], problems: list[Problem], source: str
) -> GitHubAuth:
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


def arm(arming: Arming) -> GitHubAuth | None:
    """Its auth block checked whether or not it is served; served with a GitHub rule or GITHUB_AUTH_SOURCE set,
    and then WEBHOOK_SECRET is required."""
    settings = arming.settings
    auth = _github(settings, arming.environment, arming.problems, arming.source)
    if not (arming.rules.of("github").any_rule or auth.explicit):
        return None
    secret = secret_of(forge_setting(settings, "WEBHOOK_SECRET"))
    if not secret.strip():
        arming.problems.append(
            Problem(
                "WEBHOOK_SECRET",
                "WEBHOOK_SECRET is required when GitHub is served: without it the receiver cannot verify signatures",
                arming.source,
                "set it to the secret of the GitHub webhook",
            )
        )
    return replace(auth, secret=secret.encode())


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

    async def installation_token(self, permissions: Mapping[str, str], repository: str | None = None) -> str:
        url = f"{self.auth.api_url}/app/installations/{segment(self.auth.installation_id)}/access_tokens"
        body: dict[str, Any] = {"permissions": dict(permissions)}
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


async def github_identity(tokens: GitHubTokens) -> int:
    """The harness's GitHub user id: the token's user, or the App's bot user."""
    api = tokens.auth.api_url
    if tokens.auth.source == "app":
        answer = await tokens.client.get(f"{api}/app", github_headers(tokens.app_jwt()))
        slug = answer.body.get("slug") if answer.ok and isinstance(answer.body, dict) else None
        if not isinstance(slug, str) or not slug:
            raise (
                failure(answer, "GET /app")
                if not answer.ok
                else ForgeCallError("GET /app gave no slug", transient=False)
            )
        bot = await tokens.client.get(f"{api}/users/{segment(slug + '[bot]')}", github_headers(tokens.app_jwt()))
        return id_of(bot, "GET /users/<app>[bot]")
    token = await tokens.operator_token()
    return id_of(await tokens.client.get(f"{api}/user", github_headers(token)), "GET /user")


async def github_permission(tokens: GitHubTokens, repository: object, login: object) -> Authority:
    """Whether login may start a job on repository (label, comment, review, push or close): write or admin."""
    parts = repository_of(repository)
    if parts is None or not plain_name(login):
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
    return permission_of(answer, "github permission", "status-{status}")


async def connect(arm: GitHubAuth, client: ForgeClient, retried: Retried, log: EventLog) -> Served:
    """Its own user id (retried within the window), and the senders' permission lookups."""
    tokens = GitHubTokens(arm, client)
    identity = await retried("github", lambda: github_identity(tokens))
    log("self_identity", {"id": identity, "source": arm.source})
    return Served(arm.secret, identity, functools.partial(github_permission, tokens))
