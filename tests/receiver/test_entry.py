"""The receiver's entry: started as its unit starts it, it checks its configuration in a child and serves without
the command line's framework or the libraries that checked it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pi_dispatch.config.handover import secret_text
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.forgeapi.common import forge_setting
from pi_dispatch.receiver.entry import checked_config
from tests.support.helpers import CLI_FRAMEWORK, SETTINGS_CHECKERS, modules_loaded

LABEL = {"triggers": [{"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}]}


def env_file(folder: Path, **extra: str) -> Path:
    (folder / "triggers.json").write_text(json.dumps(LABEL))
    values = {
        "PI_TRIGGERS_FILE": str(folder / "triggers.json"),
        "VALKEY_URL": "redis://127.0.0.1:1",
        "WEBHOOK_SECRET": "entry-secret",
        "GITHUB_AUTH_SOURCE": "pat",
        "GITHUB_PAT": "ghp-entry",
    } | extra
    path = folder / "receiver.env"
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    return path


def test_the_checked_configuration_arms_what_the_settings_say_with_secrets_intact(tmp_path: Path) -> None:
    config = checked_config(env_file(tmp_path))
    assert config.github is not None and config.github.token == "ghp-entry"
    assert secret_text(forge_setting(config.settings, "WEBHOOK_SECRET")) == "entry-secret" and config.gitlab is None
    assert config.settings.valkey_url == "redis://127.0.0.1:1"
    assert "entry-secret" not in repr(config.settings)
    assert config.rules.of("github").any_rule


def test_a_refused_configuration_is_raised_with_every_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        checked_config(env_file(tmp_path, WEBHOOK_SECRET="", GITLAB_TOKEN="t"))
    subjects = {problem.subject for problem in refused.value.problems}
    assert {"WEBHOOK_SECRET", "GITLAB_WEBHOOK_MODE"} <= subjects


def test_what_the_receiver_imports_leaves_out_the_cli_framework_and_the_checking_libraries(tmp_path: Path) -> None:
    code = (
        "from pathlib import Path\n"
        "import pi_dispatch.cli, pi_dispatch.receiver.boot\n"
        "from pi_dispatch.receiver.entry import checked_config\n"
        f"config = checked_config(Path({str(env_file(tmp_path))!r}))\n"
    )
    others = ("pi_dispatch.cli.", "pi_dispatch.console", "pi_dispatch.worker", "pi_dispatch.audit")
    assert modules_loaded(code, (*CLI_FRAMEWORK, *SETTINGS_CHECKERS), others) == []
