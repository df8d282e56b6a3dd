"""Hostile input against the real services: generated jobs through a real worker, rows through the router and
`hosts`, mirrored records through `runs`, a logs dir on a full tmpfs. Each part prints its figures; none may show
a crash, a lost record or an overwritten one. The pure guards are property-tested on top.

The jobs part runs a few hundred seeded jobs here, every shape of `hostile_job` among them and every guard met
(`pytest -m bench` runs 10,000); `python bench/hostile.py` runs 10,000 through a worker process, with its figures."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from bullmq import Queue
from hypothesis import given
from hypothesis import strategies as st

from pi_dispatch.console.plaintext import plain
from pi_dispatch.core.jobbounds import MAX_DEPTH, job_refusal
from pi_dispatch.core.names import record_stem
from pi_dispatch.fleet.registry import InvalidRow, host_from_row
from pi_dispatch.testing.hostile import (
    GUARDS,
    Figures,
    account,
    hostile_jobs,
    hostile_records,
    hostile_rows,
    settled,
    unexpected,
)
from pi_dispatch.testing.jobs import RESOLVER, forge_job, write_script
from tests.support.helpers import run_cli
from tests.support.workers import finished_job, running_worker, settings_of, worker_env

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30,
)


@given(json_values)
def test_the_job_bounds_are_total(value: Any) -> None:
    job_refusal(value)  # never raises, whatever the job is


def test_the_job_bounds_refuse_what_they_say() -> None:
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    assert job_refusal({"flow": deep}) == "job-too-deep"
    assert job_refusal({"flow": "x" * 300_000}) == "job-too-large"
    assert job_refusal({"pad": ["y" * 200_000] * 12}) == "job-too-large"
    assert job_refusal({"k" * 300: 1}) == "job-too-large"
    assert job_refusal(forge_job(1)) is None


@given(st.text())
def test_shown_text_has_no_control_or_markup_effect(text: str) -> None:
    shown = plain(text, limit=10_000)
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", shown)


@given(st.lists(st.text(min_size=1, max_size=400), min_size=2, max_size=6, unique=True))
def test_record_stems_are_unique_and_bounded(ids: list[str]) -> None:
    stems = [record_stem(job_id) for job_id in ids]
    assert len(set(stems)) == len(ids) and all(len(stem) <= 117 for stem in stems)


@given(st.text(max_size=80), st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=6))
def test_any_row_reads_as_a_host_or_a_refusal(member: str, row: dict[str, str]) -> None:
    read = host_from_row(member, row, 1_800_000_000_000)
    assert isinstance(read, InvalidRow) or read["name"] == member


def show(capsys: pytest.CaptureFixture[str], *figures: Figures) -> None:
    with capsys.disabled():
        print()
        for each in figures:
            print(each.line())


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(3600)  # a ceiling for a hang: 300 jobs take about half a minute, 10,000 about a quarter hour
@pytest.mark.parametrize("jobs", [300, pytest.param(10_000, marks=pytest.mark.bench)])
async def test_hostile_jobs_through_a_real_worker(
    jobs: int,
    tmp_path: Path,
    valkey_url: str,
    client: aioredis.Redis,
    job_image: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    resolver = write_script(tmp_path / "resolver", RESOLVER)
    check = write_script(tmp_path / "check", "#!/bin/sh\nexit 0\n")
    env = worker_env(
        tmp_path, valkey_url, job_image, "target", PI_SECRET_PROFILES=f"prod:{resolver}", PI_CONCURRENCY="8"
    )  # 8 in hand at once, as 4 per queue were before pickup took a slot with each job
    env.update(PI_WAIT_PROFILES=f"ci:{check}", PI_JOB_TIMEOUT_MS="20000")
    queue = Queue("pi-jobs", {"connection": valkey_url})
    figures = Figures("jobs", tried=jobs + 3)
    try:
        async with running_worker(settings_of(env)) as w:
            ids = await hostile_jobs(queue, client, jobs)
            states = await settled(queue, ids, timeout_s=600 + jobs / 2)  # a ceiling only a hang reaches
            figures.crashes += w.task.done()
            after = await queue.add("github", forge_job(1), {"jobId": "gh-still-works"})
            figures.crashes += (await finished_job(queue, str(after.id))).returnvalue["outcome"] != "completed"
            await w.worker.recorder.settle()
        failures = [fields for event, fields in w.events.events if unexpected(event, fields)]
        figures.crashes += len(failures)
        account(figures, ids, states, w.logs_dir)
    finally:
        await queue.close()
    show(capsys, figures)
    assert (figures.crashes, figures.lost, figures.overwritten) == (0, 0, 0), failures[:5]
    for reason in GUARDS:
        assert figures.reasons[reason], reason  # each guard was met, or the suite proved nothing


@pytest.mark.redis
async def test_hostile_rows_and_records_through_the_operator_commands(
    client: aioredis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = await hostile_rows(client, 1_000, run_cli)
    records = await hostile_records(client, tmp_path / "logs", 1_000, run_cli)
    show(capsys, rows, records)
    assert rows.crashes == records.crashes == 0
    assert rows.reasons["invalid"] > 0 and records.reasons["skipped as malformed"] > 0


@pytest.fixture
def full_disk(tmp_path: Path) -> Any:
    """A 1 MiB tmpfs, filled up: where a worker's records cannot be written."""
    mount = tmp_path / "logs"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.fail("a full tmpfs needs root (`./dev test` runs as root)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    filler = mount / ".filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65_536)
                out.flush()
        except OSError:
            pass
    try:
        yield mount, filler
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.docker
@pytest.mark.redis
async def test_a_full_logs_disk_loses_no_record_across_a_stop_and_a_restart(
    tmp_path: Path,
    valkey_url: str,
    client: aioredis.Redis,
    job_image: str,
    full_disk: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pi_dispatch.core.keys import run_spill_key

    mount, filler = full_disk
    env = worker_env(tmp_path, valkey_url, job_image, "full")
    env["PI_LOGS_DIR"] = str(mount)
    queue = Queue("pi-jobs", {"connection": valkey_url})
    ids = [f"gh-full-{number}" for number in range(20)]
    try:
        async with running_worker(settings_of(env), beat_ms=500) as w:
            for job_id in ids:  # refused at once: no container, only a record to write
                await queue.add("github", {**forge_job(1), "image": "not-allowed:1"}, {"jobId": job_id})
            deadline = asyncio.get_running_loop().time() + 30
            while not w.worker.recorder.unwritten and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(2)  # long enough to take more, were it still taking work
            refused = [fields for event, fields in w.events.events if event == "run_record_failed"]
            assert refused and refused[0]["reason"] == "ENOSPC"  # said why, never the path
            unrecorded = len(w.worker.recorder.unwritten)
            assert 1 <= unrecorded <= 2  # what it had taken when the disk refused; nothing new since
            assert await queue.getJobCountByTypes("waiting") == 20 - unrecorded
        # stopped with the disk still full: the records are kept in the store, not lost with the process
        assert await client.hlen(run_spill_key("full")) == unrecorded
        async with running_worker(settings_of(env), beat_ms=500) as again:
            assert len(again.worker.recorder.unwritten) == unrecorded  # taken back at boot, still waiting for room
            filler.unlink()  # the disk has room again: the records are written, then the rest of the work runs
            states = await settled(queue, ids, 60)
            deadline = asyncio.get_running_loop().time() + 30
            while again.worker.recorder.unwritten and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)
            await again.worker.recorder.settle()
        assert "run_records_recovered" in again.events.names()
        assert await client.hlen(run_spill_key("full")) == 0
        figures = Figures("full-disk", tried=20)
        account(figures, ids, states, mount)
    finally:
        await queue.close()
    show(capsys, figures)
    assert (figures.crashes, figures.lost, figures.overwritten) == (0, 0, 0)
    assert figures.reasons["job-image-not-allowed"] == 20
