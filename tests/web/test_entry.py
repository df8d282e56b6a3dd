"""How the console's unit starts it (`pi-dispatch console --env-file F`, `web/entry.py`): without the command line's
framework, serving its env file's store, stopping on SIGTERM with exit 0; a refused env file is exit 2, one
message naming the setting and no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.egress import free_port
from tests.support.helpers import run_cli_process

UNIT_START_S = 60  # a ceiling only a hang reaches


@pytest.mark.redis
def test_the_unit_form_serves_its_env_files_store_and_stops_on_sigterm(tmp_path: Path, valkey_url: str) -> None:
    port = free_port()
    env_file = tmp_path / "console.env"
    env_file.write_text(f"VALKEY_URL={valkey_url}\nPI_CONSOLE_PORT={port}\n")
    env_file.chmod(0o600)
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("VALKEY_", "PI_"))}
    command = [sys.executable, "-m", "pi_dispatch", "console", "--env-file", str(env_file)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=environment
    ) as unit:
        try:
            assert unit.stdout is not None
            first = unit.stdout.readline()  # said once it listens
            assert first.startswith(f"pi-dispatch console on http://127.0.0.1:{port}/ (read-only"), first
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs", timeout=UNIT_START_S) as answer:
                assert answer.status == 200 and b"Runs" in answer.read()
            unit.send_signal(signal.SIGTERM)
            assert unit.wait(UNIT_START_S) == 0
        finally:
            unit.kill()


def test_a_refused_env_file_is_exit_2_naming_the_setting(tmp_path: Path) -> None:
    env_file = tmp_path / "console.env"
    env_file.write_text("VALKEY_URL=redis://127.0.0.1:6379\nPI_CONSOLE_PORT=http\n")
    env_file.chmod(0o600)
    said = run_cli_process("console", "--env-file", str(env_file))
    assert said.returncode == 2 and "PI_CONSOLE_PORT" in said.stdout + said.stderr
    assert "Traceback" not in said.stderr


@pytest.mark.parametrize("form", ["unit", "command", "check"])
def test_a_console_beyond_this_host_without_logins_is_refused_exit_2(tmp_path: Path, form: str) -> None:
    """Issue 53 (M4): PI_CONSOLE_BIND=0.0.0.0 with no login would show the fleet to anyone who reaches it: the unit,
    the command (its --bind too) and --check all refuse it, naming the setting; loopback still starts."""
    env_file = tmp_path / "console.env"
    env_file.write_text("VALKEY_URL=redis://127.0.0.1:6379\nPI_CONSOLE_BIND=0.0.0.0\n")
    env_file.chmod(0o600)
    asked = {
        "unit": ["console", "--env-file", str(env_file)],
        "command": ["console", "--env-file", str(env_file), "--port", "1"],
        "check": ["console", "--env-file", str(env_file), "--check"],
    }[form]
    said = run_cli_process(*asked)
    assert said.returncode == 2 and "PI_CONSOLE_BIND" in said.stdout + said.stderr, said.stdout + said.stderr
    assert "Traceback" not in said.stderr
    env_file.write_text("VALKEY_URL=redis://127.0.0.1:6379\n")
    overridden = run_cli_process("console", "--env-file", str(env_file), "--bind", "::", "--check")
    assert overridden.returncode == 2 and "--bind" in overridden.stdout + overridden.stderr
    assert run_cli_process("console", "--env-file", str(env_file), "--check").returncode == 0
