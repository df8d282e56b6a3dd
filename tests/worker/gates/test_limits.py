"""The worker's limit files: read at boot (a bad one stops the worker with exit 2, naming it), and read again on an
edit, a bad edit keeping the last good file."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from pi_dispatch.infra.events import Recorder
from pi_dispatch.worker.gates.limits import Limits, read_limit_files
from tests.support.workers import CEILING_S, settings_of, worker_env

ROW = {"scope": "acme/web", "day": 5}


async def until(condition: object) -> None:
    deadline = time.monotonic() + CEILING_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.05)


@pytest.mark.redis
async def test_a_bad_edit_keeps_the_last_good_limits_and_a_good_one_is_read(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    file = tmp_path / "scoped-limits.json"
    file.write_text(json.dumps({"version": 1, "limits": [ROW]}))
    settings = settings_of(worker_env(tmp_path, valkey_url, "unused:image", "mini1", PI_SCOPED_LIMITS_FILE=str(file)))
    events = Recorder()
    limits = Limits(settings, client, lambda: int(time.time() * 1000), events, *read_limit_files(settings))
    limits.watch()
    try:
        await until(lambda: "scoped_limits_watching" in events.names())
        before = limits.row_facts()
        file.write_text('{"version": 1, "limits": [{"scope": "acme/*", "day": 1}]}')
        await until(lambda: "scoped_limits_reload_invalid" in events.names())
        assert [row.scope for row in limits.scoped.rows] == ["acme/web"] and limits.row_facts() == before
        invalid = next(fields for name, fields in events.events if name == "scoped_limits_reload_invalid")
        assert "wildcards" in str(invalid["reason"]) and str(tmp_path) not in json.dumps(invalid)  # no path
        reloads = events.names().count("scoped_limits_reloaded")
        file.write_text(json.dumps({"version": 1, "limits": [ROW, {"scope": "acme/api", "concurrent": 1}]}))
        await until(lambda: events.names().count("scoped_limits_reloaded") > reloads)
        assert [row.scope for row in limits.scoped.rows] == ["acme/web", "acme/api"]
        assert limits.row_facts() != before  # the row says the host now runs with other limits
    finally:
        limits.stop()


@pytest.mark.slow
def test_a_bad_limits_file_stops_the_worker_at_boot_with_exit_2_naming_it(tmp_path: Path) -> None:
    pauses = tmp_path / "pause-windows.json"
    pauses.write_text('{"windows": [{"scope": "acme/web", "from": "09:00", "to": "09:00"}]}')
    env_file = tmp_path / "worker.env"
    env_file.write_text(f"VALKEY_URL=redis://127.0.0.1:1/0\nPI_EGRESS=0\nPI_PAUSE_WINDOWS_FILE={pauses}\n")
    done = subprocess.run(
        [sys.executable, "-m", "pi_dispatch", "worker", "--env-file", str(env_file)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "PI_PAUSE_WINDOWS_FILE" in done.stderr and "from and to are the same time" in done.stderr
    assert "Traceback" not in done.stderr


def test_config_check_reads_the_limit_files_as_the_worker_does(tmp_path: Path) -> None:
    from tests.support.helpers import run_cli

    limits = tmp_path / "scoped-limits.json"
    limits.write_text('{"version": 3, "limits": []}')
    env_file = tmp_path / "worker.env"
    env_file.write_text(f"PI_SCOPED_LIMITS_FILE={limits}\n")
    said = run_cli("config", "check", "--env-file", str(env_file))
    assert said.returncode == 2 and "PI_SCOPED_LIMITS_FILE" in said.stderr and "newer pi-dispatch" in said.stderr
    limits.write_text(json.dumps({"version": 1, "limits": [ROW]}))
    assert run_cli("config", "check", "--env-file", str(env_file)).returncode == 0
    limits.unlink()  # checked away from the host the role writes it on: said, not refused
    away = run_cli("config", "check", "--env-file", str(env_file), "--json")
    assert away.returncode == 0 and "is not on this machine" in json.loads(away.stdout)["warnings"][0]
