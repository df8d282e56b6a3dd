"""Job containers on the machine's real Docker daemon, from the locally built example image."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.core.exitauth import image_capabilities, new_exit_key
from pi_dispatch.core.runusage import RunUsage
from pi_dispatch.infra.events import Recorder
from pi_dispatch.worker.prepare.jobspec import ContainerSpec
from pi_dispatch.worker.run.containers import (
    LABEL_FLEET,
    LABEL_HOST,
    LABEL_JOB,
    STOP_GRACE_S,
    ContainerRuntime,
    DockerUnavailable,
    ImageMissing,
    StopRequest,
)
from pi_dispatch.worker.run.output import AttemptOutput, Capped, Masker


def spec_for(tmp_path: Path, image: str, event: dict[str, Any], **changes: Any) -> ContainerSpec:
    job_dir = tmp_path / "job"
    job_dir.mkdir(exist_ok=True)
    (job_dir / "event.json").write_text(json.dumps(event))
    (job_dir / "job.json").write_text("{}")
    fields: dict[str, Any] = {
        "job_id": "gh-1",
        "attempt": 0,
        "image": image,
        "job_dir": job_dir,
        "environment": {"PI_JOB_ID": "gh-1"},
        "memory_mb": 64,
        "cpus": 0.5,
        "timeout_s": 60,
    }
    return ContainerSpec(**{**fields, **changes})


@pytest.fixture
def runtime() -> Any:
    runtime = ContainerRuntime.connect("containers-test", 2, Recorder())
    yield runtime
    runtime.close()


async def started_container(docker_client: Any, pause_s: float = 0.05) -> Any:
    """This test host's job container once Docker lists it (a ceiling of 100 looks)."""
    for _ in range(100):
        found = docker_client.containers.list(filters={"label": f"{LABEL_HOST}=containers-test"})
        if found:
            return found[0]
        await asyncio.sleep(pause_s)
    raise AssertionError("the job's container never ran")


def sink_for(path: Path, secrets: tuple[str, ...] = ()) -> AttemptOutput:
    sink = AttemptOutput(path, "attempt=1 host=containers-test", Masker(secrets), Capped(1 << 20), Capped(1 << 16))
    sink.open()
    return sink


@pytest.mark.docker
async def test_exit_codes_and_output_come_back(tmp_path: Path, job_image: str, runtime: ContainerRuntime) -> None:
    for code in (0, 1, 2, 7):
        sink = sink_for(tmp_path / f"{code}.log")
        end = await runtime.run(spec_for(tmp_path, job_image, {"demoExit": code}), output=sink, stop=StopRequest())
        sink.close()
        assert (end.exit_code, end.timed_out, end.aborted) == (code, False, False)
        assert b"job gh-1 attempt ? on ?: 15 bytes of event" in (tmp_path / f"{code}.log").read_bytes()


@pytest.mark.docker
async def test_output_is_followed_timestamped_and_masked_as_it_comes(
    tmp_path: Path, job_image: str, runtime: ContainerRuntime
) -> None:
    secret = "value-for-vault/deploy"
    sink = sink_for(tmp_path / "out.log", (secret,))
    spec = spec_for(tmp_path, job_image, {"demoLeak": 1, "demoTicks": 2}, environment={"DEPLOY_TOKEN": secret})
    running = asyncio.ensure_future(runtime.run(spec, output=sink, stop=StopRequest()))
    seen = b""
    for _ in range(100):  # the first tick is in the store's copy while the container still runs
        seen += sink.pending()
        if b"tick 1" in seen:
            break
        await asyncio.sleep(0.1)
    assert b"tick 1" in seen and not running.done()
    await running
    sink.close()
    text = (tmp_path / "out.log").read_bytes()
    assert text.startswith(b"#pi-dispatch attempt=1 host=containers-test\n")
    lines = text.splitlines()[1:]
    assert all(re.match(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", line) for line in lines), lines
    assert b"leaked: ***" in text and b"leaked in base64: ***" in text and b"token=***" in text
    assert secret.encode() not in text and base64.b64encode(secret.encode()) not in text
    assert b"vault%2Fdeploy" not in text and b"tick 2" in text


@pytest.mark.docker
async def test_no_container_is_left_behind(
    tmp_path: Path, job_image: str, runtime: ContainerRuntime, docker_client: Any
) -> None:
    for output in (sink_for(tmp_path / "kept.log"), None):
        await runtime.run(spec_for(tmp_path, job_image, {}), output=output, stop=StopRequest())
    await asyncio.sleep(1)  # an auto-removed container goes just after its exit is reported
    assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_HOST}=containers-test"}) == []


@pytest.mark.docker
async def test_a_job_killed_for_its_memory_limit_is_job_oom_killed_not_a_plain_exit(
    tmp_path: Path, job_image: str, runtime: ContainerRuntime
) -> None:
    from pi_dispatch.core.reasons import Reason
    from pi_dispatch.worker.run.outcomes import JobFailure, container_result

    end = await runtime.run(spec_for(tmp_path, job_image, {"demoMemoryMb": 200}), output=None, stop=StopRequest())
    assert (end.exit_code, end.oom_killed) == (137, True)
    with pytest.raises(JobFailure) as failed:
        container_result(end)
    assert (failed.value.reason, failed.value.exit_code, failed.value.retry) == (Reason.JOB_OOM_KILLED, 137, False)
    assert ("job_oom_killed", {"jobId": "gh-1", "memoryMb": 64, "exitCode": 137}) in runtime.log.events  # type: ignore[attr-defined]
    within = await runtime.run(spec_for(tmp_path, job_image, {"demoMemoryMb": 8}), output=None, stop=StopRequest())
    assert (within.exit_code, within.oom_killed) == (0, False)  # under the limit: a plain completion


@pytest.mark.docker
async def test_the_timeout_stops_the_container(tmp_path: Path, job_image: str, runtime: ContainerRuntime) -> None:
    spec = spec_for(tmp_path, job_image, {"demoSleep": 60}, timeout_s=1)
    end = await runtime.run(spec, output=None, stop=StopRequest())
    assert end.timed_out and not end.aborted and end.exit_code != 0


@pytest.mark.docker
async def test_an_abort_stops_the_container(tmp_path: Path, job_image: str, runtime: ContainerRuntime) -> None:
    stop = StopRequest()
    asyncio.get_running_loop().call_later(1.0, stop.request, STOP_GRACE_S)
    end = await runtime.run(spec_for(tmp_path, job_image, {"demoSleep": 60}), output=None, stop=stop)
    assert end.aborted and not end.timed_out


@pytest.mark.docker
async def test_labels_name_the_job_and_this_host(
    tmp_path: Path, job_image: str, runtime: ContainerRuntime, docker_client: Any
) -> None:
    running = asyncio.ensure_future(
        runtime.run(spec_for(tmp_path, job_image, {"demoSleep": 3}), output=None, stop=StopRequest())
    )
    found = await started_container(docker_client, 0.1)
    assert found.labels[LABEL_JOB] == "gh-1"
    assert found.attrs["HostConfig"]["Memory"] == 64 * 1024 * 1024
    assert found.attrs["HostConfig"]["NanoCpus"] == 500_000_000
    assert "no-new-privileges" in found.attrs["HostConfig"]["SecurityOpt"]
    assert not found.attrs["HostConfig"]["Privileged"]
    assert found.attrs["HostConfig"]["Init"] is True  # the stop signal reaches the job at once
    await running


async def test_a_missing_image_is_reported(tmp_path: Path, runtime: ContainerRuntime) -> None:
    with pytest.raises(ImageMissing):
        await runtime.run(spec_for(tmp_path, "pi-dispatch-no-such-image:0", {}), output=None, stop=StopRequest())
    assert await runtime.image_id("pi-dispatch-no-such-image:0") is None


def test_an_unreachable_daemon_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(DockerUnavailable, match="not reachable"):
        ContainerRuntime.connect("h", 1)


@pytest.mark.docker
async def test_the_boot_reaper_removes_this_hosts_strays_only(docker_client: Any, job_image: str) -> None:
    def stray(host: str, fleet: str) -> Any:
        return docker_client.containers.create(job_image, labels={LABEL_HOST: host, LABEL_FLEET: fleet})

    mine = stray("reaper-mine", "fleet-a")
    others = [stray("reaper-theirs", "fleet-a"), stray("reaper-mine", "fleet-b")]  # another host; another fleet
    try:
        runtime = ContainerRuntime.connect("reaper-mine", 1, Recorder(), fleet="fleet-a")
        assert await runtime.reap() == 1
        runtime.close()
        # sparse: the listing alone, never an inspect of each container, which races the other fleets sharing the
        # daemon (a scenario beside the suite removes its own finished jobs meanwhile)
        listed = docker_client.containers.list(all=True, sparse=True, filters={"label": LABEL_HOST})
        alive = {container.id for container in listed}
        assert mine.id not in alive and all(other.id in alive for other in others)
    finally:
        for other in others:
            other.remove(force=True)


@pytest.mark.docker
async def test_the_orphan_sweep_spares_a_host_its_view_missed_but_whose_row_says_it_is_live(
    docker_client: Any, job_image: str
) -> None:
    made = [
        docker_client.containers.create(job_image, labels={LABEL_HOST: host, LABEL_FLEET: "fleet-o"})
        for host in ("sweep-new-peer", "sweep-dead-peer")
    ]
    asked: list[set[str]] = []

    async def confirm(gone: set[str]) -> set[str]:  # as `fleet.registry.beating` answers: rows live now
        asked.append(gone)
        return {"sweep-new-peer"}

    try:
        runtime = ContainerRuntime.connect("sweep-me", 1, Recorder(), fleet="fleet-o")
        assert await runtime.sweep_orphans(set(), confirm) == 1  # the dead peer's only
        runtime.close()
        listed = docker_client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL_FLEET}=fleet-o"})
        left = {container.attrs["Labels"][LABEL_HOST] for container in listed}
        assert asked == [{"sweep-new-peer", "sweep-dead-peer"}]
        assert "sweep-new-peer" in left and "sweep-dead-peer" not in left
    finally:
        for container in made:
            with contextlib.suppress(Exception):
                container.remove(force=True)


@pytest.mark.docker
async def test_while_the_worker_keeps_the_output_docker_keeps_no_copy(
    tmp_path: Path, job_image: str, runtime: ContainerRuntime, docker_client: Any
) -> None:
    sink = sink_for(tmp_path / "kept.log")
    spec = spec_for(tmp_path, job_image, {"demoTicks": 2}, docker_log=False)
    running = asyncio.ensure_future(runtime.run(spec, output=sink, stop=StopRequest()))
    assert (await started_container(docker_client)).attrs["HostConfig"]["LogConfig"]["Type"] == "none"
    await running
    sink.close()
    assert b"tick 2" in (tmp_path / "kept.log").read_bytes()


@pytest.mark.docker
@pytest.mark.parametrize(("forge", "verified"), [(0, True), (1, False), (2, False)])
async def test_an_exit_auth_image_is_handed_its_key_on_stdin_and_signs_its_line_with_it(
    tmp_path: Path, job_image: str, runtime: ContainerRuntime, forge: int, verified: bool
) -> None:
    assert image_capabilities((await runtime.image_facts(job_image)).labels) >= {"exitAuth", "costCap"}
    key = new_exit_key()
    event = {"demoUsage": 1000, "demoCost": 250_000, "demoForge": forge}
    environment = {"PI_JOB_ID": "gh-1", "PI_EXIT_AUTH": "stdin", "PI_MAX_COST_MICROS": "500000"}
    spec = spec_for(tmp_path, job_image, event, environment=environment, stdin_key=key)
    end = await runtime.run(spec, output=None, stop=StopRequest())
    usage = RunUsage.of(end.stdout_tail, key)
    assert end.exit_code == 0 and key not in end.stdout_tail
    assert usage.exit_auth == ("verified" if verified else "unverified")
    if verified:
        assert usage.tokens is not None and usage.tokens["cost"] == 0.25 and usage.tokens["costCapMicros"] == 500_000
        assert usage.usage is not None and usage.usage["models"][0]["model"] == "demo-1"
    else:
        assert usage.tokens is None and RunUsage.of(end.stdout_tail).total_tokens == 1000  # there, but not believed


@pytest.mark.docker
async def test_a_job_has_no_ipv6_and_an_egress_job_gives_dockers_resolver_no_upstream(
    tmp_path: Path, job_image: str, runtime: ContainerRuntime, docker_client: Any
) -> None:
    """Issue 53 (M6, L7): a job's container is made with IPv6 off (Docker 20.10, Debian 12's, gives it a link-local
    address nothing filters), and an egress job's with its own loopback as the embedded resolver's upstream, where
    nothing answers (an affected daemon forwarded an internal network's lookups out, past the proxy)."""
    from pi_dispatch.worker.gates.jobnetwork import NO_RESOLVER
    from pi_dispatch.worker.prepare.jobspec import IPV6_OFF, NO_UPSTREAM

    resolver = tmp_path / "resolv.conf"
    resolver.write_text(NO_RESOLVER)
    spec = spec_for(tmp_path, job_image, {"demoSleep": 5}, resolver=resolver, network="bridge")
    running = asyncio.ensure_future(runtime.run(spec, output=None, stop=StopRequest()))
    found = await started_container(docker_client, 0.1)
    host_config = found.attrs["HostConfig"]
    assert host_config["Sysctls"] == IPV6_OFF and host_config["Dns"] == NO_UPSTREAM
    seen = found.exec_run(["sh", "-c", "cat /proc/sys/net/ipv6/conf/*/disable_ipv6 | sort -u; ip -6 addr"])
    assert seen.output.decode().split() == ["1"], seen.output  # every interface's IPv6 off, no IPv6 address
    await running
