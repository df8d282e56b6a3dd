"""The audit of cron: each host's entries judged where they run, and live fpCron and zone drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from pi_dispatch.audit.findings import Report
from pi_dispatch.audit.placement import audit
from pi_dispatch.config.hostvars import PREFIX, InventoryHost
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.triggers.file import Trigger, parse_triggers
from pi_dispatch.triggers.schedules import authored_cron, cron_fingerprint
from tests.support.helpers import run_cli_process

NIGHTLY = {
    "on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
    "run": {
        "kind": "local",
        "folder": "/srv/app",
        "flow": "deps",
        "task": "update",
        "secretsProfile": "prod",
        "secrets": {"T": "t"},
    },
}


def host(name: str, worker: str | None, secret: dict[str, str] | None = None, **extra: Any) -> InventoryHost:
    declared: dict[str, Any] = {PREFIX + key: value for key, value in extra.items()}
    if worker is not None:
        declared[PREFIX + "name"] = worker
    if secret:
        declared[PREFIX + "secret_profiles"] = secret
    return InventoryHost(name, declared, "test-inventory")


def cron(*entries: dict[str, Any]) -> list[Trigger]:
    return parse_triggers(json.dumps({"triggers": list(entries)}), f"{len(entries)}.json")


def found(report: Report, code: str) -> list[Any]:
    return [finding for finding in report.findings if finding.code == code]


MINI1 = host("mini1", "mini1", {"prod": "/opt/p"})
MINI2 = host("mini2", "mini2")
LAPTOP = host("laptop", None, {"prod": "/opt/p"})


def test_a_cron_entry_is_judged_on_the_host_whose_file_holds_it_never_routed() -> None:
    clean = audit([MINI1, MINI2], [], host_triggers={"mini1": cron(NIGHTLY)})
    assert found(clean, "cron-refused") == []
    assert [f.code for f in clean.findings if f.code.startswith("profile")] == []  # never placed like a delivery
    refused = audit([MINI1, MINI2], [], host_triggers={"mini2": cron(NIGHTLY)})
    (finding,) = found(refused, "cron-refused")
    assert finding.hosts == ("mini2",)
    assert "secret profile 'prod'" in finding.message
    assert "pi_dispatch_worker_secret_profiles" in finding.fix
    assert refused.at_or_above("error")


def test_secrets_without_a_profile_need_default_where_the_cron_runs() -> None:
    entry = {
        "on": NIGHTLY["on"],
        "run": {key: value for key, value in NIGHTLY["run"].items() if key != "secretsProfile"},
    }
    (finding,) = found(audit([MINI1], [], host_triggers={"mini1": cron(entry)}), "cron-refused")
    assert "secret profile 'default'" in finding.message


def test_a_nameless_host_with_cron_in_a_fleet_is_warned() -> None:
    report = audit([MINI1, LAPTOP], [], host_triggers={"laptop": cron(NIGHTLY)})
    (finding,) = found(report, "cron-shared")
    assert finding.hosts == ("laptop",)
    assert found(audit([LAPTOP], [], host_triggers={"laptop": cron(NIGHTLY)}), "cron-shared") == []


def row(name: str, fp: str, tz: str = "UTC", count: str = "1") -> dict[str, object]:
    return {"name": name, "routes": "true", "caps": "s:prod", "staleMs": 0, "fpCron": fp, "tz": tz, "cronCount": count}


def test_live_fp_cron_is_compared_with_what_the_inventory_renders() -> None:
    fleet = [host("mini1", "mini1", {"prod": "/opt/p"}, tz="UTC"), MINI2]
    expected = cron_fingerprint(authored_cron(cron(NIGHTLY)), "UTC")
    triggers = {"mini1": cron(NIGHTLY)}
    same = audit(fleet, [], live_rows=[row("mini1", expected), row("mini2", "", count="0")], host_triggers=triggers)
    assert found(same, "cron-drift") == []
    stale = cron_fingerprint(authored_cron(cron()), "UTC")
    drifted = audit(fleet, [], live_rows=[row("mini1", stale, count="0"), row("mini2", "x")], host_triggers=triggers)
    by_host = {finding.hosts[0]: finding.message for finding in found(drifted, "cron-drift")}
    assert by_host["mini1"] == f"publishes fpCron {stale} (0 schedules); the inventory renders {expected} (1 schedules)"
    assert by_host["mini2"] == "publishes fpCron x (1 schedules); the inventory renders no cron"


def test_live_hosts_in_two_zones_are_flagged() -> None:
    report = audit([MINI1, MINI2], [], live_rows=[row("mini1", "", "UTC"), row("mini2", "", "Europe/Amsterdam")])
    (finding,) = found(report, "tz-mismatch")
    assert finding.message == "Europe/Amsterdam: mini2; UTC: mini1"


@pytest.mark.redis
async def test_audit_live_reads_each_hosts_triggers_file_and_its_row(
    tmp_path: Path, valkey_url: str, client: aioredis.Redis
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "mini1.json").write_text(json.dumps({"triggers": [NIGHTLY]}))
    (tmp_path / "hosts.yml").write_text(
        "pi_dispatch_workers:\n  hosts:\n"
        "    mini1:\n      pi_dispatch_worker_name: mini1\n      pi_dispatch_worker_tz: UTC\n"
        "      pi_dispatch_worker_job_contract: event\n"
        "      pi_dispatch_worker_triggers_source: mini1.json\n"
        "      pi_dispatch_worker_secret_profiles: {prod: /opt/p}\n"
    )
    mini1 = HostRegistry(client, "mini1")
    await mini1.start({"routes": "true", "caps": "s:prod", "tz": "UTC", "fpCron": "0123456789abcdef"})
    result = run_cli_process("audit", "-i", str(tmp_path / "hosts.yml"), "--live", "--valkey-url", valkey_url, "--json")
    await mini1.close()
    report = json.loads(result.stdout)
    # the suite's store has no replica: the audit says so too (tests/fleet/test_storeview.py)
    assert [f["code"] for f in report["findings"]] == ["cron-drift", "store-no-replica", "store-not-persistent"]
    expected = cron_fingerprint(authored_cron(cron(NIGHTLY)), "UTC")
    assert expected in report["findings"][0]["message"]
    (files / "mini1.json").write_text("{not json")
    broken = run_cli_process("audit", "-i", str(tmp_path / "hosts.yml"))
    assert broken.returncode == 2
    assert "mini1.json" in broken.stderr


def test_the_scripts_dir_given_as_an_extra_var_is_where_the_triggers_source_is_found(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    entry = {"on": NIGHTLY["on"], "run": {**NIGHTLY["run"], "secretsProfile": "staging"}}
    (elsewhere / "mini1.json").write_text(json.dumps({"triggers": [entry]}))
    (tmp_path / "hosts.yml").write_text(
        "pi_dispatch_workers:\n  hosts:\n"
        "    mini1:\n      pi_dispatch_worker_name: mini1\n      pi_dispatch_worker_triggers_source: mini1.json\n"
        "      pi_dispatch_worker_job_contract: event\n"
    )
    missing = run_cli_process("audit", "-i", str(tmp_path / "hosts.yml"))
    assert missing.returncode == 2  # not in the inventory's files/: said, never skipped
    assert "does not exist" in missing.stderr
    extra = json.dumps({"pi_dispatch_worker_scripts_dir": str(elsewhere)})
    found = run_cli_process("audit", "-i", str(tmp_path / "hosts.yml"), "-e", extra, "--json")
    assert found.returncode == 1
    assert [f["code"] for f in json.loads(found.stdout)["findings"]] == ["cron-refused"]
    assert run_cli_process("audit", "-i", str(tmp_path / "hosts.yml"), "-e", "[1]").returncode == 2
