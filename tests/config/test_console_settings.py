"""The console's settings: read from an env file alone, refused naming the variable and its fix, rendered from an
inventory's `pi_dispatch_console_*` declarations, and checked by `pi-dispatch console --check` (the role's
validation)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pi_dispatch.config.console_settings import load_console_settings, render_console_env
from pi_dispatch.core.errors import ConfigError
from tests.support.helpers import run_cli

DIGEST = hashlib.sha256(b"a-token").hexdigest()


def test_an_env_file_gives_the_logins_and_the_switches(tmp_path: Path) -> None:
    env = tmp_path / "console.env"
    env.write_text(f"PI_CONSOLE_LOGINS=alice:operate:{DIGEST},bob:read:{DIGEST}\nPI_CONSOLE_ACTIONS=1\n")
    settings = load_console_settings(env)
    assert [(login.name, login.role) for login in settings.declared_logins] == [("alice", "operate"), ("bob", "read")]
    assert settings.actions and not settings.tls and (settings.bind, settings.port) == ("127.0.0.1", 10480)


@pytest.mark.parametrize("logins", ["alice:admin:" + DIGEST, "alice:read:" + DIGEST[:-1], "Alice:read:" + DIGEST, "x"])
def test_a_login_that_does_not_read_is_refused_naming_the_variable(tmp_path: Path, logins: str) -> None:
    env = tmp_path / "console.env"
    env.write_text(f"PI_CONSOLE_LOGINS={logins}\n")
    with pytest.raises(ConfigError) as refused:
        load_console_settings(env)
    assert "PI_CONSOLE_LOGINS" in str(refused.value) and DIGEST[:20] not in str(refused.value)  # never quoted
    said = run_cli("console", "--check", "--env-file", str(env))
    assert said.returncode == 2 and "PI_CONSOLE_LOGINS" in said.stderr and "Traceback" not in said.stderr


def test_the_inventory_renders_the_env_file_the_console_reads(tmp_path: Path) -> None:
    declared = {"pi_dispatch_console_port": 10481, "pi_dispatch_console_actions": True,
                "pi_dispatch_console_user": "ignored-role-variable", "other": 1}  # fmt: skip
    env = tmp_path / "console.env"
    env.write_text(render_console_env(declared, "receiver"))
    assert "PI_CONSOLE_PORT=10481" in env.read_text() and "PI_CONSOLE_ACTIONS=1" in env.read_text()
    said = run_cli("console", "--check", "--env-file", str(env))
    assert said.returncode == 0 and "127.0.0.1:10481, actions for operate logins" in said.stdout
    with pytest.raises(ConfigError, match="pi_dispatch_console_prot"):
        render_console_env({"pi_dispatch_console_prot": 1}, "receiver")
