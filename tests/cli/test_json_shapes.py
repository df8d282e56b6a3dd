"""Every command that prints a table or a decision has `--json`, each shape a schema under schemas/, and what each
prints against a live store validates against its schema, with typed values (numbers as numbers)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import typer.main
from jsonschema import Draft202012Validator

from pi_dispatch.cli.app import app
from pi_dispatch.config.schemas import load_schema
from tests.cli.test_walk import leaf_commands
from tests.console.test_top import _example_fleet
from tests.support.helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory.example"
# A command whose --json shape is another contract's: the audit's report has its own published schema.
OWN_SCHEMA = {("audit",): "audit-report"}


def schema_name(command: tuple[str, ...]) -> str:
    return OWN_SCHEMA.get(command, "cli-" + "-".join(command))


def commands_with_json() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)

    def find(path: tuple[str, ...]) -> Any:
        found = root
        for name in path:
            found = found.commands[name]
        return found

    return sorted(path for path in leaf_commands(root) if any("--json" in param.opts for param in find(path).params))


def test_the_commands_that_print_tables_or_decisions_have_json_and_a_schema() -> None:
    listed = commands_with_json()
    for needed in (("route",), ("enqueue",), ("top",), ("config", "check"), ("config", "triggers")):
        assert needed in listed
    assert ("receiver", "check") in listed and ("hosts",) in listed
    for command in listed:
        Draft202012Validator.check_schema(load_schema(schema_name(command)))


def valid(schema: str, text: str) -> Any:
    document = json.loads(text)
    errors = [error.message for error in Draft202012Validator(load_schema(schema)).iter_errors(document)]
    assert errors == [], (schema, errors[:3])
    return document


@pytest.mark.redis
async def test_each_json_output_validates_against_its_schema(
    valkey_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registries = await _example_fleet(valkey_url)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"trigger": {"deliveryId": "d-json"}, "secretsProfile": "prod"}))
    store = ("--valkey-url", valkey_url)

    def cli(*arguments: str) -> str:
        result = run_cli(*arguments)
        assert result.returncode in (0, 1), (arguments, result.stderr)
        return result.stdout

    try:
        hosts = valid("cli-hosts", await asyncio.to_thread(cli, "hosts", "--json", *store))
        valid("cli-hosts-queues", await asyncio.to_thread(cli, "hosts", "--json", "--queues", *store))
        route = valid("cli-route", await asyncio.to_thread(cli, "route", "--job", str(job), "--json", *store))
        enqueued = valid("cli-enqueue", await asyncio.to_thread(cli, "enqueue", "--job", str(job), "--json", *store))
        top = valid("cli-top", await asyncio.to_thread(cli, "top", "--json", *store))
        runs = valid("cli-runs", await asyncio.to_thread(cli, "runs", "--json", "--logs-dir", str(tmp_path), *store))
        valid(
            "cli-job", await asyncio.to_thread(cli, "job", "gh-d-json", "--json", "--logs-dir", str(tmp_path), *store)
        )
        valid("cli-retry", await asyncio.to_thread(cli, "retry", "--failed", "--json", *store))
        valid("cli-actions", await asyncio.to_thread(cli, "actions", "--json", *store))
        local = ("run", str(tmp_path), "--task", "tidy", "--host", "mini2", "--json", *store)
        ran = valid("cli-run", await asyncio.to_thread(cli, *local))
        again = valid("cli-run", await asyncio.to_thread(cli, *local))
    finally:
        for registry in registries:
            await registry.close()
        await registries[0].client.aclose()
    mini1 = next(row for row in hosts if row["name"] == "mini1")
    assert mini1["concurrency"] == 2 and mini1["routes"] is True and mini1["caps"] == ["s:prod", "w:ci", "w:nightly"]
    assert route["queue"] == "pi-jobs@mini1" and enqueued["added"] and enqueued["queue"] == "pi-jobs@mini1"
    assert ran["added"] and ran["queue"] == "pi-jobs@mini2" and ran["job_id"].startswith("local-")
    assert (again["result"], again["job_id"]) in (("exists", ran["job_id"]), ("added", again["job_id"]))  # a new minute
    assert [(receiver["name"], receiver["spoolEntries"]) for receiver in top["receivers"]] == [("edge:3000", 2)]
    valid("cli-limits", json.dumps(top["limits"]))  # the same shape as `limits --json`
    assert [row["name"] for row in top["hosts"]] == ["mini1", "mini2", "mini3"] and runs["runs"][0][
        "jobId"
    ] == "gh-done"

    for key in ("PI_WORKER_NAME", "PI_TRIGGERS_FILE", "WEBHOOK_SECRET"):
        monkeypatch.delenv(key, raising=False)
    valid("cli-config-show", run_cli("config", "show", "--json").stdout)
    valid("cli-config-check", run_cli("config", "check", "--json").stdout)
    monkeypatch.setenv("PI_CONCURRENCY", "0")
    refused = valid("cli-config-check", run_cli("config", "check", "--json").stdout)
    assert refused["problems"][0]["subject"] == "PI_CONCURRENCY"
    valid("cli-config-triggers", run_cli("config", "triggers", str(EXAMPLE / "triggers.json"), "--json").stdout)
    monkeypatch.setenv("WEBHOOK_SECRET", "a-webhook-secret-of-some-length")
    monkeypatch.setenv("PI_TRIGGERS_FILE", str(EXAMPLE / "triggers.json"))
    checked = valid("cli-receiver-check", run_cli("receiver", "check", "--json").stdout)
    assert checked["forges"] == ["github"] and checked["rules"] > 0
