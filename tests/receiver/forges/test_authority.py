"""Actor authority, asked of a local stand-in for each forge's API over real HTTP (receiver-contract §12, §15.6)."""

from __future__ import annotations

import base64
from typing import Any

from pi_dispatch.forgeapi.github import GitHubAuth, GitHubTokens
from pi_dispatch.forgeapi.http import ForgeClient
from pi_dispatch.receiver.forges.authority import Undecided
from pi_dispatch.receiver.forges.azure.access import AzureArm, AzureVerifier, azure_membership
from pi_dispatch.receiver.forges.forgejo.access import ForgejoArm, forgejo_permission
from pi_dispatch.receiver.forges.github.access import github_permission
from pi_dispatch.receiver.forges.gitlab.access import GitLabArm, GitLabVerifier, gitlab_access
from tests.support.fakeforge import FakeForge, Reply

CLOSED_PORT = "http://127.0.0.1:1"


def gitlab(url: str) -> GitLabArm:
    return GitLabArm(GitLabVerifier.build("token", "t"), "api-token", url)


async def test_gitlab_access_levels(forge: FakeForge, forge_client: ForgeClient) -> None:
    path = "/api/v4/projects/42/members/all/7"
    for level, allowed in (
        (30, True),
        (40, True),
        (50, True),
        (0, False),
        (5, False),
        (10, False),
        (20, False),
        (29, False),
    ):
        forge.answer("GET", path, Reply(200, {"access_level": level}))
        assert await gitlab_access(gitlab(forge.url), forge_client, 42, 7) is allowed
    assert forge.asked(path)[0].headers["private-token"] == "api-token"
    forge.answer("GET", path, Reply(404, {"message": "404 Not found"}))
    assert await gitlab_access(gitlab(forge.url), forge_client, 42, 7) is False
    for status in (401, 403, 429, 500, 502):
        forge.answer("GET", path, Reply(status, {}))
        assert await gitlab_access(gitlab(forge.url), forge_client, 42, 7) == Undecided(
            f"members lookup returned {status}"
        )
    forge.answer("GET", path, Reply(200, {"access_level": "40"}))
    assert isinstance(await gitlab_access(gitlab(forge.url), forge_client, 42, 7), Undecided)
    forge.answer("GET", path, Reply(200, raw=b"<html>"))
    assert isinstance(await gitlab_access(gitlab(forge.url), forge_client, 42, 7), Undecided)
    verdict = await gitlab_access(gitlab(CLOSED_PORT), forge_client, 42, 7)
    assert verdict == Undecided("request failed: ECONNREFUSED")
    before = len(forge.requests)
    for project, user in ((None, 7), (42, None), ("42", 7), (42, True)):
        assert await gitlab_access(gitlab(forge.url), forge_client, project, user) is False
    assert len(forge.requests) == before


async def test_forgejo_permission(forge: FakeForge, forge_client: ForgeClient) -> None:
    arm = ForgejoArm(b"s", "tok", forge.url, None)
    path = "/api/v1/repos/acme/widgets/collaborators/alice/permission"
    for permission, allowed in (("admin", True), ("write", True), ("read", False), ("none", False)):
        forge.answer("GET", path, Reply(200, {"permission": permission}))
        assert await forgejo_permission(arm, forge_client, "acme/widgets", "alice") is allowed
    assert forge.asked(path)[0].headers["authorization"] == "token tok"
    for body in ({"permission": ""}, {"permission": 3}, {}):
        forge.answer("GET", path, Reply(200, body))
        assert isinstance(await forgejo_permission(arm, forge_client, "acme/widgets", "alice"), Undecided)
    forge.answer("GET", path, Reply(404, {}))
    assert await forgejo_permission(arm, forge_client, "acme/widgets", "alice") is False
    for status in (302, 403, 500):
        forge.answer("GET", path, Reply(status, {}, headers={"Location": "http://example.invalid/"}))
        assert await forgejo_permission(arm, forge_client, "acme/widgets", "alice") == Undecided(
            f"collaborator permission lookup returned {status}"
        )
    before = len(forge.requests)
    for repository, login in (
        ("acme", "alice"),
        ("a/b/c", "alice"),
        ("acme/widgets", "../admin"),
        ("acme/widgets", "a/b"),
        ("acme/widgets", ""),
        ("acme/widgets", None),
        (None, "alice"),
    ):
        assert await forgejo_permission(arm, forge_client, repository, login) is False
    assert len(forge.requests) == before


async def test_github_permission(forge: FakeForge, forge_client: ForgeClient) -> None:
    tokens = GitHubTokens(GitHubAuth("pat", True, forge.url, token="tok"), forge_client)
    path = "/repos/octo/repo/collaborators/alice%5Bbot%5D/permission"
    forge.answer("GET", path, Reply(200, {"permission": "admin"}))
    assert await github_permission(tokens, "octo/repo", "alice[bot]") is True
    assert forge.asked(path)[0].headers["accept"] == "application/vnd.github+json"
    for permission in ("read", "none"):
        forge.answer("GET", path, Reply(200, {"permission": permission}))
        assert await github_permission(tokens, "octo/repo", "alice[bot]") is False
    forge.answer("GET", path, Reply(404, {}))
    assert await github_permission(tokens, "octo/repo", "alice[bot]") is False
    forge.answer("GET", path, Reply(500, {}))
    assert await github_permission(tokens, "octo/repo", "alice[bot]") == Undecided("status-500")
    before = len(forge.requests)
    for repository, login in (
        ("octo", "a"),
        ("octo/../x", "a"),
        ("./x", "a"),
        ("octo/re po", "a"),
        ("octo/repo", "a?b"),
        ("octo/repo", ""),
    ):
        assert await github_permission(tokens, repository, login) is False
    assert len(forge.requests) == before


async def test_github_app_tokens_are_narrowed_to_the_repository(forge: FakeForge, forge_client: ForgeClient) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    tokens = GitHubTokens(
        GitHubAuth("app", True, forge.url, app_id="123", installation_id="9", private_key=pem.decode()), forge_client
    )
    forge.answer("POST", "/app/installations/9/access_tokens", Reply(201, {"token": "ghs_narrow"}))
    forge.answer("GET", "/repos/octo/repo/collaborators/alice/permission", Reply(200, {"permission": "write"}))
    assert await github_permission(tokens, "octo/repo", "alice") is True
    minted = forge.asked("/app/installations/9/access_tokens")[0]
    assert minted.body == {"permissions": {"metadata": "read"}, "repositories": ["repo"]}
    import jwt

    claims = jwt.decode(minted.headers["authorization"].removeprefix("Bearer "), key.public_key(), algorithms=["RS256"])
    assert claims["iss"] == "123" and claims["exp"] - claims["iat"] == 600
    assert forge.asked("/repos/")[0].headers["authorization"] == "Bearer ghs_narrow"
    forge.answer("POST", "/app/installations/9/access_tokens", Reply(401, {}))
    assert await github_permission(tokens, "octo/repo", "alice") == Undecided("token-mint-failed")


def azure(url: str) -> AzureArm:
    return AzureArm(AzureVerifier("basic", "x"), "pat", url)


async def test_azure_membership(forge: FakeForge, forge_client: ForgeClient) -> None:
    version = "api-version=7.1-preview.1"
    forge.answer("GET", f"/_apis/graph/descriptors/proj-guid?{version}", Reply(200, {"value": "scp.proj"}))
    forge.answer("GET", f"/_apis/graph/descriptors/dev-guid?{version}", Reply(200, {"value": "aad.dev"}))
    members = f"/_apis/graph/memberships/aad.dev?direction=up&{version}"
    forge.answer("GET", members, Reply(200, {"value": [{"containerDescriptor": "scp.proj"}]}))
    assert await azure_membership(azure(forge.url), forge_client, "proj-guid", {"id": "dev-guid"}) is True
    header = forge.asked(members)[0].headers
    assert (
        header["authorization"] == "Basic " + base64.b64encode(b":pat").decode()
        and header["accept"] == "application/json"
    )
    forge.answer("GET", members, Reply(200, {"value": [{"containerDescriptor": "scp.other"}]}))
    assert await azure_membership(azure(forge.url), forge_client, "proj-guid", {"id": "dev-guid"}) is False
    forge.answer("GET", members, Reply(200, {"value": "nope"}))
    assert isinstance(
        await azure_membership(azure(forge.url), forge_client, "proj-guid", {"id": "dev-guid"}), Undecided
    )
    forge.answer("GET", f"/_apis/graph/descriptors/dev-guid?{version}", Reply(200, {"value": ""}))
    assert await azure_membership(azure(forge.url), forge_client, "proj-guid", {"id": "dev-guid"}) is False

    users = f"/_apis/graph/users?subjectTypes=aad,msa&{version}"

    def page(number: int, last: int, hit: bool = False) -> Reply:
        found: list[dict[str, Any]] = [{"principalName": f"user{number}@example.com", "descriptor": f"aad.{number}"}]
        if hit:
            found.append({"mailAddress": "Dev@Example.com", "descriptor": "aad.dev"})
        more = {"X-MS-ContinuationToken": f"t{number + 1}"} if number < last else {}
        return Reply(200, {"value": found}, headers=more)

    forge.answer("GET", users, page(0, 2))
    forge.answer("GET", users + "&continuationToken=t1", page(1, 2))
    forge.answer("GET", users + "&continuationToken=t2", page(2, 2, hit=True))
    forge.answer("GET", members, Reply(200, {"value": [{"containerDescriptor": "scp.proj"}]}))
    assert await azure_membership(azure(forge.url), forge_client, "proj-guid", {"email": "dev@example.com"}) is True
    forge.answer("GET", users + "&continuationToken=t2", page(2, 2))
    assert await azure_membership(azure(forge.url), forge_client, "proj-guid", {"email": "dev@example.com"}) is False
    for number in range(25):
        forge.answer("GET", users + (f"&continuationToken=t{number}" if number else ""), page(number, 30))
    endless = await azure_membership(azure(forge.url), forge_client, "proj-guid", {"email": "dev@example.com"})
    assert isinstance(endless, Undecided) and "20 pages" in endless.reason
    before = len(forge.requests)
    assert await azure_membership(azure(forge.url), forge_client, "", {"id": "dev-guid"}) is False
    assert await azure_membership(azure(forge.url), forge_client, None, {"id": "dev-guid"}) is False
    assert len(forge.requests) == before


def test_the_graph_host_is_vssps() -> None:
    from pi_dispatch.receiver.forges.azure.access import _AzureGraph

    graph = _AzureGraph(azure("https://dev.azure.com/fabrikam"), ForgeClient())
    assert graph.base == "https://vssps.dev.azure.com/fabrikam"
