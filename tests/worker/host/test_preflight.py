"""`config check --live` against the real store and Docker daemon: each check passes where the host can serve, and
the first that cannot is named with its fix, exit 1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.docker]


def check_live(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    quiet = {key: value for key, value in os.environ.items() if not key.startswith(("VALKEY_", "PI_"))}
    return subprocess.run(
        [sys.executable, "-m", "pi_dispatch", "config", "check", "--live", *extra],
        env=quiet | env | {"COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def settings(tmp_path: Path, valkey_url: str, job_image: str) -> dict[str, str]:
    script = tmp_path / "resolve"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return {
        "PI_WORKER_NAME": "mini1",
        "VALKEY_URL": valkey_url,
        "PI_JOB_IMAGE": job_image,
        "PI_SECRET_PROFILES": f"prod:{script}",
        "PI_WAIT_PROFILES": f"ci:{script}",
        "PI_LOGS_DIR": str(tmp_path / "logs"),
        "PI_JOBS_DIR": str(tmp_path / "jobs"),
        "PI_EGRESS": "0",  # tests/worker/test_egress_jobs.py checks a host's egress proxy
    }


def test_a_host_that_can_serve_passes_every_check(tmp_path: Path, valkey_url: str, job_image: str) -> None:
    result = check_live(settings(tmp_path, valkey_url, job_image), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    names = [check["check"] for check in report["checks"]]
    assert names == [
        "store",
        "dollar caps",
        "docker",
        "job image",
        "secret profile prod",
        "wait profile ci",
        "logs dir",
        "jobs dir",
    ]
    assert report["ok"] and all(check["ok"] for check in report["checks"])


def test_each_fault_is_named_and_the_first_decides_the_exit(tmp_path: Path, valkey_url: str, job_image: str) -> None:
    env = settings(tmp_path, valkey_url, job_image)
    (tmp_path / "resolve").chmod(0o644)
    (tmp_path / "logs").mkdir(mode=0o500)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    env |= {"VALKEY_URL": f"redis://127.0.0.1:{closed}/0", "PI_JOB_IMAGE": "pi-dispatch-missing:1"}
    result = check_live(env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    failed = [line.split(":")[0].strip() for line in result.stdout.splitlines() if line.startswith("FAIL")]
    expected = ["FAIL  store", "FAIL  job image", "FAIL  secret profile prod", "FAIL  wait profile ci"]
    if os.geteuid() != 0:  # root writes wherever the mode says it may not
        expected.append("FAIL  logs dir")
    assert failed == expected
    assert result.stderr.startswith("error: store: ") and "fix:" in result.stderr


def test_with_egress_on_a_missing_proxy_network_is_named_with_its_fix(
    tmp_path: Path, valkey_url: str, job_image: str
) -> None:
    env = settings(tmp_path, valkey_url, job_image) | {"PI_EGRESS": "1", "PI_JOB_NETWORK": "pi-egress-never-made"}
    result = check_live(env, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    [egress] = [check for check in json.loads(result.stdout)["checks"] if check["check"] == "egress proxy"]
    assert not egress["ok"] and egress["detail"].startswith("egress-proxy-missing: no Docker network"), egress
