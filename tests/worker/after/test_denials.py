"""The proxy's refusal log, read as the worker reads it: each refusal given to the attempt whose container's address it
names, never to a job that had the address before, a line read before its job's address waiting for it, the record's
list bounded; the log followed across a partial line and a proxy that made it anew. Real files; the lines as squid
writes them (`infra/squid.DENIED_FORMAT`, proven against squid in tests/infra/test_squid.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pi_dispatch.infra.events import Recorder
from pi_dispatch.worker.after.denials import KEPT, UNCLAIMED_MS, DenialLog, DenialWatch

NOW_MS = 1_800_000_000_000


def line(at_ms: int, client: str, host: str, port: int = 443, method: str = "CONNECT") -> str:
    return f"{at_ms // 1000}.{at_ms % 1000:03d} {client} {method} {host} {port}\n"


class Clock:
    def __init__(self) -> None:
        self.ms = NOW_MS

    def __call__(self) -> int:
        return self.ms


async def no_address(container_id: str) -> tuple[str, int | None] | None:
    return None


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    path = tmp_path / "denied.log"
    path.write_text(line(NOW_MS - 5_000, "172.30.0.2", "before-the-worker.example"))
    return path


def watch_of(path: Path, clock: Clock, events: Recorder | None = None) -> DenialWatch:
    log = DenialLog(path)
    log.start()  # what the log held before is no running job's
    return DenialWatch(log, no_address, now_ms=clock, log=events or Recorder())


async def test_each_refusal_is_its_own_jobs_and_a_line_before_the_worker_is_nobodys(log_path: Path) -> None:
    clock, events = Clock(), Recorder()
    watch = watch_of(log_path, clock, events)
    watch.watch("gh-a", "172.30.0.2", "prod", clock.ms)
    watch.watch("gh-b", "172.30.0.3", "", clock.ms)
    with log_path.open("a") as log:
        log.write(line(NOW_MS + 10, "172.30.0.2", "paste.example"))
        log.write(line(NOW_MS + 20, "172.30.0.3", "exfil.example", 80, "GET"))
        log.write("not a line squid writes\n")
        log.write(line(NOW_MS + 30, "172.30.0.2", "paste.example", 8443))
    a = await watch.ended("gh-a", None)
    assert a.count == 2 and [(one.host, one.port) for one in a.kept] == [
        ("paste.example", 443),
        ("paste.example", 8443),
    ]
    b = await watch.ended("gh-b", None)
    assert b.as_record()["count"] == 1 and b.as_record()["first"][0]["method"] == "GET"
    told = [(fields["jobId"], fields["profile"], fields["host"]) for name, fields in events.events]
    assert told == [("gh-a", "prod", "paste.example"), ("gh-b", "", "exfil.example"), ("gh-a", "prod", "paste.example")]


async def test_an_address_an_ended_job_had_names_the_new_job_only_from_its_start(log_path: Path) -> None:
    clock = Clock()
    watch = watch_of(log_path, clock)
    with log_path.open("a") as log:  # the old job's last refusal, written a moment before its container ended
        log.write(line(NOW_MS - 40, "172.30.0.9", "old-job.example"))  # and unread until the new job's end
    watch.watch("gh-new", "172.30.0.9", "", NOW_MS)  # Docker gave the address to a new container at once
    with log_path.open("a") as log:
        log.write(line(NOW_MS + 5, "172.30.0.9", "new-job.example"))
    found = await watch.ended("gh-new", None)
    assert [one.host for one in found.kept] == ["new-job.example"]


async def test_an_old_jobs_end_leaves_the_watch_of_a_job_given_its_address_while_it_ended(log_path: Path) -> None:
    clock = Clock()
    watch = watch_of(log_path, clock)
    watch.watch("gh-old", "172.30.0.9", "", NOW_MS - 5_000)
    ending = asyncio.ensure_future(watch.ended("gh-old", None))  # it settles a moment before letting the address go
    await asyncio.sleep(0)
    watch.watch("gh-new", "172.30.0.9", "", NOW_MS)  # meanwhile Docker gave the address to a new container
    await ending
    with log_path.open("a") as log:
        log.write(line(NOW_MS + 5, "172.30.0.9", "new-job.example"))
    found = await watch.ended("gh-new", None)
    assert [one.host for one in found.kept] == ["new-job.example"]  # the old job's end did not unwatch it


async def test_a_containers_refusals_count_from_when_docker_says_it_started_not_from_when_the_worker_heard(
    log_path: Path,
) -> None:
    """A starved worker hears that a start returned late; the job's first request may be older than that."""
    clock = Clock()

    async def started_earlier(container_id: str) -> tuple[str, int | None]:
        return "172.30.0.7", NOW_MS - 300  # Docker's StartedAt: 300 ms before the worker's clock read

    log = DenialLog(log_path)
    log.start()
    watch = DenialWatch(log, started_earlier, now_ms=clock)
    with log_path.open("a") as written:
        written.write(line(NOW_MS - 301, "172.30.0.7", "before-its-start.example"))  # its address's last holder's
        written.write(line(NOW_MS - 200, "172.30.0.7", "first-request.example"))
    await watch.started("gh-quick", "")("c0ffee")
    found = await watch.ended("gh-quick", None)
    assert [one.host for one in found.kept] == ["first-request.example"]


async def test_a_line_read_before_its_jobs_address_waits_for_it_then_expires(log_path: Path) -> None:
    clock, events = Clock(), Recorder()
    watch = watch_of(log_path, clock, events)
    watch.watch("gh-other", "172.30.0.4", "", clock.ms)
    with log_path.open("a") as log:
        log.write(line(NOW_MS + 1, "172.30.0.5", "early.example"))  # before gh-late's address was read
        log.write(line(NOW_MS + 2, "172.30.0.6", "orphan.example"))
    await watch.ended("gh-other", None)  # another attempt's end reads the log
    watch.watch("gh-late", "172.30.0.5", "", clock.ms)
    assert [one.host for one in (await watch.ended("gh-late", None)).kept] == ["early.example"]
    clock.ms += UNCLAIMED_MS + 10  # past the orphan line's wait
    await watch.read()
    assert (
        "egress_refused",
        {"jobId": None, "profile": "", "method": "CONNECT", "host": "orphan.example", "port": 443},
    ) in events.events


async def test_the_record_keeps_the_first_refusals_and_counts_them_all(log_path: Path) -> None:
    watch = watch_of(log_path, Clock())
    watch.watch("gh-busy", "172.30.0.7", "", NOW_MS)
    with log_path.open("a") as log:
        log.writelines(line(NOW_MS + number, "172.30.0.7", f"host{number}.example") for number in range(KEPT + 5))
    found = await watch.ended("gh-busy", None)
    assert found.count == KEPT + 5 and len(found.as_record()["first"]) == KEPT  # type: ignore[arg-type]


def test_the_log_is_followed_across_a_partial_line_and_a_proxy_that_made_it_anew(tmp_path: Path) -> None:
    path = tmp_path / "denied.log"
    log = DenialLog(path)
    log.start()
    assert log.new_lines() == []  # no proxy yet: nothing, no error
    path.write_text("1.000 172.30.0.2 CONNECT a.example 443\n1.001 172.30.0.2 CONN")
    assert log.new_lines() == ["1.000 172.30.0.2 CONNECT a.example 443"]
    with path.open("a") as handle:
        handle.write("ECT b.example 443\n")
    assert log.new_lines() == ["1.001 172.30.0.2 CONNECT b.example 443"]
    path.unlink()
    path.write_text("2.000 172.30.0.3 GET c.example 80\n")  # the proxy's restart made it anew
    assert log.new_lines() == ["2.000 172.30.0.3 GET c.example 80"]


async def test_a_request_before_a_late_started_at_is_the_jobs_when_nobody_else_held_the_address(
    log_path: Path,
) -> None:
    """A loaded daemon records StartedAt after the process began: its first request can be older than that. A fresh
    address (no job here held it since the watch began) and one its last job here let go before count it; an
    address whose old job has not ended yet does not."""
    clock = Clock()
    watch = watch_of(log_path, clock)
    clock.ms += 10_000  # the worker has run a while
    with log_path.open("a") as log:
        log.write(line(clock.ms - 500, "172.30.0.5", "first-request.example"))  # before StartedAt, as Docker says it
    watch.watch("gh-quick", "172.30.0.5", "", clock.ms)
    assert [one.host for one in (await watch.ended("gh-quick", None)).kept] == ["first-request.example"]
    clock.ms += 500  # let go 500 ms ago: within the slack, so that is the floor
    with log_path.open("a") as log:
        log.write(line(clock.ms - 600, "172.30.0.5", "old-jobs-last.example"))  # before its last job let it go
        log.write(line(clock.ms - 100, "172.30.0.5", "next-first.example"))
    watch.watch("gh-next", "172.30.0.5", "", clock.ms)
    assert [one.host for one in (await watch.ended("gh-next", None)).kept] == ["next-first.example"]
