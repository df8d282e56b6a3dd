"""Who the harness is on each forge (its own user id, so its own events never fire a job), and GitHub's tokens.

Resolved once at boot, retried inside a window when the forge does not answer: waits of 5, 10 and 20 s, then
30 s each, the last shortened so a final try lands at the window's end; each try cut off after 10 s. A
determinate refusal stops at once (a config error, exit 2); an exhausted window exits 1. GitHub tokens come
from a PAT, the gh CLI's login, or a GitHub App (a JWT signed with the App key mints installation tokens).
"""

from __future__ import annotations

import asyncio
import base64
import math
import subprocess
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pi_dispatch.core.jscompat import is_integer
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.endpoints import AzureArm, ForgejoArm, GitHubAuth, GitLabArm
from pi_dispatch.receiver.forges.http import Answer, ForgeCallError, ForgeClient, failure

RETRY_WAITS_MS: Final = (5_000, 10_000, 20_000)
RETRY_WAIT_MS: Final = 30_000
ATTEMPT_CUTOFF_S: Final = 10.0
GITHUB_API_VERSION: Final = "2022-11-28"
AZURE_API_VERSION: Final = "7.1-preview.1"
GH_TIMEOUT_S: Final = 10.0


def github_headers(token: str) -> dict[str, str]:
    return {
        "accept": "application/vnd.github+json",
        "x-github-api-version": GITHUB_API_VERSION,
        "authorization": f"Bearer {token}",
    }


def azure_headers(token: str) -> dict[str, str]:
    basic = base64.b64encode(f":{token}".encode()).decode()
    return {"authorization": f"Basic {basic}", "accept": "application/json"}


def segment(text: str) -> str:
    """One URL path segment, percent-encoded (`alice[bot]` is `alice%5Bbot%5D`)."""
    return urllib.parse.quote(text, safe="")


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


def _id_of(answer: Answer, what: str) -> int:
    if not answer.ok or not answer.readable:
        raise failure(answer, what)
    value = answer.body.get("id") if isinstance(answer.body, dict) else None
    if not is_integer(value):
        raise ForgeCallError(f"{what} answered without an id", transient=False, status=answer.status)
    return int(value)  # type: ignore[arg-type]


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
        return _id_of(bot, "GET /users/<app>[bot]")
    token = await tokens.operator_token()
    return _id_of(await tokens.client.get(f"{api}/user", github_headers(token)), "GET /user")


async def gitlab_identity(arm: GitLabArm, client: ForgeClient) -> int:
    return _id_of(await client.get(f"{arm.url}/api/v4/user", {"PRIVATE-TOKEN": arm.token}), "GitLab GET /user")


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
    return _id_of(answer, "Forgejo GET /user")


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


Sleep = Callable[[float], Awaitable[None]]


async def with_retry(
    forge: str,
    attempt: Callable[[], Awaitable[Any]],
    window_ms: float,
    log: EventLog,
    *,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    cutoff_s: float = ATTEMPT_CUTOFF_S,
) -> Any:
    """The attempt's answer, retried on transient failures until window_ms has passed since the first try."""
    if not isinstance(window_ms, int | float) or not math.isfinite(window_ms) or window_ms <= 0:
        raise ValueError("the identity retry window must be a positive, finite number of milliseconds")
    deadline = clock() * 1000 + window_ms
    tries = 0
    while True:
        tries += 1
        try:
            return await asyncio.wait_for(attempt(), cutoff_s)
        except TimeoutError:
            error = ForgeCallError(f"no answer within {cutoff_s:g} s", transient=True)
        except ForgeCallError as refused:
            if not refused.transient:
                raise
            error = refused
        except Exception as unexpected:  # a bug in a try is retried like an outage, then reported
            error = ForgeCallError(type(unexpected).__name__, transient=True)
        detail = {"status": error.status, "requestId": error.request_id} if forge == "github" else {}
        remaining = deadline - clock() * 1000
        if remaining <= 0:
            log(
                "identity_retry_exhausted",
                {"forge": forge, "attempts": tries, "windowMs": window_ms, "reason": error.reason, **detail},
            )
            raise error
        delay = min(RETRY_WAITS_MS[tries - 1] if tries <= len(RETRY_WAITS_MS) else RETRY_WAIT_MS, remaining)
        log("identity_retry", {"forge": forge, "attempt": tries, "reason": error.reason, "delayMs": delay, **detail})
        await sleep(delay / 1000)
