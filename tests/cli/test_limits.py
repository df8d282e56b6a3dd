"""`pi-dispatch limits` against a real store: the windows as counted, this host's caps from its env file, a scope's
windows and slot holders, and live hosts whose limits differ; its JSON valid against its schema."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from jsonschema import Draft202012Validator

from pi_dispatch.config.schemas import load_schema
from pi_dispatch.core.budget import LIMITS_ROW_FIELD, Window, scope_ledger, scope_slot_prefix, window_key
from pi_dispatch.core.dollarplan import FPUSD_ROW_FIELD, USD_PREFIX, usd_model_prefix
from pi_dispatch.fleet.dollars import OPEN_HOLDS
from pi_dispatch.fleet.registry import HostRegistry
from tests.support.helpers import run_cli

pytestmark = [pytest.mark.redis]


@pytest.mark.parametrize("as_json", [True, False])
async def test_limits_shows_each_window_scope_and_differing_hosts(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, as_json: bool
) -> None:
    now = int(time.time() * 1000)
    limits = tmp_path / "scoped-limits.json"
    limits.write_text(json.dumps({"version": 1, "limits": [
        {"scope": "acme/web", "day": 5, "concurrent": 2}, {"scope": "/srv/site", "week": 3},
    ]}))  # fmt: skip
    env = tmp_path / "worker.env"
    env.write_text(f"PI_DAILY_CAP=10\nPI_DAILY_TOKEN_CAP=5000\nPI_SCOPED_LIMITS_FILE={limits}\n")
    await client.set(window_key("budget", Window.DAY, now), 9)
    await client.set("budget:t:" + time.strftime("%Y-%m-%d", time.gmtime(now / 1000)), 1200)
    await client.set(window_key(scope_ledger("acme/web"), Window.DAY, now), 2)
    await client.set(f"{scope_slot_prefix('acme/web')}1", "mini2#gh-7")
    rows = [HostRegistry(client, name) for name in ("mini1", "mini2")]
    await rows[0].start({LIMITS_ROW_FIELD: "day=10;week=;month=;hold=;tokens=5000;files=abcd"})
    await rows[1].start({LIMITS_ROW_FIELD: "day=25;week=;month=;hold=;tokens=;files="})
    try:
        said = await asyncio.to_thread(
            run_cli, "limits", "--env-file", str(env), "--valkey-url", valkey_url, *(["--json"] if as_json else [])
        )
    finally:
        for row in rows:
            await row.close()
    assert said.returncode == 0, said.stderr
    if not as_json:
        assert "fleet" in said.stdout and "acme/web: 1/2 fleet slots held (mini2#gh-7)" in said.stdout
        assert "/srv/site" not in said.stdout and "different limits" in said.stdout
        return
    document = json.loads(said.stdout)
    assert list(Draft202012Validator(load_schema("cli-limits")).iter_errors(document)) == []
    day, week, month, tokens = document["windows"]
    assert (day["used"], day["cap"], day["near"]) == (9, 10, True) and (week["cap"], month["cap"]) == (None, None)
    assert (tokens["ledger"], tokens["used"], tokens["cap"]) == ("budget:t", 1200, 5000)
    web, site = document["scopes"]
    assert (web["scope"], web["windows"][0]["used"], web["held"]) == ("acme/web", 2, ["mini2#gh-7"])
    assert site["scope"] == "a folder" and site["windows"][0]["window"] == "week"
    assert document["hostsDiffer"] is True and [host["name"] for host in document["hosts"]] == ["mini1", "mini2"]


def test_a_bad_scoped_limits_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    limits = tmp_path / "scoped-limits.json"
    limits.write_text('{"version": 1, "limits": [{"scope": "*", "day": 1}]}')
    env = tmp_path / "worker.env"
    env.write_text(f"PI_SCOPED_LIMITS_FILE={limits}\n")
    said = run_cli("limits", "--env-file", str(env), "--valkey-url", "redis://127.0.0.1:1/0")
    assert said.returncode == 2 and "PI_SCOPED_LIMITS_FILE" in said.stderr and "wildcards" in said.stderr
    assert "Traceback" not in said.stderr


@pytest.mark.parametrize("as_json", [True, False])
async def test_limits_shows_dollar_windows_in_dollars_open_holds_and_hosts_that_cap_dollars_differently(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, as_json: bool
) -> None:
    now = int(time.time() * 1000)
    limits = tmp_path / "scoped-limits.json"
    limits.write_text(json.dumps({"version": 2, "limits": [{"scope": "model:openai/gpt-5", "dayUsd": "40"}]}))
    env = tmp_path / "worker.env"
    env.write_text(f"PI_MAX_COST_USD=2.50\nPI_DAILY_COST_USD=100\nPI_SCOPED_LIMITS_FILE={limits}\n")
    await client.set(window_key(USD_PREFIX, Window.DAY, now), 85_000_000)
    await client.set(window_key(usd_model_prefix("openai/gpt-5"), Window.DAY, now), 2_500_000)
    await client.zadd(OPEN_HOLDS, {"mini1#gh-1#ab": now + 60_000})
    rows = [HostRegistry(client, name) for name in ("mini1", "mini2")]
    await rows[0].start({FPUSD_ROW_FIELD: "0123456789abcdef"})
    await rows[1].start({})  # a host that holds no dollars beside one that does
    try:
        said = await asyncio.to_thread(
            run_cli, "limits", "--env-file", str(env), "--valkey-url", valkey_url, *(["--json"] if as_json else [])
        )
    finally:
        for row in rows:
            await row.close()
    assert said.returncode == 0, said.stderr
    if not as_json:
        assert "fleet $" in said.stdout and "$85.00" in said.stdout and "$100.00" in said.stdout
        assert "cap dollars differently" in said.stdout and "1 dollar holds open" in said.stdout
        return
    document = json.loads(said.stdout)
    assert list(Draft202012Validator(load_schema("cli-limits")).iter_errors(document)) == []
    usd = [use for use in document["windows"] if use["ledger"] == USD_PREFIX]
    assert [(use["window"], use["used"], use["cap"]) for use in usd] == [
        ("day", 85_000_000, 100_000_000),
        ("week", 0, None),
        ("month", 0, None),
    ]
    assert usd[0]["near"] is True
    (model,) = document["scopes"]
    assert model["scope"] == "model:openai/gpt-5" and model["windows"][0]["used"] == 2_500_000
    assert document["openHolds"] == 1 and document["spendDiffers"] is True


async def test_with_an_env_file_the_windows_are_read_from_that_files_store(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VALKEY_URL", "redis://127.0.0.1:1/0")  # the shell's store is not the host's
    env = tmp_path / "worker.env"
    env.write_text(f"VALKEY_URL={valkey_url}\nPI_DAILY_CAP=10\n")
    await client.set(window_key("budget", Window.DAY, int(time.time() * 1000)), 4)
    said = await asyncio.to_thread(run_cli, "limits", "--env-file", str(env), "--json")
    assert said.returncode == 0, said.stderr
    day = json.loads(said.stdout)["windows"][0]
    assert (day["used"], day["cap"]) == (4, 10)
    elsewhere = await asyncio.to_thread(
        run_cli, "limits", "--env-file", str(env), "--valkey-url", "redis://127.0.0.1:1/0"
    )
    assert elsewhere.returncode == 1 and "cannot be read" in elsewhere.stderr  # the option still wins
