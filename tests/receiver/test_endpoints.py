"""The receiver's configuration: which forges it serves, what each then needs, refusals that name the variable and
the fix (receiver-contract §11, §15.8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.core.errors import ConfigError
from pi_dispatch.receiver.endpoints import load_receiver_config

GITHUB_LABEL = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}
GITLAB_LABEL = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "gitlab", "flow": "fix"}}


def triggers(folder: Path, *entries: Any) -> Path:
    path = folder / "triggers.json"
    path.write_text(json.dumps({"triggers": list(entries)}))
    return path


def load(folder: Path, **env: str) -> Any:
    return load_receiver_config(environment=lambda: env, cwd=folder)


def refused(folder: Path, **env: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load(folder, **env)
    return str(raised.value)


def test_defaults(tmp_path: Path) -> None:
    triggers(tmp_path, GITHUB_LABEL)
    config = load(tmp_path, WEBHOOK_SECRET="s")
    settings = config.settings
    assert (settings.bind, settings.port, settings.valkey_url) == ("127.0.0.1", 3000, "redis://127.0.0.1:6379")
    assert config.triggers_path == tmp_path / "triggers.json" and settings.triggers_file == "./triggers.json"
    assert config.github is not None and (config.github.source, config.github.explicit) == ("gh", False)
    assert config.gitlab is config.forgejo is config.azure is None
    assert config.rules.of("github").comment is None
    overridden = load(
        tmp_path, WEBHOOK_SECRET="s", RECEIVER_PORT="8080", RECEIVER_BIND="127.0.0.1", VALKEY_URL="redis://v:1/2"
    )
    assert (overridden.settings.port, overridden.settings.bind, overridden.settings.valkey_url) == (
        8080,
        "127.0.0.1",
        "redis://v:1/2",
    )
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"triggers": [GITLAB_LABEL]}))
    assert load(tmp_path, PI_TRIGGERS_FILE=str(elsewhere)).triggers_path == elsewhere


def test_refusals_name_the_variable(tmp_path: Path) -> None:
    triggers(tmp_path, GITHUB_LABEL)
    said = refused(tmp_path)
    assert "WEBHOOK_SECRET is required" in said and "cannot verify signatures" in said
    assert "WEBHOOK_SECRET is required" in refused(tmp_path, WEBHOOK_SECRET="   ")
    assert "RECEIVER_PORT" in refused(tmp_path, WEBHOOK_SECRET="s", RECEIVER_PORT="nope")
    assert "RECEIVER_PORT" in refused(tmp_path, WEBHOOK_SECRET="s", RECEIVER_PORT="")
    gitthub = refused(tmp_path, WEBHOOK_SECRET="s", GITHUB_AUTH_SOURCE="gitthub")
    assert "GITHUB_AUTH_SOURCE" in gitthub and "gitthub" in gitthub and "WEBHOOK_SECRET is required" not in gitthub
    secret = refused(tmp_path, WEBHOOK_SECRET="hunter2\nline")
    assert "WEBHOOK_SECRET" in secret and "hunter2" not in secret


def test_the_triggers_file_must_load(tmp_path: Path) -> None:
    said = refused(tmp_path, WEBHOOK_SECRET="s")
    assert "./triggers.json" in said and "pi-dispatch init" in said and "PI_TRIGGERS_FILE" in said
    (tmp_path / "triggers.json").write_text("{ nope")
    assert "not valid JSON" in refused(tmp_path, WEBHOOK_SECRET="s")
    triggers(tmp_path, {"on": {"type": "label", "none": ["x"]}, "run": {"kind": "github", "flow": "f"}})
    assert "trigger 0 on.any" in refused(tmp_path, WEBHOOK_SECRET="s")


def test_what_serves_github(tmp_path: Path) -> None:
    triggers(tmp_path, GITLAB_LABEL)
    gitlab = {"GITLAB_WEBHOOK_MODE": "token", "GITLAB_WEBHOOK_SECRET": "t", "GITLAB_TOKEN": "g"}
    assert load(tmp_path, **gitlab).github is None  # no GitHub rule: no secret needed
    assert load(tmp_path, **gitlab, GITHUB_AUTH_SOURCE="").github is None
    for source in ("gh", "pat", "app"):
        assert "WEBHOOK_SECRET is required" in refused(tmp_path, **gitlab, GITHUB_AUTH_SOURCE=source)
    assert (
        load(tmp_path, **gitlab, GITHUB_AUTH_SOURCE="pat", GITHUB_PAT="ghp", WEBHOOK_SECRET="s").github.token == "ghp"
    )
    assert "MY_TOKEN" in refused(
        tmp_path, **gitlab, GITHUB_AUTH_SOURCE="pat", GITHUB_PAT_VAR="MY_TOKEN", WEBHOOK_SECRET="s"
    )
    routes = (
        {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "f"}},
        {"on": {"type": "pull_request", "action": ["opened"]}, "run": {"kind": "github", "flow": "f"}},
        {"on": {"type": "issue", "action": ["closed"]}, "run": {"kind": "github", "flow": "f"}},
        {"on": {"type": "pull_request", "action": ["closed"]}, "run": {"kind": "github", "flow": "f"}},
        GITHUB_LABEL,
    )
    for entry in routes:
        triggers(tmp_path, entry)
        assert "WEBHOOK_SECRET is required" in refused(tmp_path)


def test_github_app_source(tmp_path: Path) -> None:
    triggers(tmp_path, GITHUB_LABEL)
    key = tmp_path / "app.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    base = {"WEBHOOK_SECRET": "s", "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2"}
    assert load(tmp_path, **base, GITHUB_APP_PRIVATE_KEY_PATH=str(key)).github.private_key.startswith("-----BEGIN")
    inline = load(
        tmp_path, **base, GITHUB_APP_PRIVATE_KEY="-----BEGIN PRIVATE KEY-----\\nx\\n-----END PRIVATE KEY-----"
    )
    assert inline.github.private_key.count("\n") == 2
    both = refused(tmp_path, **base, GITHUB_APP_PRIVATE_KEY_PATH=str(key), GITHUB_APP_PRIVATE_KEY="k")
    assert "both set" in both
    assert "GITHUB_APP_ID" in refused(tmp_path, **{**base, "GITHUB_APP_ID": ""}, GITHUB_APP_PRIVATE_KEY_PATH=str(key))
    assert "cannot be read" in refused(tmp_path, **base, GITHUB_APP_PRIVATE_KEY_PATH=str(tmp_path / "none.pem"))


def test_the_other_forges_arm_on_any_of_their_variables(tmp_path: Path) -> None:
    triggers(tmp_path, GITLAB_LABEL)
    for mode in ("", "hmac", "signature-v1"):
        assert "GITLAB_WEBHOOK_MODE" in refused(
            tmp_path, GITLAB_WEBHOOK_MODE=mode, GITLAB_WEBHOOK_SECRET="t", GITLAB_TOKEN="g"
        )
    assert "GITLAB_TOKEN" in refused(tmp_path, GITLAB_WEBHOOK_MODE="token", GITLAB_WEBHOOK_SECRET="t")
    assert "GITLAB_WEBHOOK_SECRET" in refused(tmp_path, GITLAB_WEBHOOK_MODE="token", GITLAB_TOKEN="g")
    complete = load(tmp_path, GITLAB_WEBHOOK_MODE="token", GITLAB_WEBHOOK_SECRET="t", GITLAB_TOKEN="g")
    assert complete.gitlab.url == "https://gitlab.com"
    assert load(tmp_path, GITLAB_URL="https://gitlab.example.com").gitlab is None  # the URL alone arms nothing
    assert "GITLAB_WEBHOOK_SECRET" in refused(
        tmp_path, GITLAB_WEBHOOK_MODE="signature", GITLAB_WEBHOOK_SECRET="whsec_", GITLAB_TOKEN="g"
    )
    assert "FORGEJO_TOKEN" in refused(tmp_path, FORGEJO_URL="https://fj.example.com", FORGEJO_WEBHOOK_SECRET="s")
    forgejo = load(
        tmp_path,
        FORGEJO_URL=" https://fj.example.com/ ",
        FORGEJO_WEBHOOK_SECRET="s",
        FORGEJO_TOKEN="t",
        FORGEJO_BOT_ID="31",
    )
    assert forgejo.forgejo.url == "https://fj.example.com" and forgejo.forgejo.bot_id == 31
    assert load(tmp_path, FORGEJO_BOT_ID="31").forgejo is None
    azure = {
        "AZURE_WEBHOOK_MODE": "header",
        "AZURE_WEBHOOK_SECRET": "s",
        "AZURE_ORG_URL": "https://dev.azure.com/f//",
        "AZURE_TOKEN": "t",
    }
    assert "AZURE_WEBHOOK_HEADER" in refused(tmp_path, **azure)
    armed = load(tmp_path, **azure, AZURE_WEBHOOK_HEADER=" X-Pi-Secret ")
    assert armed.azure.org_url == "https://dev.azure.com/f" and armed.azure.verifier.header == "X-Pi-Secret"
    assert "AZURE_TOKEN" in refused(tmp_path, AZURE_ORG_URL="https://dev.azure.com/f")


def test_an_env_file_alone(tmp_path: Path) -> None:
    triggers(tmp_path, GITHUB_LABEL)
    env = tmp_path / "receiver.env"
    env.write_text(f"PI_TRIGGERS_FILE={tmp_path / 'triggers.json'}\nWEBHOOK_SECRET=s\nRECEIVER_PORT=4000\n")
    config = load_receiver_config(env, environment=lambda: {"RECEIVER_PORT": "5000"})
    assert config.settings.port == 4000 and config.source == str(env)
    assert config.settings.sources["port"] == str(env) and config.settings.sources["bind"] == "default"


def test_the_role_renders_the_inventorys_receiver_variables() -> None:
    from pi_dispatch.config.envfile import parse_env_text
    from pi_dispatch.config.receiver_settings import render_receiver_env

    declared = {
        "pi_dispatch_receiver_valkey_url": "redis://store:6379/0",
        "pi_dispatch_receiver_port": 3000,
        "pi_dispatch_receiver_webhook_secret": 'a "quoted" $ecret',
        "pi_dispatch_receiver_github_auth_source": "pat",
        "pi_dispatch_receiver_github_pat": "ghp-x",
        "pi_dispatch_receiver_github_pat_var": "MY_PAT",
        "pi_dispatch_receiver_venv": "/opt/venv",  # the role's own, never rendered
        "pi_dispatch_receiver_github_app_private_key": "-----BEGIN\nkey\n-----END",
    }
    text = render_receiver_env(declared, "receiver", "/etc/pi-dispatch/triggers/triggers.json")
    values = parse_env_text(text, "rendered").values
    assert values == {
        "PI_TRIGGERS_FILE": "/etc/pi-dispatch/triggers/triggers.json",
        "VALKEY_URL": "redis://store:6379/0",
        "RECEIVER_PORT": "3000",
        "WEBHOOK_SECRET": 'a "quoted" $ecret',
        "GITHUB_AUTH_SOURCE": "pat",
        "GITHUB_PAT_VAR": "MY_PAT",
        "GITHUB_APP_PRIVATE_KEY": "-----BEGIN\\nkey\\n-----END",
        "MY_PAT": "ghp-x",
    }
    with pytest.raises(ConfigError) as raised:
        render_receiver_env({"pi_dispatch_receiver_webhok_secret": "x"}, "receiver", "/t.json")
    assert "pi_dispatch_receiver_webhok_secret" in str(raised.value)


def test_the_units_descriptor_limit_follows_the_declared_connection_cap() -> None:
    from pi_dispatch.config.receiver_settings import unit_descriptor_limit

    assert unit_descriptor_limit(None) == 1024 + 256  # the setting's default cap, and room for the rest
    assert unit_descriptor_limit(4096) == unit_descriptor_limit("4096") == 4096 + 256
    with pytest.raises(ValueError):
        unit_descriptor_limit("many")


def test_the_audit_reads_the_receivers_triggers_file() -> None:
    from pi_dispatch.fleet.inventory import load_fleet

    example = Path(__file__).parent.parent.parent / "inventory.example"
    workers, receiver_files = load_fleet(example / "hosts.yml")
    assert [path.resolve() for path in receiver_files] == [(example / "triggers.json").resolve()]
    assert [host.name for host in workers] == ["mini1", "mini2", "mini3"]  # the same load


def test_the_pat_is_read_from_the_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    triggers(tmp_path, GITHUB_LABEL)
    monkeypatch.chdir(tmp_path)
    for variable, value in {"WEBHOOK_SECRET": "s", "GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp-env"}.items():
        monkeypatch.setenv(variable, value)
    assert load_receiver_config().github.token == "ghp-env"  # as systemd hands it over, from its EnvironmentFile
