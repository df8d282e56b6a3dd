"""The worker's Docker socket proxy in front of the real daemon: a worker's whole container run passes through it
(create, attach with the key on stdin, logs, wait, remove), and each way past the earlier proxy's patterns over the
body's text is refused (issue 53, M2): a key in another case, an escaped key, a key in Unicode's folding, a
duplicate key, `..` or a link under the jobs folder, an inline seccomp profile, a body past a buffer, and a link
swapped in after the create."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.core.dockerjudge import CreateJudge
from pi_dispatch.infra.dockerproxy import DockerProxy, resolver, start_proxy
from pi_dispatch.infra.events import Recorder

pytestmark = [pytest.mark.docker]
DOCKER = "/var/run/docker.sock"
CEILING_S = 60.0


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Path, Path, Recorder]]:
    """The proxy on a socket of the test's own, in a thread of its own, for a jobs folder of the test's own."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    place = tmp_path / "docker.sock"
    log = Recorder()
    proxy = DockerProxy(CreateJudge(str(jobs), resolver), DOCKER, log)
    loop = asyncio.new_event_loop()
    stop = threading.Event()

    def run() -> None:
        async def serve() -> None:
            listening = await start_proxy(proxy, str(place), None)
            try:
                await asyncio.to_thread(stop.wait)
            finally:
                await listening.close()

        loop.run_until_complete(serve())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + CEILING_S
    while not place.exists():
        assert time.monotonic() < deadline, "the proxy never listened"
        time.sleep(0.01)
    try:
        yield place, jobs, log
    finally:
        stop.set()
        thread.join(CEILING_S)


def ask(place: Path, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("docker", timeout=CEILING_S)
    unix = socket.socket(socket.AF_UNIX)
    unix.connect(str(place))
    connection.sock = unix
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
        reply = connection.getresponse()
        raw = reply.read()
        return reply.status, json.loads(raw) if raw.startswith(b"{") else raw
    finally:
        connection.close()


def create(image: str, host: str) -> bytes:
    """A create body as text, so a key can be written as an attacker writes it."""
    return f'{{"Image": "{image}", "Cmd": ["true"], "HostConfig": {host}}}'.encode()


def remove(place: Path, answer: Any) -> None:
    if isinstance(answer, dict) and "Id" in answer:
        ask(place, "DELETE", f"/containers/{answer['Id']}?force=1")


def test_each_way_past_a_pattern_is_refused(proxied: tuple[Path, Path, Recorder], job_image: str) -> None:
    place, jobs, log = proxied
    (jobs / "escape").symlink_to("/")
    (jobs / "job-1").mkdir()
    bypasses = {
        "a key in another case": '{"binds": ["/:/host"]}',
        "an escaped key": '{"\\u0050rivileged": true}',
        "a key in Unicode's folding": '{"\\u017fecurityOpt": ["seccomp=unconfined"]}',
        "a key twice": '{"Privileged": false, "privileged": true}',
        "`..` under the jobs folder": f'{{"Binds": ["{jobs}/../../../:/host"]}}',
        "a link under the jobs folder": f'{{"Binds": ["{jobs}/escape:/host"]}}',
        "an inline seccomp profile": '{"SecurityOpt": ["seccomp={\\"defaultAction\\":\\"SCMP_ACT_ALLOW\\"}"]}',
        "added capabilities": '{"CapAdd": ["SYS_ADMIN"]}',
        "the host's pid namespace": '{"PidMode": "host"}',
        "another container's network": '{"NetworkMode": "container:abc"}',
        "a device": '{"Devices": [{"PathOnHost": "/dev/sda"}]}',
        "a mount": '{"Mounts": [{"Type": "bind", "Source": "/", "Target": "/host"}]}',
        "a log driver that ships off the host": '{"LogConfig": {"Type": "syslog"}}',
    }
    for why, host in bypasses.items():
        status, answer = ask(place, "POST", "/v1.41/containers/create", create(job_image, host))
        remove(place, answer)
        assert status == 403, (why, answer)
    padded = json.dumps({"Image": job_image, "Labels": {"pad": "x" * 65_536}, "HostConfig": {"Privileged": True}})
    assert ask(place, "POST", "/containers/create", padded.encode())[0] == 403  # past HAProxy's 16 KiB buffer
    with socket.socket(socket.AF_UNIX) as raw:  # a body declared past the bound: answered before it is read
        raw.settimeout(CEILING_S)
        raw.connect(str(place))
        raw.sendall(b"POST /containers/create HTTP/1.1\r\nHost: docker\r\nContent-Length: 2000000\r\n\r\n{")
        assert raw.recv(4096).startswith(b"HTTP/1.1 413 ")
    for method, path in (
        ("GET", "/images/json"),
        ("POST", "/containers/x/exec"),
        ("GET", "/containers/%2e%2e/json"),
        ("POST", "/build"),
        ("GET", "/v1.41/info"),
    ):
        assert ask(place, method, path)[0] == 403, path
    refused = [fields for event, fields in log.events if event == "docker_call_refused"]
    assert len(refused) == len(bypasses) + 1 + 5 and "x" * 100 not in json.dumps(refused)  # no body in a log


def test_a_link_swapped_in_after_the_create_is_refused_at_the_start(
    proxied: tuple[Path, Path, Recorder], job_image: str
) -> None:
    place, jobs, _ = proxied
    folder = jobs / "job-2"
    folder.mkdir()
    status, made = ask(place, "POST", "/containers/create", create(job_image, f'{{"Binds": ["{folder}:/job:ro"]}}'))
    assert status == 201, made
    try:
        folder.rmdir()
        folder.symlink_to("/")
        assert ask(place, "POST", f"/containers/{made['Id']}/start")[0] == 403
    finally:
        remove(place, made)


async def test_a_workers_whole_run_passes_through_it(
    proxied: tuple[Path, Path, Recorder], job_image: str, tmp_path: Path
) -> None:
    """The worker's own container run (create with its hardening, attach with the exit key on stdin, the signed
    line read back, wait, remove) through the proxy, and nothing refused on the way."""
    import docker

    from pi_dispatch.core.exitauth import new_exit_key
    from pi_dispatch.core.runusage import RunUsage
    from pi_dispatch.worker.prepare.jobspec import ContainerSpec
    from pi_dispatch.worker.run.containers import ContainerRuntime, StopRequest

    place, jobs, log = proxied
    job_dir = jobs / "gh-proxied"
    job_dir.mkdir()
    (job_dir / "event.json").write_text(json.dumps({"demoUsage": 100}))
    (job_dir / "job.json").write_text("{}")
    key = new_exit_key()
    spec = ContainerSpec(
        job_id="gh-proxied",
        attempt=0,
        image=job_image,
        job_dir=job_dir,
        environment={"PI_JOB_ID": "gh-proxied", "PI_EXIT_AUTH": "stdin"},
        memory_mb=64,
        cpus=0.5,
        timeout_s=60,
        read_only=True,
        stdin_key=key,
    )
    runtime = ContainerRuntime(docker.DockerClient(base_url=f"unix://{place}"), host="proxy-test")
    try:
        end = await runtime.run(spec, output=None, stop=StopRequest())
    finally:
        runtime.close()
    assert end.exit_code == 0, end
    said = RunUsage.of(end.stdout_tail, key)
    assert said.exit_auth == "verified", end.stdout_tail  # the key went in through the attach
    assert [fields for event, fields in log.events if event == "docker_call_refused"] == []


def test_a_relative_jobs_folder_or_a_group_that_is_not_there_is_exit_2(tmp_path: Path) -> None:
    from tests.support.helpers import run_cli_process

    said = run_cli_process("docker-proxy", "--socket", str(tmp_path / "s"), "--jobs-dir", "relative/jobs")
    assert said.returncode == 2 and "--jobs-dir" in said.stdout + said.stderr and "Traceback" not in said.stderr
    said = run_cli_process(
        "docker-proxy", "--socket", str(tmp_path / "s"), "--jobs-dir", str(tmp_path), "--group", "no-such-group-here"
    )
    assert said.returncode == 2 and "--group" in said.stdout + said.stderr


@pytest.mark.parametrize("carrier", ["/containers/no-such-container/attach?stream=1&stdin=1", "/containers/x/wait"])
def test_no_request_rides_behind_an_allowed_one(
    proxied: tuple[Path, Path, Recorder], job_image: str, docker_client: Any, carrier: str
) -> None:
    """A call asking to upgrade (an attach the daemon refuses, or a call that is no attach at all) with a privileged
    create sent right behind it on the same connection: the create never reaches the daemon."""
    import docker.errors

    place, _, _ = proxied
    name = "pi-dispatch-smuggled"
    smuggled = json.dumps({"Image": job_image, "HostConfig": {"Privileged": True}}).encode()
    second = (
        f"POST /containers/create?name={name} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(smuggled)}\r\n\r\n"
    ).encode() + smuggled
    first = (
        f"POST {carrier} HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n"
    )
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(CEILING_S)
        raw.connect(str(place))
        raw.sendall(first.encode() + second)
        answered = b""
        with contextlib.suppress(TimeoutError, OSError):
            raw.settimeout(5)
            while chunk := raw.recv(65_536):
                answered += chunk
    try:
        docker_client.containers.get(name).remove(force=True)
        raise AssertionError("the smuggled create reached the daemon")
    except docker.errors.NotFound:
        pass
    assert b" 201 " not in answered, answered[:300]


async def test_closing_the_proxy_ends_the_connections_it_is_serving(tmp_path: Path) -> None:
    """A connection still being served when the proxy stops (SIGTERM, a test's end) is ended with it, never left
    to the event loop's end, where it was destroyed pending with its sockets open."""
    place = tmp_path / "docker.sock"
    proxy = DockerProxy(CreateJudge(str(tmp_path), resolver), DOCKER, Recorder())
    listening = await start_proxy(proxy, str(place), None)
    reader, writer = await asyncio.open_unix_connection(str(place))
    try:
        writer.write(b"GET /version HTTP/1.1\r\nHost: docker\r\n")  # a head that never ends: served, waiting
        await writer.drain()
        while not listening.serving:
            await asyncio.sleep(0.01)
        await asyncio.wait_for(listening.close(), CEILING_S)
        assert listening.serving == set()
        assert await asyncio.wait_for(reader.read(), CEILING_S) == b""  # the proxy closed its end
    finally:
        writer.close()
