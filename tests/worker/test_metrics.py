"""The worker's and the receiver's Prometheus metrics, scraped over HTTP from real processes after real jobs."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from bullmq import Queue
from prometheus_client.parser import text_string_to_metric_families

from pi_dispatch import __version__
from pi_dispatch.demo.store import free_port
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from pi_dispatch.testing.services import UNCAPPED
from pi_dispatch.worker.metrics import QUEUE_STATES, BoundedLabels, WorkerMetrics
from tests.support.workers import finished_job, job_in_state, running_worker, settings_of, worker_env

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(address: str) -> Samples:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def by_name(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


def test_without_an_address_the_worker_keeps_no_metrics() -> None:
    off = WorkerMetrics(enabled=False)
    seen: list[str] = []
    log = off.observe(lambda event, fields: seen.append(event))
    log("job_done", {"queue": "pi-jobs", "outcome": "completed"})
    with off.timed_gate("resolver"):
        off.ran("completed", 1.0)
    assert seen == ["job_done"] and off.registry is None


def test_label_values_a_job_chooses_are_bounded_and_well_formed() -> None:
    labels = BoundedLabels(3)
    assert [labels.of("flow", name) for name in ("a", "b", "c", "d", "a")] == ["a", "b", "c", "other", "a"]
    assert [labels.of("model", value) for value in ("x y", "", "<script>", 7, "anthropic/claude-x")] == [
        "other", "other", "other", "other", "anthropic/claude-x",
    ]  # fmt: skip


def test_each_attempts_end_is_counted_once_under_its_outcome() -> None:
    metrics = WorkerMetrics()
    log = metrics.observe(lambda event, fields: None)
    for event, fields in (
        ("job_done", {"queue": "pi-jobs", "outcome": "completed", "reason": None}),
        ("job_done", {"queue": "pi-jobs", "outcome": "policy", "reason": "secret-profile-unknown"}),
        ("job_unreadable", {"queue": "pi-jobs", "reason": "job-data-unreadable"}),
        ("job_failed", {"queue": "pi-jobs@a", "reason": "container-failed"}),
        ("job_held", {"queue": "pi-jobs"}),
        ("job_put_back", {"queue": "pi-jobs"}),
        ("run_mirror_failed", {}),
        ("worker_started", {}),
    ):
        log(event, fields)
    registry = metrics.registry
    value = registry.get_sample_value
    assert value("pi_dispatch_jobs_total", {"queue": "pi-jobs", "outcome": "completed", "reason": ""}) == 1
    refused = {"queue": "pi-jobs", "outcome": "refused"}
    assert value("pi_dispatch_jobs_total", {**refused, "reason": "secret-profile-unknown"}) == 1
    assert value("pi_dispatch_jobs_total", {**refused, "reason": "job-data-unreadable"}) == 1
    assert value("pi_dispatch_jobs_total", {"queue": "pi-jobs@a", "outcome": "failed", "reason": "container-failed"})
    assert value("pi_dispatch_jobs_total", {"queue": "pi-jobs", "outcome": "held", "reason": ""}) == 1
    assert value("pi_dispatch_jobs_total", {"queue": "pi-jobs", "outcome": "put_back", "reason": ""}) == 1
    assert value("pi_dispatch_mirror_failures_total") == 1


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_a_worker_serves_its_counts_gauges_and_timings_over_http(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    address = f"127.0.0.1:{free_port()}"
    resolver = write_script(tmp_path / "prod-resolver", RESOLVER)
    red = write_script(tmp_path / "ci-check", "#!/bin/sh\nexit 3\n")  # never green: the job is held
    env = worker_env(
        tmp_path,
        valkey_url,
        job_image,
        "metered",
        PI_METRICS_ADDR=address,
        PI_SECRET_PROFILES=f"prod:{resolver}",
        PI_WAIT_PROFILES=f"ci:{red}",
    )
    once = {"attempts": 1}
    shared, own = Queue("pi-jobs", {"connection": valkey_url}), Queue("pi-jobs@metered", {"connection": valkey_url})
    started = time.time()
    try:
        async with running_worker(settings_of(env), beat_ms=300) as running:
            await own.add("github", forge_job(1, trigger={"demoUsage": 600}), {"jobId": "gh-ok", **once})
            secret = forge_job(2, secretsProfile="prod", secrets={"DEPLOY_TOKEN": "vault/deploy"})
            await own.add("github", secret, {"jobId": "gh-secret", **once})
            await shared.add("github", forge_job(3, trigger={"demoExit": 1}), {"jobId": "gh-fail", **once})
            await shared.add("github", forge_job(4, secretsProfile="absent"), {"jobId": "gh-refused", **once})
            await shared.add("github", forge_job(5, waitFor=[{"profile": "ci"}]), {"jobId": "gh-held", **once})
            for queue, job_id in ((own, "gh-ok"), (own, "gh-secret"), (shared, "gh-fail"), (shared, "gh-refused")):
                await finished_job(queue, job_id)
            await job_in_state(shared, "gh-held", ("delayed",))
            deadline = time.monotonic() + 60
            while True:  # queue depths are read once a beat: until one read after the jobs settled
                samples = scrape(address)
                depth = by_name(samples, "pi_dispatch_queue_jobs")
                settled = [depth.get((("queue", "pi-jobs"), ("state", state))) for state in ("delayed", "failed")]
                if settled == [1, 1] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            events = [event for event, _ in running.events.events]
    finally:
        await shared.close()
        await own.close()

    jobs = by_name(samples, "pi_dispatch_jobs_total")
    outcomes = Counter[tuple[str, str]]()
    for labels, value in jobs.items():
        named = dict(labels)
        outcomes[(named["queue"], named["outcome"])] += int(value)
    assert outcomes == {
        ("pi-jobs@metered", "completed"): 2,
        ("pi-jobs", "failed"): 1,
        ("pi-jobs", "refused"): 1,
        ("pi-jobs", "held"): 1,
    }, jobs
    assert jobs[(("outcome", "refused"), ("queue", "pi-jobs"), ("reason", "secret-profile-unknown"))] == 1
    assert jobs[(("outcome", "failed"), ("queue", "pi-jobs"), ("reason", "container-failed"))] == 1
    assert events.count("job_done") + events.count("job_failed") == 4  # the log and the counts agree

    durations = by_name(samples, "pi_dispatch_job_duration_seconds_count")
    assert durations == {(("outcome", "completed"),): 2, (("outcome", "failed"),): 1}
    assert by_name(samples, "pi_dispatch_job_duration_seconds_sum")[(("outcome", "completed"),)] > 0
    gates = by_name(samples, "pi_dispatch_gate_duration_seconds_count")
    assert gates[(("gate", "wait_check"),)] >= 1 and gates[(("gate", "resolver"),)] >= 3
    assert not [name for name, _ in samples if name.endswith("_created")]  # one series per count, not two
    labelled = [value for _, labels in samples for _, value in labels]
    assert labelled and not [value for value in labelled if " " in value]  # label values a query can name bare
    build = dict(next(labels for name, labels in samples if name == "pi_dispatch_build_info"))
    assert build == {"component": "worker", "version": __version__, "reference_version": "1.8.0"}
    assert samples[("pi_dispatch_running_jobs", ())] == 0 and samples[("pi_dispatch_slots", ())] == 2
    assert started <= samples[("pi_dispatch_last_beat_timestamp_seconds", ())] <= time.time()
    assert started <= samples[("pi_dispatch_last_poll_timestamp_seconds", ())] <= time.time()
    assert samples[("pi_dispatch_mirror_failures_total", ())] == 0
    assert samples[("pi_dispatch_store_is_primary", ())] == 1  # the suite's store: a primary with no replica
    assert samples[("pi_dispatch_store_replicas_in_sync", ())] == 0 and samples[("pi_dispatch_store_promoted", ())] == 0
    depth = by_name(samples, "pi_dispatch_queue_jobs")
    assert {(dict(labels)["queue"], dict(labels)["state"]) for labels in depth} == {
        (queue, state) for queue in ("pi-jobs", "pi-jobs@metered") for state in QUEUE_STATES
    }
    assert depth[(("queue", "pi-jobs"), ("state", "delayed"))] == 1
    assert depth[(("queue", "pi-jobs"), ("state", "failed"))] == 1
    assert depth[(("queue", "pi-jobs@metered"), ("state", "waiting"))] == 0
    # the example image's exit line has a per-model ledger: its one row names the model
    assert by_name(samples, "pi_dispatch_run_tokens_total") == {(("flow", "triage"), ("model", "demo/demo-1")): 600}
    assert by_name(samples, "pi_dispatch_run_cost_dollars_total") == {
        (("flow", "triage"), ("model", "demo/demo-1")): 0.0123
    }
    used = by_name(samples, "pi_dispatch_limit_used")
    assert used[(("ledger", "budget"), ("window", "day"))] == 3  # three containers started; the refused one did not
    assert by_name(samples, "pi_dispatch_limit_cap")[(("ledger", "budget"), ("window", "day"))] == int(UNCAPPED)
    with pytest.raises(OSError):  # the endpoint closes with the worker
        scrape(address)


@pytest.mark.docker
@pytest.mark.redis
async def test_a_taken_metrics_port_costs_the_metrics_never_the_worker(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, job_image: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = worker_env(tmp_path, valkey_url, job_image, "metered", PI_METRICS_ADDR=f"127.0.0.1:{port}")
        async with running_worker(settings_of(env)) as running:
            unavailable = dict(running.events.events).get("metrics_unavailable")
    assert unavailable is not None and "in use" in str(unavailable["reason"]).lower()
    assert "worker_stopped" in running.events.names()
