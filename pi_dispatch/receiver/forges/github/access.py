"""GitHub's access: whether it is served (a GitHub rule, or GITHUB_AUTH_SOURCE set explicitly) and its webhook
secret, the harness's own user id, and a sender's permission on a repository. Its tokens, which the worker's jobs
use too, are `forgeapi/github.py`'s."""

from __future__ import annotations

import functools
from dataclasses import replace

from pi_dispatch.core.errors import Problem
from pi_dispatch.forgeapi.common import forge_setting, id_of, secret_of, segment
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.github import GitHubAuth, GitHubTokens, github_auth, github_headers
from pi_dispatch.forgeapi.http import ForgeClient, failure
from pi_dispatch.infra.events import EventLog
from pi_dispatch.receiver.forges.authority import Authority, Undecided, permission_of, plain_name, repository_of
from pi_dispatch.receiver.forges.spec import Arming, Retried, Served


def arm(arming: Arming) -> GitHubAuth | None:
    """Its auth block checked whether or not it is served; served with a GitHub rule or GITHUB_AUTH_SOURCE set,
    and then WEBHOOK_SECRET is required."""
    settings = arming.settings
    auth = github_auth(settings, arming.environment, arming.problems, arming.source)
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
