"""GitHub's tokens, for the receiver's lookups and the worker's jobs alike: where they come from (a PAT, the gh CLI's
login, or a GitHub App, whose JWT signed with the App key mints installation tokens, narrowed to one repository),
read from the settings the same way on both."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pi_dispatch.core.errors import Problem
from pi_dispatch.forgeapi.common import forge_setting, root_url, secret_of, segment
from pi_dispatch.forgeapi.http import ForgeCallError, ForgeClient, failure

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
