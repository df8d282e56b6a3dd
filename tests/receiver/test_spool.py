"""The receiver's spool on a real filesystem: durable, ordered, bounded, one entry per delivery, and a file it did
not write (or one cut short) never stops a boot."""

from __future__ import annotations

import asyncio
import json
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.infra.events import Recorder
from pi_dispatch.receiver.spool import SET_ASIDE, Spool, SpoolFull
from pi_dispatch.testing.services import RedisServer
from tests.support.receiving import Served, queued_jobs, rules_of, served

JOB = {"repo": "octo/repo", "target": {"type": "issue", "number": 42}, "trigger": {"deliveryId": "d-1"}}


def spool_at(folder: Path, max_bytes: int = 1_000_000) -> tuple[Spool, Recorder]:
    log = Recorder()
    return Spool(folder, max_bytes, log, clock=lambda: 1_700_000_000.0).load(), log


def test_entries_survive_a_new_spool_in_the_order_they_came(tmp_path: Path) -> None:
    first, _ = spool_at(tmp_path / "spool")
    for number in range(1, 13):  # past 9, so a name sorted as text would come out of order
        assert first.put("github", {**JOB, "n": number}, f"d-{number}") is not None
    second, log = spool_at(tmp_path / "spool")
    assert [entry.job["n"] for entry in second] == list(range(1, 13))
    assert second.depth == 12 and second.bytes == first.bytes
    assert log.events == [("spool_loaded", {"entries": 12, "bytes": first.bytes})]
    folder = tmp_path / "spool"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()} == {0o600}
    assert second.put("github", {**JOB, "n": 13}, "d-13") is not None
    assert [entry.job["n"] for entry in second][-2:] == [12, 13]  # the sequence goes on after the loaded ones


def test_a_delivery_waiting_already_is_kept_once(tmp_path: Path) -> None:
    spool, _ = spool_at(tmp_path)
    assert spool.put("github", JOB, "d-1") is not None
    assert spool.put("github", JOB, "d-1") is None
    assert spool.put("gitlab", JOB, "d-1") is not None  # another forge's id space
    assert spool.put("github", JOB, "") is not None and spool.put("github", JOB, "") is not None  # no id: both kept
    assert spool.depth == 4
    entry = spool.oldest()
    assert entry is not None
    spool.done(entry)
    assert not entry.path.exists() and not spool.holds("github", "d-1") and spool.depth == 3
    assert spool.put("github", JOB, "d-1") is not None  # once replayed, a later redelivery is a delivery again


def test_a_full_spool_refuses_and_keeps_what_it_holds(tmp_path: Path) -> None:
    spool, _ = spool_at(tmp_path, max_bytes=600)
    kept = 0
    with pytest.raises(SpoolFull, match="of 600 bytes"):
        for number in range(100):
            spool.put("github", JOB, f"d-{number}")
            kept += 1
    assert 0 < kept < 100 and spool.depth == kept and spool.bytes <= 600
    assert len(list(tmp_path.glob("*.json"))) == kept


def test_what_cannot_be_read_is_set_aside_and_a_cut_write_is_dropped(tmp_path: Path) -> None:
    spool, _ = spool_at(tmp_path)
    spool.put("github", JOB, "d-1")
    spool.put("github", JOB, "d-2")
    (tmp_path / "0000000000000002-truncated.json").write_text('{"format": 1, "kind": "git')
    (tmp_path / "0000000000000003-foreign.json").write_text(json.dumps({"format": 99}))
    (tmp_path / "not-a-number.json").write_text("{}")
    (tmp_path / ".0000000000000009-x.json.tmp").write_text("half")
    reloaded, log = spool_at(tmp_path)
    assert [entry.delivery for entry in reloaded] == ["d-1", "d-2"]
    aside = sorted(path.name for path in (tmp_path / SET_ASIDE).iterdir())
    assert aside == ["0000000000000002-truncated.json", "0000000000000003-foreign.json", "not-a-number.json"]
    assert [fields["entry"] for event, fields in log.events if event == "spool_entry_set_aside"] == aside
    assert not list(tmp_path.glob(".*.tmp"))
    assert reloaded.put("github", JOB, "d-3") is not None and reloaded.depth == 3


def test_a_disk_that_refuses_raises_and_leaves_no_entry(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    spool, log = spool_at(tmp_path / "a-file" / "spool")  # refused even to root, as a full or failed disk refuses
    assert log.events == [("spool_unwritable", {"setting": "PI_RECEIVER_SPOOL_DIR", "errno": "ENOTDIR"})]
    with pytest.raises(NotADirectoryError):
        spool.put("github", JOB, "d-1")
    assert spool.depth == 0 and spool.bytes == 0 and not spool.holds("github", "d-1")


LABEL = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}


def labeled(number: int) -> dict[str, Any]:
    return {
        "action": "labeled",
        "sender": {"id": 1, "login": "alice"},
        "label": {"name": "pi:fix"},
        "issue": {"number": number, "title": "T", "body": "B", "labels": [{"name": "pi:fix"}]},
        "repository": {"full_name": "octo/repo"},
    }


async def drained(spool: Spool, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while spool.depth and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert spool.depth == 0, f"{spool.depth} entries still spooled"


async def said(front: Served, event: str, timeout_s: float = 10) -> None:
    """Wait until the receiver has logged `event` (the replay loop says it after its step ends, a moment after the
    spool's depth shows the step's effect)."""
    deadline = time.monotonic() + timeout_s
    while not front.events(event) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


@pytest.mark.redis
@pytest.mark.slow
async def test_a_store_outage_is_answered_202_and_queued_in_order_once_it_is_back(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 1_000_000, Recorder()).load()
    async with served(private_redis.url, rules_of(LABEL), spool=spool) as front:
        replay = asyncio.create_task(front.receiver.replay(pause_s=0.2))
        try:
            assert await front.github("issues", labeled(40), "d-0") == (202, {"status": "queued"})
            private_redis.stop()
            for number in range(1, 6):
                assert await front.github("issues", labeled(40 + number), f"d-{number}") == (202, {"status": "spooled"})
            assert await front.github("issues", labeled(41), "d-1") == (202, {"status": "spooled"})  # a redelivery
            assert spool.depth == 5 and front.receiver.store_refusing
            assert [fields["why"] for fields in front.events("delivery_spooled")] == ["store-refused"] + [
                "behind-spool"
            ] * 4  # once one waits, the rest queue behind it rather than overtake it
            await said(front, "spool_replay_blocked")
            await asyncio.sleep(1)  # several tries at pause_s
            assert len(front.events("spool_replay_blocked")) == 1  # one line an outage, not one a try
            private_redis.start()
            await drained(spool)
            await said(front, "spool_drained")
        finally:
            replay.cancel()
    replayed = [fields for fields in front.events("enqueued") if fields.get("spooled")]
    assert [fields["delivery"] for fields in replayed] == [f"d-{number}" for number in range(1, 6)]
    assert all(isinstance(fields["waitedMs"], int) and fields["waitedMs"] >= 0 for fields in replayed)
    assert front.events("spool_drained") == [{"replayed": 5}] and not front.receiver.store_refusing
    assert set(await queued_jobs(private_redis.url)) == {f"gh-d-{number}" for number in range(1, 6)}
    assert not list((tmp_path / "spool").glob("*.json"))


@pytest.mark.redis
async def test_a_full_spool_answers_503_and_a_job_the_store_refuses_is_set_aside(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    spool_log = Recorder()
    spool = Spool(tmp_path / "spool", 2_000, spool_log).load()
    async with served(private_redis.url, rules_of(LABEL), spool=spool) as front:
        private_redis.stop()
        answers = [await front.github("issues", labeled(number), f"f-{number}") for number in range(1, 8)]
        assert (202, {"status": "spooled"}) in answers and answers[-1] == (503, {"error": "spool-full"})
        assert front.events("spool_full") and front.events("spool_full")[-1]["delivery"] == "f-7"
        private_redis.start()
        # an entry whose data the enqueue cannot take (an entry edited by hand, say) is moved aside, not retried
        poisoned = spool.oldest()
        assert poisoned is not None
        object.__setattr__(poisoned, "job", {"replicas": 1, "trigger": "not-a-mapping", "target": object()})
        replay = asyncio.create_task(front.receiver.replay(pause_s=0.1))
        try:
            await drained(spool)
        finally:
            replay.cancel()
    assert [fields["entry"] for event, fields in spool_log.events if event == "spool_entry_set_aside"] == [
        poisoned.path.name
    ]
    assert (tmp_path / "spool" / SET_ASIDE / poisoned.path.name).exists()
    kept = sum(1 for status, _ in answers if status == 202)
    assert len(await queued_jobs(private_redis.url)) == kept - 1
