"""The receiver's long-running loops under its supervisor: a fault injected into each, with a real redis-server and
real HTTP, and the loop started again while the receiver goes on answering."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from pi_dispatch.demo.store import free_port
from pi_dispatch.infra.events import Recorder
from pi_dispatch.receiver import boot
from pi_dispatch.receiver.endpoints import load_receiver_config
from pi_dispatch.receiver.server import Receiver
from tests.support.fakeforge import FakeForge, Reply
from tests.support.helpers import failing_once, until
from tests.support.receiving import github_headers

SECRET = "supervised-secret"
LABEL = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}
LABELED = {
    "action": "labeled",
    "sender": {"id": 1, "login": "alice"},
    "label": {"name": "pi:fix"},
    "issue": {"number": 7, "title": "T", "body": "B", "labels": [{"name": "pi:fix"}]},
    "repository": {"full_name": "octo/repo"},
}


@pytest.mark.redis
@pytest.mark.parametrize("loop", ["spool-replay", "report"])
async def test_a_receiver_loop_that_fails_is_started_again_and_the_receiver_goes_on(
    loop: str, tmp_path: Path, valkey_url: str, forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    forge.answer("GET", "/user", Reply(200, {"id": 999, "login": "pi-bot"}))  # GitHub's answer of who the harness is
    forge.answer("GET", "/repos/octo/repo/collaborators/alice/permission", Reply(200, {"permission": "write"}))
    (tmp_path / "triggers.json").write_text(json.dumps({"triggers": [LABEL]}))
    port = free_port()
    env = {
        "PI_TRIGGERS_FILE": str(tmp_path / "triggers.json"),
        "PI_RECEIVER_SPOOL_DIR": str(tmp_path / "spool"),
        "VALKEY_URL": valkey_url,
        "RECEIVER_PORT": str(port),
        "RECEIVER_BIND": "127.0.0.1",
        "WEBHOOK_SECRET": SECRET,
        "GITHUB_AUTH_SOURCE": "pat",
        "GITHUB_PAT": "ghp-supervised",
        "GITHUB_API_URL": forge.url,
    }
    env_file = tmp_path / "receiver.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in env.items()))
    config = load_receiver_config(env_file, cwd=tmp_path)
    calls: list[int] = []
    if loop == "spool-replay":
        monkeypatch.setattr(Receiver, "replay", failing_once(Receiver.replay, calls))
    else:
        monkeypatch.setattr(boot, "_report", failing_once(boot._report, calls))
    log, errors, stop = Recorder(), Recorder(), boot.Stop()
    serving = asyncio.ensure_future(boot.serve(config, log, stop, errors))
    try:
        await until(lambda: len(calls) >= 2 or serving.done(), f"the {loop} loop running again")
        assert not serving.done()
        failed = [fields for event, fields in errors.events if event == "loop_failed"]
        assert [(fields["loop"], fields["then"]) for fields in failed] == [(loop, "restart")]
        body = json.dumps(LABELED).encode()
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{port}/", data=body, headers=github_headers(body, "issues", "d-1", SECRET))
            as reply,
        ):  # fmt: skip
            assert reply.status == 202
    finally:
        stop.set("SIGTERM")
        assert await asyncio.wait_for(serving, 60) == 0
