"""Workers with egress on, against a real redis-server, real Docker, the egress network's firewall rules and Debian's
squid on its gateway, with a stand-in internet on documentation addresses: a job reaches the allowlist's names
through the proxy and nothing else, and a host whose proxy does not answer takes no job until it does (its jobs
held, unspent, then run)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue

from pi_dispatch.core.egress import PROXY_PORT, parse_allowlist
from pi_dispatch.core.egressprofiles import EgressNetwork as ProfileNetwork
from pi_dispatch.core.keys import host_row_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.core.reasons import Reason
from pi_dispatch.infra.squid import Listener
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.worker.after.history import read_attempt_records
from pi_dispatch.worker.gates.egressgate import EgressDown, EgressGate
from pi_dispatch.worker.host.egressproxy import egress_plan
from tests.support.egress import (
    GREETING,
    EgressNetwork,
    StandIn,
    egress_network,
    running_squid,
    stand_in_internet,
)
from tests.support.helpers import run_cli_process
from tests.support.workers import CEILING_S, RunningWorker, finished_job, running_worker, settings_of, worker_env

pytestmark = [pytest.mark.redis, pytest.mark.docker, pytest.mark.squid, pytest.mark.slow]
SUBNET = "203.0.113.128/26"  # its own block of the stand-in internet
# A refusal is attributed while its job runs and for SETTLE_S after: squid writes its line when the connection ends,
# which a starved machine (CI runs the molecule scenarios beside the suite) delays by more than a second. A job that
# exits the moment it is refused can thus end before its refusal is written; a real one runs on for minutes. These
# run on for 3 s after their fetch, as a real job would, so what is proven is the attribution, not a race.
LINGER = {"demoSleep": 3}


@pytest.fixture
def network(docker_client: Any) -> Iterator[EgressNetwork]:
    with egress_network(docker_client) as made:
        yield made


@pytest.fixture
def stand_in(docker_client: Any, job_image: str) -> Iterator[StandIn]:
    with stand_in_internet(docker_client, job_image, SUBNET) as made:
        yield made


def egress_env(
    tmp_path: Path, valkey_url: str, image: str, network: EgressNetwork, state: Path | None = None
) -> dict[str, str]:
    extra = {"PI_EGRESS_STATE_DIR": str(state)} if state is not None else {}
    return worker_env(tmp_path, valkey_url, image, "walled", PI_EGRESS="1", PI_JOB_NETWORK=network.name, **extra)


def output_of(worker: RunningWorker, job_id: str) -> str:
    return (worker.worker.settings.logs_dir / f"{record_stem(job_id)}.log").read_text()


async def until_event(worker: RunningWorker, name: str) -> None:
    deadline = asyncio.get_running_loop().time() + CEILING_S
    while name not in worker.events.names():
        assert asyncio.get_running_loop().time() < deadline, f"no {name}: {worker.events.names()}"
        await asyncio.sleep(0.1)


async def test_a_job_reaches_the_listed_names_through_the_proxy_and_nothing_else(
    tmp_path: Path,
    valkey_url: str,
    job_image: str,
    squid_binary: str,
    network: EgressNetwork,
    stand_in: StandIn,
    queue: Queue,
) -> None:
    fetches = {
        "gh-allowed": {"demoFetch": "http://allowed.example/", **LINGER},
        "gh-denied": {"demoFetch": "http://denied.example/", **LINGER},
        "gh-literal": {"demoFetch": f"http://{stand_in.allowed}/", **LINGER},  # an IP literal is no listed name
        "gh-direct": {"demoFetch": f"http://{stand_in.allowed}/", "demoNoProxy": 1, **LINGER},  # around the proxy
    }
    with running_squid(squid_binary, stand_in, network.gateway, port=PROXY_PORT) as proxy:
        env = egress_env(tmp_path, valkey_url, job_image, network, proxy.state)
        env_file = tmp_path / "worker.env"
        env_file.write_text("".join(f"{name}={value}\n" for name, value in env.items()))
        checked = run_cli_process("config", "check", "--live", "--json", "--env-file", str(env_file))  # as the role
        [egress] = [check for check in json.loads(checked.stdout)["checks"] if check["check"] == "egress proxy"]
        assert egress["ok"] and network.name in egress["detail"], egress
        async with running_worker(settings_of(env)) as w:
            for number, (job_id, trigger) in enumerate(fetches.items()):
                await queue.add("github", forge_job(number, trigger=trigger), {"jobId": job_id})
            for job_id in fetches:
                assert (await finished_job(queue, job_id)).returnvalue["outcome"] == "completed"
            said = {job_id: output_of(w, job_id) for job_id in fetches}
            logs_dir = w.worker.settings.logs_dir
            [*recorded] = (read_attempt_records(logs_dir, job_id)[-1].get("egressRefused") for job_id in fetches)
            told = [fields for name, fields in w.events.events if name == "egress_refused"]
            seen = [(name, fields) for name, fields in w.events.events if "egress" in name or name == "job_done"]
    assert f"fetched http://allowed.example/: {GREETING}" in said["gh-allowed"], said
    for job_id in ("gh-denied", "gh-literal"):  # the proxy's answer: forbidden
        assert "fetch refused" in said[job_id] and "403" in said[job_id] and GREETING not in said[job_id], said
    # no route but the proxy: the connection is refused at once by the host's rule, not left to time out
    assert "fetch refused" in said["gh-direct"] and "refused" in said["gh-direct"].split("fetch refused")[1], said
    # each refusal of the proxy is its attempt's: in its record, its output and the worker's log
    allowed, denied, literal, direct = recorded
    assert allowed == {"count": 0, "first": []} and direct == {"count": 0, "first": []}  # the firewall's: no proxy's
    assert denied["count"] == 1 and denied["first"][0] | {"at": None} == {
        "host": "denied.example", "port": 80, "method": "GET", "at": None
    }, (denied, seen)  # fmt: skip
    assert literal["count"] == 1 and literal["first"][0]["host"] == stand_in.allowed, literal
    assert "egress proxy refused GET denied.example:80" in said["gh-denied"], said
    assert sorted((fields["jobId"], fields["host"]) for fields in told) == [
        ("gh-denied", "denied.example"), ("gh-literal", stand_in.allowed)
    ], told  # fmt: skip


async def test_a_host_whose_proxy_does_not_answer_holds_its_jobs_unspent_then_runs_them(
    tmp_path: Path,
    valkey_url: str,
    client: aioredis.Redis,
    job_image: str,
    squid_binary: str,
    network: EgressNetwork,
    stand_in: StandIn,
    queue: Queue,
) -> None:
    env = egress_env(tmp_path, valkey_url, job_image, network)
    async with running_worker(settings_of(env), beat_ms=300) as w:
        await until_event(w, "host_unhealthy")  # found at boot: no job is taken only to go back
        reason = (await client.hget(host_row_key("walled"), "unhealthy") or b"").decode()
        assert reason.startswith(Reason.EGRESS_PROXY_STOPPED) and "fix: start the egress proxy" in reason, reason
        await queue.add("github", forge_job(1, trigger={"demoFetch": "http://allowed.example/"}), {"jobId": "gh-held"})
        await asyncio.sleep(1.5)  # five beats: the host still takes nothing
        job = await queue.getJob("gh-held")
        assert await queue.getJobState("gh-held") in ("waiting", "delayed") and job.attemptsMade == 0
        assert not (w.worker.settings.logs_dir / f"{record_stem('gh-held')}.json").exists()  # no attempt recorded
        with running_squid(squid_binary, stand_in, network.gateway, port=PROXY_PORT):
            done = await finished_job(queue, "gh-held")
            assert done.returnvalue["outcome"] == "completed" and done.attemptsMade == 1
            assert f"fetched http://allowed.example/: {GREETING}" in output_of(w, "gh-held")
        assert "host_healthy" in w.events.names()


async def test_a_missing_or_open_network_is_the_hosts_fault_named_with_its_fix(
    docker_client: Any, tmp_path: Path
) -> None:
    missing = EgressGate(docker_client, ("pi-egress-never-made",), tmp_path / "resolv.conf")
    with pytest.raises(EgressDown, match=f"^{Reason.EGRESS_PROXY_MISSING}: no Docker network pi-egress-never-made"):
        await missing.way("pi-egress-never-made")
    open_network = EgressGate(docker_client, ("bridge",), tmp_path / "resolv.conf")  # reaches past any proxy
    fault = await open_network.fault()
    assert fault is not None and fault.startswith(Reason.EGRESS_PROXY_MISSING) and "not internal" in fault
    assert str(tmp_path) not in fault  # names only


async def test_a_profiles_own_list_is_its_jobs_way_out_an_empty_one_no_network_and_differing_ones_a_refusal(
    tmp_path: Path,
    valkey_url: str,
    job_image: str,
    squid_binary: str,
    docker_client: Any,
    network: EgressNetwork,
    stand_in: StandIn,
    queue: Queue,
) -> None:
    # `narrow` reaches the wide.example names only (a name of the test's own makes its list, so its network, unique);
    # `sealed` lists nothing: offline
    narrow = parse_allowlist(f".wide.example\nt{uuid.uuid4().hex[:8]}.example\n", "test")
    (tmp_path / "narrow.conf").write_text("".join(f"{d.written}\n" for d in narrow.destinations))
    (tmp_path / "sealed.conf").write_text("# offline\n")
    resolver = write_script(tmp_path / "resolver", RESOLVER)
    check = write_script(tmp_path / "check", "#!/bin/sh\nexit 0\n")
    profiles = {
        "PI_SECRET_PROFILES": f"narrow:{resolver},sealed:{resolver}",
        "PI_WAIT_PROFILES": f"sealed:{check}",
        "PI_EGRESS_PROFILES": f"narrow:{tmp_path}/narrow.conf,sealed:{tmp_path}/sealed.conf",
    }
    own = ProfileNetwork.of(narrow)
    jobs = {
        "gh-host-list": ({}, "allowed.example"),  # the host's list
        "gh-narrow-in": ({"secretsProfile": "narrow"}, "wide.example"),
        "gh-narrow-out": ({"secretsProfile": "narrow"}, "allowed.example"),  # on the host's list, not on its own
        "gh-sealed": ({"secretsProfile": "sealed"}, "allowed.example"),
    }
    differ = {"secretsProfile": "narrow", "waitFor": [{"profile": "sealed"}]}
    with (
        egress_network(docker_client, own.name, own.bridge) as narrow_network,
        running_squid(
            squid_binary, stand_in, network.gateway, port=PROXY_PORT, others=[Listener(narrow_network.gateway, narrow)]
        ) as proxy,
    ):
        settings = settings_of(egress_env(tmp_path, valkey_url, job_image, network, proxy.state) | profiles)
        plan = egress_plan(settings)
        assert plan.networks() == (own,) and plan.network_names() == (network.name, own.name)
        async with running_worker(settings, egress_plan=plan) as w:
            for number, (job_id, (fields, name)) in enumerate(jobs.items()):
                job = forge_job(number, trigger={"demoFetch": f"http://{name}/", **LINGER}, **fields)
                await queue.add("github", job, {"jobId": job_id})
            await queue.add("github", forge_job(9, **differ), {"jobId": "gh-differ"})
            ended = {job_id: await finished_job(queue, job_id) for job_id in [*jobs, "gh-differ"]}
            said = {job_id: output_of(w, job_id) for job_id in jobs}
            records = {job_id: read_attempt_records(w.worker.settings.logs_dir, job_id)[-1] for job_id in jobs}
    assert all(ended[job_id].returnvalue["outcome"] == "completed" for job_id in jobs), ended
    assert ended["gh-differ"].returnvalue == {"outcome": "policy", "reason": Reason.EGRESS_PROFILES_DIFFER} | {
        key: value for key, value in ended["gh-differ"].returnvalue.items() if key not in ("outcome", "reason")
    }  # refused before any spend: no container, no record of a run
    assert f"fetched http://allowed.example/: {GREETING}" in said["gh-host-list"], said
    assert f"fetched http://wide.example/: {GREETING}" in said["gh-narrow-in"], said
    assert "fetch refused" in said["gh-narrow-out"] and "403" in said["gh-narrow-out"], said
    assert records["gh-narrow-out"]["egressRefused"]["first"][0]["host"] == "allowed.example", records
    # offline: no proxy named to it and no network to reach one; nothing for the proxy to refuse
    assert "fetch refused" in said["gh-sealed"] and GREETING not in said["gh-sealed"], said
    assert records["gh-sealed"].get("egressRefused") in (None, {"count": 0, "first": []}), records
