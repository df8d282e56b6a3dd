"""`pi-dispatch demo` end to end: real workers, real containers, the example inventory; nothing left behind."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

from pi_dispatch.demo import run as demo


def worker_processes() -> list[int]:
    """Live `python -m pi_dispatch worker` processes on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if b"pi_dispatch" in argv and b"worker" in argv and state != "Z":
            found.append(int(entry.name))
    return found


def run_demo() -> tuple[int, str]:
    out = io.StringIO()
    code = demo.main(Console(file=out, width=200, color_system=None))
    return code, out.getvalue()


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
def test_the_demo_runs_the_example_fleet_and_leaves_nothing_behind(job_image: str, valkey_url: str) -> None:
    before = worker_processes()
    code, text = run_demo()
    assert code == 0, text
    assert "Started 3 workers, one process per inventory host: mini1, mini2, mini3." in text
    lines = text.splitlines()

    def row(first: str) -> str:
        return next(line for line in lines if line.strip("│ ").startswith(first))

    assert "s:prod,w:ci,w:nightly" in row("mini1") and "false" in row("mini3")
    assert "pi-jobs@mini1" in row("#1 deploy")  # routed to the one named host with prod
    cron = next(line for line in lines if "nightly-deps" in line)  # mini1's file, as its worker reconciled it
    assert "mini1" in cron and "0 3 * * * (UTC)" in cron and "pi-jobs@mini1" in cron
    assert "pi-jobs " in row("#2 review")  # everyone has ci: the shared queue
    deploy = row("gh-demo-1")
    assert "mini1" in deploy and "completed" in deploy
    assert "held" in row("gh-demo-3")
    assert "secret-profile-unknown" in row("gh-demo-5")  # staging: declared nowhere, refused
    assert "live registry: ok -> 4 error" in text
    assert "nothing is left running" in text
    assert "Next: pi-dispatch demo --keep leaves this fleet running" in text and "`pi-dispatch top`" in text
    assert worker_processes() == before


@pytest.mark.redis
@pytest.mark.slow
def test_without_docker_the_demo_says_so_and_still_routes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    code, text = run_demo()
    assert code == 0, text
    assert "Docker: no Docker daemon answers" in text and "starts no worker" in text
    assert "pi-jobs@mini1" in text and "Runs:" not in text
    assert "live registry: ok" in text


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
def test_demo_keep_leaves_the_fleet_running_for_the_tools_until_sigterm(job_image: str, valkey_url: str) -> None:
    import json
    import signal
    import subprocess
    import sys
    import time

    before = worker_processes()
    demo_process = subprocess.Popen(
        [sys.executable, "-m", "pi_dispatch", "demo", "--keep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert demo_process.stdout is not None
    said: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any("Stop it with Ctrl-C" in line for line in said):
            line = demo_process.stdout.readline()
            if not line:
                break
            said.append(line)
        hosts_line = next(line for line in said if line.strip().startswith("pi-dispatch hosts --valkey-url "))
        url = hosts_line.split("--valkey-url ")[1].strip()
        listed = subprocess.run(
            [sys.executable, "-m", "pi_dispatch", "hosts", "--json", "--valkey-url", url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert sorted(row["name"] for row in json.loads(listed.stdout)) == ["mini1", "mini2", "mini3"]
        assert len(worker_processes()) == len(before) + 3
    finally:
        demo_process.send_signal(signal.SIGTERM)
        rest, _ = demo_process.communicate(timeout=60)
    assert demo_process.returncode == 0, "".join(said) + rest
    assert "nothing is left running" in rest
    assert worker_processes() == before
