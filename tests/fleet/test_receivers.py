"""Each receiver's line in the store, written and read back on a real redis-server; a field it did not write is
left out, never fatal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_dispatch.core.keys import RECEIVERS
from pi_dispatch.fleet.receivers import FORGOTTEN_AFTER_MS, ReceiverState, read_receivers, report_receiver

NOW = 1_800_000_000_000


@pytest.mark.redis
async def test_what_a_receiver_reports_is_read_back_and_a_hostile_field_is_left_out(client: Any) -> None:
    await report_receiver(client, ReceiverState("edge-b:3000", 3, 4_096, True, NOW - 1_000))
    await report_receiver(client, ReceiverState("edge-a:3000", 0, 0, False, NOW - 2_000))
    await report_receiver(client, ReceiverState("edge-old:3000", 0, 0, False, NOW - FORGOTTEN_AFTER_MS))
    good = {"spoolEntries": 1, "spoolBytes": 1, "storeRefusing": False, "atMs": NOW}
    hostile = {
        "not-json": "{",
        "a-list": "[]",
        "negative": json.dumps(good | {"spoolEntries": -1}),
        "a-bool-count": json.dumps(good | {"spoolBytes": True}),
        "a-text-flag": json.dumps(good | {"storeRefusing": "yes"}),
        "missing": json.dumps({"spoolEntries": 1}),
        "\xff-binary": b"\xff\xfe",
    }
    await client.hset(RECEIVERS, mapping=hostile)
    read = await read_receivers(client, NOW)
    assert [state.name for state in read] == ["edge-a:3000", "edge-b:3000"]
    assert read[1] == ReceiverState("edge-b:3000", 3, 4_096, True, NOW - 1_000)
    assert read[1].as_json() == {
        "name": "edge-b:3000",
        "spoolEntries": 3,
        "spoolBytes": 4_096,
        "storeRefusing": True,
        "atMs": NOW - 1_000,
    }


def test_a_summary_says_what_needs_a_look() -> None:
    assert ReceiverState("edge:3000", 0, 0, False, NOW).summary(NOW + 4_000) == "edge:3000 spool 0"
    busy = ReceiverState("edge:3000", 12, 40_960, True, NOW).summary(NOW + 45_000)
    assert busy == "edge:3000 spool 12 (40,960 bytes), store refusing its writes, silent 45s"
