"""`pi-dispatch receiver` as a real process: boot in the reference's order, serve, reload the triggers file live,
stop on SIGTERM; `receiver check`; exit 2 for configuration, 1 for what a restart may fix (§11.4, §15.8)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pi_dispatch.demo.store import free_port
from pi_dispatch.fleet.receivers import REPORT_EVERY_S, read_receivers
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.valkey import connect
from tests.support.fakeforge import FakeForge, Reply
from tests.support.helpers import run_cli
from tests.support.receiving import github_headers, queued_jobs

LABEL = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}
OTHER = {"on": {"type": "label", "any": ["pi:other"]}, "run": {"kind": "github", "flow": "other"}}


def write_triggers(path: Path, *entries: Any) -> None:
    """Replace the file atomically, as an editor or a deploy does: write beside it, then rename over it."""
    draft = path.with_suffix(".tmp")
    draft.write_text(json.dumps({"triggers": list(entries)}))
    draft.rename(path)


def labeled(label: str, number: int = 42) -> dict[str, Any]:
    return {
        "action": "labeled",
        "sender": {"id": 1, "login": "alice"},
        "label": {"name": label},
        "issue": {"number": number, "title": "T", "body": "B", "labels": [{"name": label}]},
        "repository": {"full_name": "octo/repo"},
    }


class ReceiverProcess:
    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env = folder, env
        self.stdout, self.stderr = folder / "stdout.log", folder / "stderr.log"
        env_file = folder / "receiver.env"
        env_file.write_text("".join(f"{key}={value}\n" for key, value in env.items()))
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pi_dispatch", "receiver", "--env-file", str(env_file)],
                stdout=out,
                stderr=err,
                cwd=folder,
            )

    def events(self, stream: str = "stdout") -> list[dict[str, Any]]:
        text = (self.stdout if stream == "stdout" else self.stderr).read_text()
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert all({"timestamp", "level"} <= set(line) for line in lines)  # every line has them: compared without
        return [{key: value for key, value in line.items() if key not in ("timestamp", "level")} for line in lines]

    async def wait_for(self, event: str, timeout_s: float = 30, stream: str = "stdout") -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [line for line in self.events(stream) if line["event"] == event]
            if found:
                return found[-1]
            if self.process.poll() is not None and stream == "stdout":
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {event}: {self.stdout.read_text()} {self.stderr.read_text()}")

    async def exit_code(self, timeout_s: float = 30) -> int:
        """The exit status, waited for off the loop: the forge stand-in must keep answering meanwhile."""
        return await asyncio.to_thread(self.process.wait, timeout_s)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def github_api(forge: FakeForge) -> FakeForge:
    """The stand-in, answering as api.github.com that the harness is user 999 and that alice has write on
    octo/repo."""
    forge.answer("GET", "/user", Reply(200, {"id": 999, "login": "pi-bot"}))
    forge.answer("GET", "/repos/octo/repo/collaborators/alice/permission", Reply(200, {"permission": "write"}))
    return forge


def github_env(folder: Path, valkey_url: str, api: str, **extra: str) -> dict[str, str]:
    return {
        "PI_TRIGGERS_FILE": str(folder / "triggers.json"),
        "VALKEY_URL": valkey_url,
        "RECEIVER_PORT": str(free_port()),
        "RECEIVER_BIND": "127.0.0.1",
        "WEBHOOK_SECRET": "boot-secret",
        "GITHUB_AUTH_SOURCE": "pat",
        "GITHUB_PAT": "ghp-boot",
        "GITHUB_API_URL": api,
        "PI_RECEIVER_HEALTH_ADDR": f"127.0.0.1:{free_port()}",
    } | extra


async def scrape(health: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as session, session.get(f"http://{health}/metrics") as scraped:
        assert scraped.status == 200
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(await scraped.text())
            for sample in family.samples
        }


async def deliver(port: str, payload: object, delivery: str) -> int:
    body = json.dumps(payload).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{port}/", data=body, headers=github_headers(body, "issues", delivery, "boot-secret")
        ) as reply,
    ):
        return reply.status


@pytest.mark.redis
@pytest.mark.slow
async def test_boot_serve_reload_and_stop(tmp_path: Path, valkey_url: str, client: Any, github_api: FakeForge) -> None:
    path = tmp_path / "triggers.json"
    write_triggers(path, LABEL)
    env = github_env(tmp_path, valkey_url, github_api.url)
    receiver = ReceiverProcess(tmp_path, env)
    try:
        started = await receiver.wait_for("receiver_started")
        assert started == {
            "event": "receiver_started",
            "port": int(env["RECEIVER_PORT"]),
            "bind": "127.0.0.1",
            "valkey": valkey_url,
        }
        assert (await receiver.wait_for("self_identity"))["id"] == 999
        assert github_api.asked("/user")[0].headers["authorization"] == "Bearer ghp-boot"
        await receiver.wait_for("triggers_watching")
        port = env["RECEIVER_PORT"]
        health = env["PI_RECEIVER_HEALTH_ADDR"]
        at_boot = await scrape(health)  # before any delivery: every series there, at zero
        assert at_boot[("pi_dispatch_deliveries_total", (("forge", "github"), ("status", "503")))] == 0
        assert at_boot[("pi_dispatch_deliveries_dropped_total", (("reason", "self"),))] == 0
        capped = (("action", "refused"), ("cap", "peer"))
        assert at_boot[("pi_dispatch_receiver_connections_capped_total", capped)] == 0
        assert not [name for name, _ in at_boot if name.endswith("_created")]
        build = dict(next(labels for name, labels in at_boot if name == "pi_dispatch_build_info"))
        assert build["component"] == "receiver" and build["reference_version"] == "1.8.0"
        assert await deliver(port, labeled("pi:fix"), "b-1") == 202
        assert "gh-b-1" in await queued_jobs(valkey_url)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://{health}/livez") as live, session.get(f"http://{health}/readyz") as ready:
                assert (live.status, ready.status) == (200, 200)
            async with session.get(f"http://127.0.0.1:{port}/livez") as webhook:
                assert webhook.status == 405  # the webhook port stays the reference's: every other path is GitHub's
            forged = json.dumps(labeled("pi:fix", 7)).encode()
            headers = github_headers(forged, "issues", "b-forged", "not-the-secret")
            async with session.post(f"http://127.0.0.1:{port}/", data=forged, headers=headers) as refused:
                assert refused.status == 401
        said = await receiver.wait_for("delivery_refused", stream="stderr")
        assert said == {"event": "delivery_refused", "forge": "github", "status": 401, "reason": said["reason"]}
        assert said["reason"] and "boot-secret" not in receiver.stderr.read_text() + receiver.stdout.read_text()

        write_triggers(path, LABEL, OTHER)
        await receiver.wait_for("triggers_reloaded")
        await asyncio.sleep(1.5)  # reading the file to reload it must not count as a change to it
        assert len([line for line in receiver.events() if line["event"] == "triggers_reloaded"]) == 1
        assert await deliver(port, labeled("pi:other", 43), "b-2") == 202
        path.write_text("{ broken")
        invalid = await receiver.wait_for("triggers_reload_invalid", stream="stderr")  # a warning
        assert invalid["kept"] is True
        assert await deliver(port, labeled("pi:other", 44), "b-3") == 202  # the rules being served stay
        assert await deliver(port, labeled("pi:nothing", 45), "b-4") == 204  # no trigger matches: dropped
        metrics = await scrape(health)
        answered = {
            labels: value
            for (name, labels), value in metrics.items()
            if name == "pi_dispatch_deliveries_total" and value > 0
        }
        assert answered == {
            (("forge", "github"), ("status", "202")): 3,
            (("forge", "github"), ("status", "204")): 1,
            (("forge", "github"), ("status", "401")): 1,
            (("forge", "github"), ("status", "405")): 1,
        }
        dropped = [
            labels
            for (name, labels), value in metrics.items()
            if name == "pi_dispatch_deliveries_dropped_total" and value
        ]
        assert len(dropped) == 1 and metrics[("pi_dispatch_deliveries_dropped_total", dropped[0])] == 1
        receiver.process.send_signal(signal.SIGTERM)
        assert await receiver.exit_code() == 0
        assert (await receiver.wait_for("receiver_stopping"))["signal"] == "SIGTERM"
    finally:
        receiver.stop()
    logs = receiver.stdout.read_text() + receiver.stderr.read_text()
    assert "ghp-boot" not in logs and "boot-secret" not in logs and "alice" not in logs
    assert str(tmp_path) not in logs  # names only: never a path


@pytest.mark.redis
@pytest.mark.slow
async def test_a_gitlab_only_boot_never_asks_github(tmp_path: Path, valkey_url: str, github_api: FakeForge) -> None:
    write_triggers(tmp_path / "triggers.json", {"on": LABEL["on"], "run": {"kind": "gitlab", "flow": "fix"}})
    github_api.answer("GET", "/api/v4/user", Reply(200, {"id": 77}))
    env = github_env(tmp_path, valkey_url, github_api.url)
    for key in ("WEBHOOK_SECRET", "GITHUB_AUTH_SOURCE", "GITHUB_PAT"):
        env.pop(key)
    env |= {
        "GITLAB_WEBHOOK_MODE": "token",
        "GITLAB_WEBHOOK_SECRET": "t",
        "GITLAB_TOKEN": "g",
        "GITLAB_URL": github_api.url,
    }
    receiver = ReceiverProcess(tmp_path, env)
    try:
        await receiver.wait_for("receiver_started")
        skipped = await receiver.wait_for("github_arm_skipped")
        assert "GitHub trigger" in skipped["reason"] and "GITHUB_AUTH_SOURCE" in skipped["reason"]
        assert [asked.path for asked in github_api.requests] == ["/api/v4/user"]
        assert (await receiver.wait_for("self_identity")) == {
            "event": "self_identity",
            "forge": "gitlab",
            "id": 77,
            "mode": "token",
        }
        assert await deliver(env["RECEIVER_PORT"], labeled("pi:fix"), "g-1") == 404
    finally:
        receiver.process.send_signal(signal.SIGTERM)
        await receiver.exit_code()
        receiver.stop()


@pytest.mark.redis
@pytest.mark.slow
async def test_refusals_exit_2_and_outages_exit_1(
    tmp_path: Path, valkey_url: str, github_api: FakeForge, private_redis: Any
) -> None:
    write_triggers(tmp_path / "triggers.json", LABEL)
    github_api.answer(
        "GET", "/user", Reply(401, {"message": "Bad credentials"}, headers={"x-github-request-id": "REQ-1"})
    )
    env = github_env(tmp_path, valkey_url, github_api.url)
    refused = ReceiverProcess(tmp_path, env)
    assert await refused.exit_code() == 2
    failed = await refused.wait_for("receiver_start_failed", stream="stderr")
    assert failed["status"] == 401 and failed["requestId"] == "REQ-1" and "ghp-boot" not in json.dumps(failed)
    missing = ReceiverProcess(tmp_path, {**env, "PI_TRIGGERS_FILE": str(tmp_path / "none.json")})
    assert await missing.exit_code() == 2
    github_api.answer("GET", "/user", Reply(200, {"id": 999}))
    import redis

    with redis.Redis.from_url(private_redis.url) as store:
        store.config_set("requirepass", "right")
    wrong = ReceiverProcess(tmp_path, {**env, "VALKEY_URL": private_redis.url, "VALKEY_PASSWORD": "wrong"})
    assert await wrong.exit_code() == 2 and "VALKEY_PASSWORD" in wrong.stderr.read_text()
    identity_outage = {**env, "GITHUB_API_URL": "http://127.0.0.1:1", "RECEIVER_IDENTITY_RETRY_SECONDS": "1"}
    down = ReceiverProcess(tmp_path, identity_outage)  # raised to the 60 s floor: the first waits are logged
    await down.wait_for("identity_retry")
    down.process.send_signal(signal.SIGKILL)
    down.stop()


def test_receiver_check(tmp_path: Path) -> None:
    write_triggers(tmp_path / "triggers.json", LABEL)
    env = tmp_path / "receiver.env"
    env.write_text(f"PI_TRIGGERS_FILE={tmp_path / 'triggers.json'}\nWEBHOOK_SECRET=s\n")
    checked = run_cli("receiver", "check", "--env-file", str(env))
    assert checked.returncode == 0 and "serves github" in checked.stdout and "1 webhook rules" in checked.stdout
    for line, variable in (("RECEIVER_PORT=nope", "RECEIVER_PORT"), ("GITLAB_TOKEN=x", "GITLAB_WEBHOOK_MODE")):
        env.write_text(f"PI_TRIGGERS_FILE={tmp_path / 'triggers.json'}\nWEBHOOK_SECRET=s\n{line}\n")
        refused = run_cli("receiver", "check", "--env-file", str(env))
        assert refused.returncode == 2 and variable in refused.stderr and str(env) in refused.stderr
    helped = run_cli("receiver", "--help")
    assert helped.returncode == 0 and "WEBHOOK_SECRET" in helped.stdout
    assert run_cli("receiver", "nonesuch").returncode == 2


def test_init_writes_a_starter_that_loads(tmp_path: Path) -> None:
    target = tmp_path / "triggers.json"
    assert run_cli("init", "--triggers", str(target)).returncode == 0
    from pi_dispatch.triggers.file import load_triggers

    assert len(load_triggers(target)) == 3
    assert run_cli("init", "--triggers", str(target)).returncode == 1  # never overwrites


@pytest.mark.redis
async def test_a_receiver_refuses_a_store_that_may_evict_jobs(
    tmp_path: Path, private_redis: Any, github_api: FakeForge
) -> None:
    import redis

    with redis.Redis.from_url(private_redis.url) as admin:  # closed: a leaked socket fails a later test
        admin.config_set("maxmemory-policy", "allkeys-lru")
    write_triggers(tmp_path / "triggers.json", LABEL)
    receiver = ReceiverProcess(tmp_path, github_env(tmp_path, private_redis.url, github_api.url))
    try:
        assert await receiver.exit_code() == 2
        failed = await receiver.wait_for("receiver_start_failed", stream="stderr")
        assert "maxmemory-policy" in failed["reason"] and "noeviction" in failed["reason"]
    finally:
        receiver.stop()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_delivery_spooled_while_the_store_refuses_writes_survives_a_killed_receiver(
    tmp_path: Path, private_redis: Any, github_api: FakeForge
) -> None:
    import redis

    write_triggers(tmp_path / "triggers.json", LABEL)
    env = github_env(tmp_path, private_redis.url, github_api.url)  # PI_RECEIVER_SPOOL_DIR left to its default
    port, health = env["RECEIVER_PORT"], env["PI_RECEIVER_HEALTH_ADDR"]
    receiver = ReceiverProcess(tmp_path, env)
    with redis.Redis.from_url(private_redis.url) as admin:
        try:
            await receiver.wait_for("receiver_started")
            admin.config_set("min-replicas-to-write", 1)  # the store answers a ping and refuses every write
            assert [await deliver(port, labeled("pi:fix", 40 + n), f"s-{n}") for n in (1, 2, 3)] == [202] * 3
            async with aiohttp.ClientSession() as session, session.get(f"http://{health}/readyz") as ready:
                assert ready.status == 200
                state = await ready.json()
            assert state["status"] == "spooling" and state["store"] == "refusing-writes"
            assert state["spool"]["entries"] == 3 and state["spool"]["bytes"] > 0
            metrics = await scrape(health)
            assert metrics[("pi_dispatch_receiver_spool_entries", ())] == 3
            assert metrics[("pi_dispatch_receiver_spool_total", (("outcome", "spooled"),))] == 3
            assert "NOREPLICAS" in (await receiver.wait_for("spool_replay_blocked", stream="stderr"))["reason"]
        finally:
            receiver.stop()  # SIGKILL: only the disk keeps the three
        assert len(list((tmp_path / "spool").glob("*.json"))) == 3
        assert await queued_jobs(private_redis.url) == {}
        admin.config_set("min-replicas-to-write", 0)
        admin_async = connect(private_redis.url)
        again = ReceiverProcess(tmp_path, env)
        try:
            assert (await again.wait_for("spool_loaded"))["entries"] == 3
            assert (await again.wait_for("spool_drained"))["replayed"] == 3
            replayed = [line["delivery"] for line in again.events() if line["event"] == "enqueued"]
            assert replayed == ["s-1", "s-2", "s-3"]
            async with aiohttp.ClientSession() as session, session.get(f"http://{health}/readyz") as ready:
                assert (ready.status, await ready.json()) == (
                    200,
                    {"status": "ok", "store": "ok", "spool": {"entries": 0, "bytes": 0}},
                )
            deadline = time.monotonic() + 10 * REPORT_EVERY_S  # its line for `top`, in the store
            while time.monotonic() < deadline:
                reported = {state.name: state for state in await read_receivers(admin_async, wall_ms())}
                if any(name.endswith(f":{port}") and not state.spool_entries for name, state in reported.items()):
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"no report of an empty spool: {reported}")
        finally:
            again.stop()
            await admin_async.aclose()
    assert set(await queued_jobs(private_redis.url)) == {"gh-s-1", "gh-s-2", "gh-s-3"}
    assert not list((tmp_path / "spool").glob("*.json"))
