"""Spend by repository, flow, trigger or model over a period: the sums (pure) and the limits page's table and chart
over runs in a real store's fleet mirror."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from pi_dispatch.core.keys import RUNS_INDEX, run_record_key
from pi_dispatch.core.names import record_stem
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.web.app import console_app
from pi_dispatch.web.spend import BAR_WIDTH, SpendRow, bars, repo_of, spend_rows


def run(job_id: str, target: str, settled: int, *, model: str = "m1", reserved: int = 1_000_000, **more: Any) -> dict:
    dollars = {"reservedMicros": reserved, "settledMicros": settled, "basis": "metered", "modelBasis": None}
    return {"jobId": job_id, "target": target, "flow": "fix", "triggerType": "label", "provider": "anthropic",
            "model": model, "tokens": 100, "dollars": dollars, "endedAt": "2026-12-06T00:00:00Z", **more}  # fmt: skip


@pytest.mark.parametrize(
    ("target", "repo"),
    [
        ("acme/web#12", "acme/web"),
        ("group/sub/app!7", "group/sub/app"),
        ("local:site", "local:site"),
        (None, "-"),
        ("", "-"),
        ("#3", "#3"),
    ],
)
def test_a_runs_repository_is_its_target_before_the_number(target: object, repo: str) -> None:
    assert repo_of(target) == repo


def test_runs_are_summed_per_group_the_most_settled_first_and_malformed_fields_count_nothing() -> None:
    runs = [run("a", "acme/web#1", 250_000), run("b", "acme/web#2", 500_000, model="m2"),
            run("c", "acme/api#3", 0), run("d", "acme/api#4", 100, dollars="free", tokens=-5),
            run("e", "acme/api#5", 0, dollars=None)]  # fmt: skip
    assert spend_rows(runs, "repo") == [
        SpendRow("acme/web", 2, 2_000_000, 750_000, 200), SpendRow("acme/api", 3, 1_000_000, 0, 200),
    ]  # fmt: skip
    by_model = spend_rows(runs, "model")
    assert [(row.group, row.settled_micros) for row in by_model] == [
        ("anthropic/m2", 500_000),
        ("anthropic/m1", 250_000),
    ]
    assert [width for _, width in bars(spend_rows(runs, "repo"))] == [BAR_WIDTH, 0]


@pytest.mark.redis
async def test_the_limits_page_shows_spend_by_the_chosen_group_as_a_table_and_a_chart(
    valkey_url: str, client: aioredis.Redis
) -> None:
    now_ms = int(time.time() * 1000)
    records = [run("gh-1", "acme/web#1", 250_000), run("gh-2", "acme/<b>web</b>#2", 750_000),
               run("gh-3", "acme/web#3", 100_000, flow="review")]  # fmt: skip
    for at, record in enumerate(records):
        stem = record_stem(record["jobId"])
        await client.set(run_record_key(stem), json.dumps(record))
        await client.zadd(RUNS_INDEX, {stem: now_ms - at})
    store = StoreAddress(valkey_url)
    async with TestClient(TestServer(console_app(store.client(), store))) as http:
        page = await (await http.get("/limits", params={"by": "repo", "since": "1h"})).text()
        flows = await (await http.get("/limits", params={"by": "flow"})).text()
        bad = await http.get("/limits", params={"since": "last week"})
    table = page.split('<table class="spend">')[1]
    assert table.index("acme/&lt;b&gt;web&lt;/b&gt;") < table.index("<td>acme/web</td>")  # most settled first
    assert "<td>$0.75</td>" in table and "<td>$0.35</td>" in table and "<b>web" not in page
    assert page.count("<rect ") == 2
    assert f'width="{BAR_WIDTH}"' in page
    assert "<td>fix</td>" in flows and "<td>review</td>" in flows and "since 7d" in flows  # the default period
    assert bad.status == 400
