"""What each forge's job calls decide without the network: protection rules, policies, clone URLs."""

from __future__ import annotations

import pytest

from pi_dispatch.forgeapi.azure import AzureJobs, policy_guards
from pi_dispatch.forgeapi.common import repository_parts
from pi_dispatch.forgeapi.errors import ForgeCallError
from pi_dispatch.forgeapi.github import web_root
from pi_dispatch.forgeapi.gitlab import GitLabJobs, rule_matches
from pi_dispatch.forgeapi.http import ForgeClient


def test_github_clones_follow_the_api() -> None:
    assert web_root("https://api.github.com") == "https://github.com"
    assert web_root("https://ghe.example.com/api/v3") == "https://ghe.example.com"
    assert web_root("https://127.0.0.1:8443/api/v3") == "https://127.0.0.1:8443"


@pytest.mark.parametrize("repo", ["acme", "../x", "acme/..", "a b/c", None, "acme/app?x=1", "/acme"])
def test_a_repository_that_is_not_owner_name_is_refused(repo: object) -> None:
    with pytest.raises(ForgeCallError) as refused:
        repository_parts({"repo": repo})
    assert not refused.value.transient


def test_gitlab_protection_rules() -> None:
    assert rule_matches("main", "main") and not rule_matches("main", "main2")
    assert rule_matches("release/*", "release/1.2") and rule_matches("*", "a/b/c") and not rule_matches("", "main")
    assert not rule_matches("re.ease", "release")
    jobs = GitLabJobs("https://gitlab.example/", "t", ForgeClient())
    assert jobs.clone_url({"repo": "group/sub/app"}) == "https://gitlab.example/group/sub/app.git"
    with pytest.raises(ForgeCallError):
        jobs.clone_url({"repo": "group/../x"})


def test_azure_policies_that_protect() -> None:
    scope = {"repositoryId": "r1", "refName": "refs/heads/main", "matchKind": "Exact"}
    guarding = {"isEnabled": True, "isBlocking": True, "settings": {"scope": [scope]}}
    assert policy_guards(guarding, "r1", "refs/heads/main")
    assert not policy_guards({**guarding, "isBlocking": False}, "r1", "refs/heads/main")
    assert not policy_guards(guarding, "r2", "refs/heads/main")
    every = {
        **guarding,
        "settings": {"scope": [{**scope, "repositoryId": None, "refName": "refs/heads/", "matchKind": "Prefix"}]},
    }
    assert policy_guards(every, "r9", "refs/heads/main")
    jobs = AzureJobs("https://dev.azure.com/org", "t", ForgeClient())
    assert jobs.clone_url({"azure": {"project": "My Project", "repository": "app"}}) == (
        "https://dev.azure.com/org/My%20Project/_git/app"
    )
