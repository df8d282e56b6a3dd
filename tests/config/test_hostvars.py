"""A host's forge and provider credentials, from its inventory to its env file and back as the worker reads them."""

from __future__ import annotations

from pi_dispatch.config.envfile import parse_env_text, render_env
from pi_dispatch.config.hostvars import check_host_vars, env_changes, env_values
from tests.support.workers import settings_of

KEY = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"


def test_credentials_reach_the_env_file_and_the_worker_reads_them() -> None:
    host = {
        "pi_dispatch_worker_name": "mini1",
        "pi_dispatch_worker_github_auth_source": "app",
        "pi_dispatch_worker_github_app_id": "12",
        "pi_dispatch_worker_github_app_installation_id": "34",
        "pi_dispatch_worker_github_app_private_key": KEY,
        "pi_dispatch_worker_github_pat_var": "MY_PAT",
        "pi_dispatch_worker_github_pat": "ghp_operator",
        "pi_dispatch_worker_provider_keys": {"ANTHROPIC_API_KEY": "sk-ant"},
    }
    values = env_values(host)
    assert values["GITHUB_APP_PRIVATE_KEY_PATH"] == "/etc/pi-dispatch/github-app.pem"  # a 0600 file the role writes
    assert "GITHUB_APP_PRIVATE_KEY" not in values  # never inline
    assert values["MY_PAT"] == "ghp_operator" and values["ANTHROPIC_API_KEY"] == "sk-ant"
    read = parse_env_text(render_env(values), "env").values
    settings = settings_of({**read, "VALKEY_URL": "redis://127.0.0.1:1"})
    assert settings.github_auth_source == "app" and settings.github_app_id == "12"
    held = {name: secret.get_secret_value() for name, secret in settings.credentials.items()}
    assert held == {"MY_PAT": "ghp_operator", "ANTHROPIC_API_KEY": "sk-ant"}
    changes = env_changes("", render_env(values))
    assert not [line for line in changes if "sk-ant" in line or "ghp_operator" in line]


def test_a_provider_key_under_a_name_pi_does_not_read_is_refused() -> None:
    problems = check_host_vars({"pi_dispatch_worker_provider_keys": {"STRIPE_KEY": "x"}}, "mini1")
    assert [problem.subject for problem in problems] == ["pi_dispatch_worker_provider_keys"]
    assert not check_host_vars({"pi_dispatch_worker_provider_keys": {"OPENAI_API_KEY": "x"}}, "mini1")
