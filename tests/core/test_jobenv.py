"""A job's closed environment in the reference's order (upstream-jobrun.md §6.3, §9.9)."""

from __future__ import annotations

from pi_dispatch.core.jobenv import AgentRun, JobEnvironment, container_name, reserved_secret_name, token_kind

RUN = AgentRun("anthropic", "claude-x", 30, "gh-7", 1, "github", "mini1")


def test_a_github_jobs_environment() -> None:
    env = JobEnvironment(RUN, {"ANTHROPIC_API_KEY": "sk"}, token="ghs_scoped", token_kind="github").build()
    reference = {
        "ANTHROPIC_API_KEY",
        "GH_TOKEN",
        "GITHUB_TOKEN",
        "PI_JOB_ID",
        "PI_MAX_TURNS",
        "PI_MODEL",
        "PI_OFFLINE",
        "PI_PROVIDER",
        "PLAYWRIGHT_BROWSERS_PATH",
        "PLAYWRIGHT_MCP_BROWSER",
        "PLAYWRIGHT_MCP_SANDBOX",
    }
    assert set(env) - {"PI_JOB_ATTEMPT", "PI_JOB_KIND", "PI_HOST"} == reference
    assert env["PI_JOB_ID"] == "pi-job-gh-7" and env["GITHUB_TOKEN"] == env["GH_TOKEN"] == "ghs_scoped"
    assert list(env)[:3] == ["PI_PROVIDER", "PI_MODEL", "PI_MAX_TURNS"] and list(env)[-1] == "GH_TOKEN"


def test_nothing_a_job_brings_overrides_what_the_worker_writes() -> None:
    secrets = {"GH_TOKEN": "operator-token", "PI_MAX_COST_MICROS": "9", "HOME": "/x", "DEPLOY": "d"}
    keys, spend = {"ANTHROPIC_API_KEY": "sk"}, {"PI_MAX_COST_MICROS": "0"}
    given = JobEnvironment(RUN, keys, secrets=secrets, home="/home/pi", spend=spend, token="ghs_minted")
    env = JobEnvironment(**{**given.__dict__, "token_kind": "github"}).build()
    assert env["GH_TOKEN"] == "ghs_minted" and env["PI_MAX_COST_MICROS"] == "0" and env["HOME"] == "/home/pi"
    assert env["DEPLOY"] == "d"
    no_cap = JobEnvironment(RUN, {}, secrets={"PI_MAX_COST_MICROS": "9"}).build()
    assert "PI_MAX_COST_MICROS" not in no_cap and "GITHUB_TOKEN" not in no_cap and "GH_TOKEN" not in no_cap


def test_each_forges_names() -> None:
    env = JobEnvironment(RUN, {}, token="t", token_kind="gitlab", instance_url="https://gl.example").build()
    assert (env["GITLAB_TOKEN"], env["GL_TOKEN"], env["GITLAB_HOST"]) == ("t", "t", "https://gl.example")
    assert "GITHUB_TOKEN" not in env
    azure = JobEnvironment(RUN, {}, token="t", token_kind="azure", instance_url="https://dev.azure.com/o").build()
    assert {"AZURE_DEVOPS_EXT_PAT", "SYSTEM_ACCESSTOKEN", "AZURE_DEVOPS_ORG_URL"} <= set(azure)


def test_names_and_kinds() -> None:
    assert container_name("repeat:nightly:1700000000000") == "pi-job-repeat_nightly_1700000000000"
    assert token_kind("local", True) == "github" and token_kind("local", "1") is None
    assert token_kind("forgejo", None) == "forgejo" and token_kind("svn", None) is None


def test_the_names_a_secret_may_not_bind() -> None:
    steering = (
        "AZURE_OPENAI_BASE_URL AZURE_OPENAI_RESOURCE_NAME ANTHROPIC_BASE_URL ANTHROPIC_AUTH_TOKEN "
        "ANTHROPIC_CUSTOM_HEADERS "
        "OPENAI_BASE_URL OPENAI_CUSTOM_HEADERS GOOGLE_GEMINI_BASE_URL GOOGLE_VERTEX_BASE_URL AWS_ENDPOINT_URL "
        "AWS_CONTAINER_CREDENTIALS_FULL_URI AWS_SECRET_ACCESS_KEY AWS_BEDROCK_SKIP_AUTH GOOGLE_APPLICATION_CREDENTIALS "
        "AWS_WEB_IDENTITY_TOKEN_FILE google_application_credentials gcloud_project google_cloud_project "
        "GOOGLE_CLOUD_QUOTA_PROJECT PI_CODING_AGENT_DIR AWS_ACCESS_KEY_ID AWS_SESSION_TOKEN AWS_BEARER_TOKEN_BEDROCK"
    )
    for name in [*steering.split(), "GH_TOKEN", "GITLAB_HOST", "GITHUB_APP_PRIVATE_KEY", "VALKEY_PASSWORD", "HOME"]:
        assert reserved_secret_name(name), name
    for name in ("STRIPE_KEY", "MY_APP_TOKEN", "DATABASE_URL", "NPM_TOKEN", "SENTRY_DSN", "openai_base_url"):
        assert not reserved_secret_name(name), name
    assert not reserved_secret_name("anthropic_api_key") and reserved_secret_name("PI_CODING_AGENT")
