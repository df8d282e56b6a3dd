"""The fleet's trail of operators' actions against a real store: each cancel, retry, drain and resume a command makes
is written with its Unix user and its outcome, and `actions` lists them newest first, hostile targets escaped."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from jsonschema import Draft202012Validator

from pi_dispatch.config.schemas import load_schema
from pi_dispatch.core.keys import TRAIL_KEY
from pi_dispatch.fleet.trail import Action, read_trail, record_action, unix_user
from tests.support.helpers import run_cli

pytestmark = [pytest.mark.redis]


async def test_each_steering_command_leaves_its_action_in_the_trail(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    store = ("--valkey-url", valkey_url)
    said = [await asyncio.to_thread(run_cli, *command, *store) for command in (
        ("cancel", "gh-nowhere", "--wait", "0"), ("retry", "gh-nowhere"), ("drain", "mini9"), ("resume", "mini9"),
    )]  # fmt: skip
    assert [result.returncode for result in said] == [1, 1, 0, 0]  # nothing to cancel or retry: still on the trail
    trail = await read_trail(client, 10)
    assert [(action.what, action.target, action.outcome) for action in trail] == [
        ("resume", "mini9", "recorded"), ("drain", "mini9", "recorded"), ("retry", "gh-nowhere", "missing"),
        ("cancel", "gh-nowhere", "missing"),
    ]  # fmt: skip
    assert {(action.who, action.via) for action in trail} == {(unix_user(), "cli")}
    listed = await asyncio.to_thread(run_cli, "actions", "--json", *store)
    document = json.loads(listed.stdout)
    assert list(Draft202012Validator(load_schema("cli-actions")).iter_errors(document)) == []
    assert [entry["what"] for entry in document] == ["resume", "drain", "retry", "cancel"]


async def test_the_trail_is_read_as_hostile_text_and_kept_bounded(valkey_url: str, client: aioredis.Redis) -> None:
    await record_action(client, Action(1, "eve", "console", "cancel", "[red]<script>x" + "y" * 1000, "missing"))
    await client.xadd(TRAIL_KEY, {"at_ms": "not a time", "who": "forged"})  # an entry that is not an action
    assert [action.who for action in await read_trail(client, 10)] == ["eve"]
    assert len((await read_trail(client, 10))[0].target) == 512
    shown = await asyncio.to_thread(run_cli, "actions", "--valkey-url", valkey_url)
    assert shown.returncode == 0 and "[red]<script>x" in shown.stdout and "Traceback" not in shown.stderr
