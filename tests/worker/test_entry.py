"""The worker's entry: started as its unit starts it without the rest of the command line, and still refusing
bad config with the full command line's message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import CLI_FRAMEWORK, SETTINGS_CHECKERS, modules_loaded, run_cli_process


def test_what_the_worker_imports_leaves_out_the_cli_framework_and_the_operator_code() -> None:
    code = "import pi_dispatch.cli, pi_dispatch.worker.entry, pi_dispatch.worker.lifecycle"
    operator = ("pi_dispatch.cli.", "pi_dispatch.console", "pi_dispatch.receiver", "pi_dispatch.audit")
    assert modules_loaded(code, (*CLI_FRAMEWORK, *SETTINGS_CHECKERS, "aiohttp"), operator) == []


def test_a_worker_started_as_its_unit_starts_it_refuses_bad_config_with_exit_2_and_no_traceback(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "worker.env"
    env_file.write_text("VALKEY_URL=redis://127.0.0.1:1\nPI_CONCURRENCY=0\n")
    result = run_cli_process("worker", "--env-file", str(env_file))
    assert result.returncode == 2
    assert "config error" in result.stderr and "PI_CONCURRENCY" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.redis
def test_a_worker_refuses_a_store_that_may_evict_jobs(tmp_path: Path, private_redis: Any) -> None:
    import redis

    with redis.Redis.from_url(private_redis.url) as admin:  # closed: a leaked socket fails a later test
        admin.config_set("maxmemory-policy", "allkeys-lru")
    env_file = tmp_path / "worker.env"
    env_file.write_text(f"VALKEY_URL={private_redis.url}\nPI_WORKER_NAME=mini1\n")
    worker = run_cli_process("worker", "--env-file", str(env_file))
    assert worker.returncode == 2 and "Traceback" not in worker.stderr
    assert "maxmemory-policy: is allkeys-lru" in worker.stderr and "noeviction" in worker.stderr
