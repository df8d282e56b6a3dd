"""`pi-dispatch demo` end to end: real workers, real containers, the example inventory; nothing left behind."""

from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from pi_dispatch.demo import run as demo
from pi_dispatch.demo.keep import say_next


def _parents() -> dict[int, int]:
    """Every live process's parent, from /proc (a zombie is not live)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]  # after the name, which may hold spaces and brackets
        if state != "Z":
            found[int(entry.name)] = int(parent)
    return found


def worker_processes(ancestor: int) -> set[int]:
    """Live `python -m pi_dispatch worker` processes started, at any depth, by this one: never another test's, which
    run beside this one (pytest-xdist), nor a molecule host's."""
    parents = _parents()
    found: set[int] = set()
    for pid in parents:
        chain, at = set(), pid
        while at in parents and at not in chain and at != ancestor:
            chain.add(at)
            at = parents[at]
        if at != ancestor:
            continue
        try:
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pi_dispatch" in argv and b"worker" in argv:
            found.add(pid)
    return found


def still_alive(pids: set[int]) -> set[int]:
    return pids & set(_parents())


def run_demo() -> tuple[int, str]:
    out = io.StringIO()
    code = demo.main(Console(file=out, width=200, color_system=None))
    return code, out.getvalue()


def test_without_keep_the_demo_names_the_tools_worth_trying_next() -> None:
    out = io.StringIO()
    say_next(Console(file=out, width=200, color_system=None), "redis://127.0.0.1:6399/0", "gh-demo-1")
    said = out.getvalue()
    assert "Next: pi-dispatch demo --keep leaves this fleet running" in said and "`pi-dispatch top`" in said
    assert "`pi-dispatch logs gh-demo-1`" in said and "6399" not in said  # the commands, not the store's address


@pytest.mark.redis
@pytest.mark.slow
def test_without_docker_the_demo_says_so_and_still_routes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    code, text = run_demo()
    assert code == 0, text
    assert "Docker: the Docker daemon is not reachable" in text and "starts no worker" in text
    assert "pi-jobs@mini1" in text and "Runs:" not in text
    assert "live registry: ok" in text


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
def test_the_demo_runs_the_example_fleet_keeps_it_for_the_tools_and_leaves_nothing_behind(
    job_image: str, valkey_url: str
) -> None:
    """The demo as `./dev demo` runs it, once: `--keep` shows everything the plain run shows, then holds the fleet up
    for the tools until SIGTERM (the plain run's only other line, what to try next, is the test above)."""
    import json
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    demo_process = subprocess.Popen(
        [sys.executable, "-m", "pi_dispatch", "demo", "--keep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "80"},  # through a pipe, as `./dev demo | grep` reads it
    )
    assert demo_process.stdout is not None
    said: list[str] = []
    workers: set[int] = set()
    egress: re.Match[str] | None = None
    try:
        deadline = time.monotonic() + 240  # a ceiling for a hang: the demo says it is ready in about a minute
        while time.monotonic() < deadline and not any("Stop it with Ctrl-C" in line for line in said):
            line = demo_process.stdout.readline()
            if not line:
                break
            said.append(line)
        text = "".join(said)
        assert "Started 3 workers, one process per inventory host: mini1, mini2, mini3." in text, text
        lines = text.splitlines()
        assert not set("│┃━─…") & set(text)  # plain columns: every id whole, one record a line

        def row(first: str) -> str:
            return next(line for line in lines if line.startswith(first))

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
        assert any(re.match(r"pi-dispatch logs gh-demo-\d+ --valkey-url ", line.strip()) for line in said)  # a job
        hosts_line = next(line for line in said if line.strip().startswith("pi-dispatch hosts --valkey-url "))
        url = hosts_line.split("--valkey-url ")[1].strip()
        listed = subprocess.run(
            [sys.executable, "-m", "pi_dispatch", "hosts", "--json", "--valkey-url", url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert sorted(row["name"] for row in json.loads(listed.stdout)) == ["mini1", "mini2", "mini3"]
        page_line = next(line for line in said if line.startswith("Web console (read-only): http://127.0.0.1:"))
        page_url = page_line.split(": ", 1)[1].strip()
        with urllib.request.urlopen(page_url, timeout=60) as answer:  # the first job's page, over the demo's store
            assert answer.status == 200 and "gh-demo-" in answer.read().decode()
        audit_url = page_url.split("/jobs/")[0] + "/audit"
        with urllib.request.urlopen(audit_url, timeout=120) as answer:  # audit --live of the demo's inventory
            assert answer.status == 200 and "<code>" in answer.read().decode()
        workers = worker_processes(demo_process.pid)
        assert len(workers) == 3, workers
        egress = re.search(r"Jobs run on\s+(pi-egress-demo-[0-9a-f]+),", text)
        if os.geteuid() == 0 and shutil.which("squid", path="/usr/sbin:/usr/bin"):  # as ./dev demo runs it here
            assert egress is not None and "Egress: on." in text, text  # the example's jobs, behind its allowlist
    finally:
        demo_process.send_signal(signal.SIGTERM)
        rest, _ = demo_process.communicate(timeout=60)
    assert demo_process.returncode == 0, "".join(said) + rest
    assert "nothing is left running" in rest
    assert still_alive(workers) == set()
    if egress is not None:  # its proxy's network went with it (and its rules, which name its bridge)
        import docker

        client = docker.from_env()
        try:
            assert client.networks.list(names=[egress[1]]) == []
        finally:
            client.close()
