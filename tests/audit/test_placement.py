"""The audit: one fleet per finding code, live drift against a real Valkey, golden JSON, every exit code."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from jsonschema import Draft202012Validator

from pi_dispatch.audit.placement import CODES, Report, audit
from pi_dispatch.config.hostvars import PREFIX, InventoryHost
from pi_dispatch.config.schemas import load_schema
from pi_dispatch.core.capabilities import capability_tokens, serialize_caps
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.fleet.hosts import HostQueue, QueueCounts
from pi_dispatch.fleet.registry import HostRegistry, LiveHosts, read_live_hosts
from pi_dispatch.fleet.steal import Waiting
from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.triggers.file import Trigger
from tests.support.helpers import plain_rows, run_cli, run_cli_process
from tests.support.workers import open_queues

DATA = Path(__file__).parent.parent / "data"
INVENTORY = DATA / "inventory"


def host(
    name: str,
    worker: str | None = None,
    secret: dict[str, str] | None = None,
    wait: dict[str, str] | None = None,
    **extra: Any,
) -> InventoryHost:
    declared: dict[str, Any] = {PREFIX + "job_contract": "event"}  # what an agent needs: test_agents.py
    declared |= {PREFIX + key: value for key, value in extra.items()}
    if worker is not None:
        declared[PREFIX + "name"] = worker
    if secret:
        declared[PREFIX + "secret_profiles"] = secret
    if wait:
        declared[PREFIX + "wait_profiles"] = wait
    return InventoryHost(name, declared, "test-inventory")


def trigger(index: int = 0, **run: Any) -> Trigger:
    return Trigger("triggers.json", index, {"type": "label"}, {"kind": "github", **run})


FLEET = [
    host("mini1", "mini1", {"prod": "/opt/p.sh"}, {"ci": "/opt/c.sh"}),
    host("mini2", "mini2", {"prod": "/opt/p.sh"}, {"ci": "/opt/c.sh"}),
    host("mini3", None, {"legacy": "/opt/l.sh"}),
]


def codes(report: Report) -> list[str]:
    return [finding.code for finding in report.findings]


@pytest.mark.parametrize(
    ("fleet", "run", "expected"),
    [
        (FLEET, {"secretsProfile": "nowhere"}, "profile-undeclared"),
        (FLEET, {"secretsProfile": "legacy"}, "profile-unroutable"),
        ([*FLEET[:2], host("mini3", None, {})], {"secretsProfile": "prod"}, "profile-routed"),
        ([FLEET[0], host("mini2", "mini2"), FLEET[2]], {"secretsProfile": "prod"}, "profile-single-host"),
        (FLEET[:2], {"waitFor": [{"profile": "ci"}]}, "profile-everywhere"),
        (
            [host("a", "a", {"prod": "/p"}), host("b", "b", None, {"ci": "/c"})],
            {"secretsProfile": "prod", "waitFor": [{"profile": "ci"}]},
            "needs-split",
        ),
        (FLEET, {"secrets": {"TOKEN": "op://x"}}, "default-profile-missing"),
    ],
)
def test_placement_codes(fleet: list[InventoryHost], run: dict[str, Any], expected: str) -> None:
    report = audit(fleet, [trigger(**run)])
    assert expected in codes(report)
    finding = next(f for f in report.findings if f.code == expected)
    assert finding.trigger == "triggers.json #0 (on label)"
    assert finding.severity == CODES[expected][0]


def test_undeclared_profile_suggests_the_close_name() -> None:
    report = audit(FLEET, [trigger(secretsProfile="Prod"), trigger(1, waitFor=[{"profile": "cii"}])])
    messages = [f.message for f in report.findings if f.code == "profile-undeclared"]
    assert any("did you mean 'prod'" in m and "secret-profile-unknown" in m for m in messages)
    assert any("did you mean 'ci'" in m and "wait-profile-unknown" in m for m in messages)


def test_unroutable_names_the_host_that_needs_a_name() -> None:
    finding = next(
        f for f in audit(FLEET, [trigger(secretsProfile="legacy")]).findings if f.code == "profile-unroutable"
    )
    assert finding.hosts == ("mini3",) and "give mini3 a pi_dispatch_worker_name" in finding.fix


def test_default_profile_everywhere_is_clean() -> None:
    fleet = [host("a", "a", {"default": "/d"}), host("b", None, {"default": "/d"})]
    assert codes(audit(fleet, [trigger(secrets={"A": "x"})])) == []


def test_simulate_down_shows_lost_only_host() -> None:
    fleet = [FLEET[0], host("mini2", "mini2", None, {"ci": "/c"})]
    report = audit(fleet, [trigger(secretsProfile="prod")], simulate_down=["mini1"])
    finding = next(f for f in report.findings if f.code == "profile-hosts-down")
    assert finding.hosts == ("mini1",) and report.simulated_down == ["mini1"]
    assert "profile-single-host" in codes(audit(fleet, [trigger(secretsProfile="prod")]))


@pytest.mark.parametrize(
    ("fleet", "expected"),
    [
        ([host("a", "same"), host("b", "same")], "worker-name-duplicate"),
        ([host("a", "bad name")], "host-vars-invalid"),
        ([host("a", "a", {"prod": "relative.sh"})], "host-vars-invalid"),
        ([host("a", "a", {"Prod": "/p"}), host("b", "b", {"prod": "/p"})], "profile-case-clash"),
        ([host("a", "a", logs_dir="/srv/logs"), host("b", "b", logs_dir="/srv/logs")], "logs-dir-shared"),
        ([host("a", "a", tz="UTC"), host("b", "b", tz="Europe/Amsterdam")], "tz-mismatch"),
    ],
)
def test_config_codes(fleet: list[InventoryHost], expected: str) -> None:
    assert expected in codes(audit(fleet, []))


def row(name: str, caps: str = "", routes: str = "true", stale: int = 0, **extra: str) -> dict[str, object]:
    return {"name": name, "caps": caps, "routes": routes, "staleMs": stale, **extra}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([row("mini1", "s:prod,w:ci")], "host-silent"),
        ([row("mini1", "s:prod,w:ci", stale=60_000), row("mini2", "s:prod,w:ci")], "host-stale"),
        ([row("mini1", "s:prod,w:ci", stale=400_000), row("mini2", "s:prod,w:ci")], "host-stale-doctor"),
        ([row("mini1", "s:prod"), row("mini2", "s:prod,w:ci")], "caps-drift"),
        ([row("mini1", "s:prod,w:ci", routes="false"), row("mini2", "s:prod,w:ci")], "routes-drift"),
        ([row("mini1", "s:prod,w:ci"), row("mini2", "s:prod,w:ci"), row("ghost")], "host-unknown"),
        ([row("mini1", "s:prod,w:ci"), row("mini2", "s:prod,w:ci"), row("laptop", routes="false")], "peer-undeclared"),
        ([row("mini1", "s:prod,w:ci", tz="UTC"), row("mini2", "s:prod,w:ci", tz="Asia/Tokyo")], "tz-mismatch"),
        (
            [row("mini1", "s:prod,w:ci", imageDigest="sha256:a"), row("mini2", "s:prod,w:ci", imageDigest="sha256:b")],
            "digest-mismatch",
        ),
        ([row("mini1", "s:prod,w:ci", version="0.2.0"), row("mini2", "s:prod,w:ci", version="0.1.0")], "version-mixed"),
        ([row("mini1", "s:prod,w:ci", clockOffsetMs="-90000"), row("mini2", "s:prod,w:ci")], "clock-skew"),
    ],
)
def test_live_codes(rows: list[dict[str, object]], expected: str) -> None:
    assert expected in codes(audit(FLEET[:2], [], live_rows=rows, live_state="ok"))


def test_a_clock_within_its_bound_is_no_finding_and_one_past_it_says_which_way() -> None:
    rows = [row("mini1", "s:prod,w:ci", clockOffsetMs="4000"), row("mini2", "s:prod,w:ci", clockOffsetMs="junk")]
    assert "clock-skew" not in codes(audit(FLEET[:2], [], live_rows=rows, live_state="ok"))
    rows[0]["clockOffsetMs"] = "90000"
    (finding,) = [f for f in audit(FLEET[:2], [], live_rows=rows, live_state="ok").findings if f.code == "clock-skew"]
    assert finding.hosts == ("mini1",) and "90.0 s behind the store's" in finding.message


def test_live_down_host_turns_single_point_of_failure_into_refusal() -> None:
    fleet = [FLEET[0], host("mini2", "mini2", None, {"ci": "/c"})]
    rows = [row("mini1", "s:prod,w:ci", stale=120_000), row("mini2", "w:ci")]
    report = audit(fleet, [trigger(secretsProfile="prod")], live_rows=rows, live_state="ok")
    assert {"host-stale", "profile-hosts-down"} <= set(codes(report))


def test_a_host_that_takes_no_job_is_not_draining() -> None:
    from pi_dispatch.fleet.hosts import HostQueue, QueueCounts

    now = 10_000_000
    stuck = row("mini1", "s:prod,w:ci", consumer="stuck", slotsFree="2", polledAt=str(now - 5_000))
    silent = row("mini2", "s:prod,w:ci", consumer="ok", slotsFree="1", polledAt=str(now - 120_000))
    busy = row("mini2", "s:prod,w:ci", consumer="ok", slotsFree="0", polledAt=str(now - 120_000))
    queue = HostQueue("pi-jobs@mini1", "mini1", QueueCounts(waiting=3), None, now - 90_000)
    report = audit(FLEET, [], live_rows=[stuck, silent], live_state="ok", host_queues=[queue], now_ms=now)
    found = {f.hosts[0]: f for f in report.findings if f.code == "host-not-draining"}
    assert set(found) == {"mini1", "mini2"} and found["mini1"].severity == "error"
    assert "stuck" in found["mini1"].message and "2 slots free" in found["mini1"].message
    assert "added 90 s ago" in found["mini1"].message and "last poll 120 s ago" in found["mini2"].message
    fine = audit(
        FLEET, [], live_rows=[row("mini1", "s:prod,w:ci", polledAt=str(now)), busy], live_state="ok", now_ms=now
    )
    assert "host-not-draining" not in codes(fine)  # a busy host with no free slot is not asking, and that is fine


def test_a_host_an_operator_drains_is_said_to_drain_not_flagged_as_stuck() -> None:
    now = 10_000_000
    drained = row("mini1", "s:prod,w:ci", consumer="ok", slotsFree="2", polledAt=str(now - 120_000), draining="true")
    report = audit(FLEET[:2], [], live_rows=[drained, row("mini2", "s:prod,w:ci")], live_state="ok", now_ms=now)
    found = [f for f in report.findings if f.hosts == ("mini1",)]
    assert [f.code for f in found] == ["host-draining"] and found[0].severity == "info"
    assert "pi-dispatch resume mini1" in found[0].fix


def test_a_capable_host_idle_while_routed_work_waits_past_its_stealing_delay_is_a_finding() -> None:
    now = 10_000_000
    waiting = [Waiting("pi-jobs@mini1", "deploy-7", {"secretsProfile": "prod"}, now - 60_000, False, False, "")]
    idle = row("mini2", "s:prod,w:ci", slotsFree="2", beatAt=str(now))
    rows = [row("mini1", "s:prod,w:ci", slotsFree="0", beatAt=str(now)), idle]
    report = audit(FLEET[:2], [], live_rows=rows, live_state="ok", waiting=waiting, now_ms=now)
    [finding] = [f for f in report.findings if f.code == "capable-slot-idle"]
    assert finding.hosts == ("mini2",) and finding.severity == "warning"
    assert "deploy-7" in finding.message and "pi-jobs@mini1" in finding.message and "2 slots free" in finding.message
    # not when it had no free slot, nor before its stealing delay and a beat had passed, nor for a host that
    # cannot serve the job
    for quiet in (
        [{**idle, "slotsFree": "0"}],
        [{**idle, "beatAt": str(now - 50_000)}],
        [row("mini2", "w:ci", slotsFree="2", beatAt=str(now))],
    ):
        report = audit(FLEET[:2], [], live_rows=[rows[0], *quiet], live_state="ok", waiting=waiting, now_ms=now)
        assert "capable-slot-idle" not in codes(report)


def test_every_finding_code_has_a_fixture() -> None:
    source = "".join((Path(__file__).parent / name).read_text() for name in ("test_placement.py", "test_cron.py"))
    source += "".join(
        (Path(__file__).parent / name).read_text()
        for name in ("test_egress.py", "test_sandbox.py", "test_limits.py", "test_agents.py")
    )
    assert [code for code in CODES if f'"{code}"' not in source] == []


def test_live_single_host_says_whether_it_is_up() -> None:
    fleet = [FLEET[0], host("mini2", "mini2", None, {"ci": "/c"})]
    rows = [row("mini1", "s:prod,w:ci", stale=3_000), row("mini2", "w:ci")]
    report = audit(fleet, [trigger(secretsProfile="prod")], live_rows=rows, live_state="ok")
    finding = next(f for f in report.findings if f.code == "profile-single-host")
    assert "only mini1 can take it (up, last beat 3 s ago)" in finding.message


def test_unreachable_registry_is_an_error_not_an_empty_fleet() -> None:
    report = audit(FLEET, [], live_rows=None, live_state="unreachable (ConnectionError)")
    assert codes(report) == ["registry-unreachable"] and report.at_or_above("error")


def test_many_triggers_share_one_classification() -> None:
    triggers = [trigger(i, secretsProfile="prod") for i in range(10_000)]
    report = audit(FLEET, triggers)
    assert report.count("info") == 10_000 and report.triggers == 10_000


def test_report_json_matches_its_schema() -> None:
    report = audit(
        FLEET, [trigger(secretsProfile="nowhere"), trigger(1, secretsProfile="prod")], simulate_down=["mini2"]
    )
    Draft202012Validator(load_schema("audit-report")).validate(report.as_json())
    assert set(load_schema("audit-report")["properties"]["findings"]["items"]["properties"]["code"]["enum"]) == set(
        CODES
    )


@pytest.mark.parametrize(
    ("extra", "golden_file"), [((), "golden.json"), (("--simulate-down", "mini1"), "golden-simulate-down.json")]
)
def test_golden_report(extra: tuple[str, ...], golden_file: str) -> None:
    triggers = str(DATA / "audit" / "triggers.json")
    result = run_cli_process("audit", "-i", str(INVENTORY), "--triggers", triggers, "--json", *extra)
    assert result.returncode == 1, result.stderr
    golden = json.loads((DATA / "audit" / golden_file).read_text())
    report = json.loads(result.stdout.replace(str(DATA / "audit"), "<data>"))
    assert report == golden


def test_exit_codes(tmp_path: Path) -> None:
    clean = tmp_path / "clean.json"
    clean.write_text(
        json.dumps({"triggers": [{"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github", "flow": "f"}}]})
    )
    assert run_cli("audit", "-i", str(INVENTORY), "--triggers", str(clean)).returncode == 0
    triggers = str(DATA / "audit" / "triggers.json")
    assert run_cli("audit", "-i", str(INVENTORY), "--triggers", triggers).returncode == 1
    warn_only = tmp_path / "warn.json"
    warn_only.write_text(
        json.dumps(
            {
                "triggers": [
                    {
                        "on": {"type": "label", "any": ["x"]},
                        "run": {"kind": "github", "flow": "f", "secretsProfile": "prod", "secrets": {"T": "t"}},
                    }
                ]
            }
        )
    )
    assert run_cli("audit", "-i", str(INVENTORY), "--triggers", str(warn_only)).returncode == 0
    assert run_cli("audit", "-i", str(INVENTORY), "--triggers", str(warn_only), "--fail-on", "warning").returncode == 1
    for args in (
        ["-i", str(tmp_path / "missing")],
        ["-i", str(INVENTORY), "--simulate-down", "nope"],
        ["-i", str(INVENTORY), "--triggers", str(tmp_path / "missing.json")],
        ["-i", str(INVENTORY), "--fail-on", "x"],
    ):
        result = run_cli("audit", *args)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr


def test_accepted_codes_are_shown_and_not_counted() -> None:
    triggers = str(DATA / "audit" / "triggers.json")
    found = json.loads(run_cli("audit", "-i", str(INVENTORY), "--triggers", triggers, "--json").stdout)
    errors = sorted({f["code"] for f in found["findings"] if f["severity"] == "error"})
    accept = [f"--accept={code}" for code in errors]
    result = run_cli("audit", "-i", str(INVENTORY), "--triggers", triggers, *accept)
    assert result.returncode == 0, result.stdout
    assert f"accepted on purpose, not counted: {', '.join(errors)}" in " ".join(result.stdout.split())
    assert f"{errors[0]} (accepted)" in result.stdout  # still shown, marked
    as_json = json.loads(run_cli("audit", "-i", str(INVENTORY), "--triggers", triggers, "--json", *accept).stdout)
    assert as_json["accepted"] == errors and as_json["summary"] == found["summary"]
    assert run_cli("audit", "-i", str(INVENTORY), "--triggers", triggers, *accept[1:]).returncode == 1
    unknown = run_cli("audit", "-i", str(INVENTORY), "--triggers", triggers, "--accept", "no-such-code")
    assert unknown.returncode == 2 and "no-such-code is not a finding code" in unknown.stderr


def test_bad_triggers_file_names_each_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    label = {"type": "label", "any": ["x"]}
    entries = [
        {"on": {"type": "push"}, "run": {"kind": "github", "flow": "f"}},
        {"on": label, "run": {"kind": "github", "flow": "f", "waitFor": [{"profile": "a:b"}]}},
        {"on": label, "run": {"kind": "github", "flow": "f", "secrets": {"TOKEN": "op://vault/very-secret"}}},
        {"on": label, "run": {"kind": "github", "flow": "f", "secrets": {"TOKEN": " op://vault/very-secret"}}},
    ]
    bad.write_text(json.dumps({"triggers": entries}))
    result = run_cli("audit", "-i", str(INVENTORY), "--triggers", str(bad))
    assert result.returncode == 2
    assert "trigger 0 on.type" in result.stderr and "trigger 1 run.waitFor[0]" in result.stderr
    assert "trigger 3 run.secrets.TOKEN" in result.stderr and "trigger 2" not in result.stderr
    assert "very-secret" not in result.stderr  # a refusal names the field, never its value


@pytest.mark.redis
async def test_live_audit_against_a_real_registry(valkey_url: str, client: aioredis.Redis, tmp_path: Path) -> None:
    mini1 = HostRegistry(client, "mini1")
    await mini1.start({"routes": "true", "caps": serialize_caps(capability_tokens({"prod": "/p"})), "tz": "UTC"})
    stray = HostRegistry(client, "laptop")
    await stray.start({"routes": "false", "caps": "", "tz": "UTC"})
    triggers = tmp_path / "t.json"
    run = {"kind": "github", "flow": "deploy", "secretsProfile": "prod", "secrets": {"TOKEN": "t"}}
    triggers.write_text(json.dumps({"triggers": [{"on": {"type": "label", "any": ["pi:deploy"]}, "run": run}]}))
    result = await asyncio.to_thread(
        run_cli,
        "audit",
        "-i",
        str(INVENTORY),
        "--triggers",
        str(triggers),
        "--live",
        "--valkey-url",
        valkey_url,
        "--json",
    )
    report = json.loads(result.stdout)
    found = {(f["code"], tuple(f["hosts"])) for f in report["findings"]}
    assert report["live"] == "ok"
    assert ("caps-drift", ("mini1",)) in found  # the inventory also declares w:ci for mini1
    assert ("host-silent", ("mini2",)) in found and ("host-unknown", ("laptop",)) in found
    assert ("peer-undeclared", ("laptop",)) in found
    dead = await asyncio.to_thread(
        run_cli,
        "audit",
        "-i",
        str(INVENTORY),
        "--triggers",
        str(triggers),
        "--valkey-url",
        "redis://127.0.0.1:1/0",
        "--json",
    )
    assert dead.returncode == 1 and json.loads(dead.stdout)["live"].startswith("unreachable")
    await mini1.close()
    await stray.close()


@pytest.mark.redis
async def test_hosts_route_and_runs_commands(valkey_url: str, client: aioredis.Redis, tmp_path: Path) -> None:
    mini1 = HostRegistry(client, "mini1")
    await mini1.start({"routes": "true", "caps": "s:prod", "version": "0.1.0", "tz": "UTC"})
    mini2 = HostRegistry(client, "mini2")
    await mini2.start({"routes": "true", "caps": "", "version": "0.1.0", "tz": "UTC"})
    async with open_queues(valkey_url, ["pi-jobs", "pi-jobs@mini1"]) as queues:
        await queues["pi-jobs"].add("github", forge_job(1), {"jobId": "plain"})
        for number in (2, 3):
            await queues["pi-jobs@mini1"].add(
                "github", forge_job(number, secretsProfile="prod"), {"jobId": f"p{number}"}
            )
    listed = await asyncio.to_thread(run_cli, "hosts", "--valkey-url", valkey_url, "--json")
    assert [(h["name"], h["couldRun"]) for h in json.loads(listed.stdout)] == [("mini1", 3), ("mini2", 1)]
    table = await asyncio.to_thread(run_cli_process, "hosts", "--valkey-url", valkey_url, columns=80)
    assert not set("│┃━─…") & set(table.stdout)  # through a pipe: plain columns at their natural width
    assert plain_rows(table.stdout)["name"] == ["name", "routes", "caps", "stale", "version", "tz", "concurrency",
                                                "free", "could run"]  # fmt: skip
    assert plain_rows(table.stdout)["mini1"][:3] == ["mini1", "true", "s:prod"]
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"trigger": {"deliveryId": "d-1"}, "secretsProfile": "prod"}))
    routed = await asyncio.to_thread(run_cli, "route", "--job", str(job), "--valkey-url", valkey_url)
    assert "queue: pi-jobs@mini1" in routed.stdout and "mini2: lacks s:prod" in routed.stdout
    job.write_text(json.dumps({"trigger": {"deliveryId": "d-2"}, "secretsProfile": "nowhere"}))
    shared = await asyncio.to_thread(run_cli, "route", "--job", str(job), "--valkey-url", valkey_url)
    assert "queue: pi-jobs (no live host can serve it" in shared.stdout
    offline = await asyncio.to_thread(run_cli, "route", "--job", str(job), "-i", str(INVENTORY))
    assert offline.returncode == 0 and "queue: pi-jobs" in offline.stdout
    ended = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    (tmp_path / "logs").mkdir()
    refused = {"jobId": "gh-22222222-2222-2222-2222-222222222222", "endedAt": ended, "host": "mini1",
               "kind": "github", "outcome": "refused", "reason": "secret-profile-unknown"}  # fmt: skip
    (tmp_path / "logs" / "gh-d-1.json").write_text(json.dumps(refused))
    runs = await asyncio.to_thread(
        run_cli, "runs", "--logs-dir", str(tmp_path / "logs"), "--valkey-url", valkey_url, "--json"
    )
    assert json.loads(runs.stdout)["runs"][0]["host"] == "mini1"
    piped = await asyncio.to_thread(
        run_cli_process, "runs", "--logs-dir", str(tmp_path / "logs"), "--valkey-url", valkey_url, columns=80
    )
    said = [ended, refused["jobId"], "mini1", "github", "refused", refused["reason"], "-"]  # used: nothing said
    assert plain_rows(piped.stdout)[ended] == said
    alone = await asyncio.to_thread(
        run_cli, "runs", "--logs-dir", str(tmp_path / "logs"), "--valkey-url", "redis://127.0.0.1:1/0"
    )
    assert "RUNS · this host only" in alone.stdout
    assert (await asyncio.to_thread(run_cli, "hosts", "--valkey-url", "redis://127.0.0.1:1/0")).returncode == 1
    live = await read_live_hosts(client)
    assert isinstance(live, LiveHosts)
    await mini1.close()
    await mini2.close()


def test_the_example_triggers_exercise_every_trigger_outcome() -> None:
    example = DATA.parent.parent / "inventory.example"
    codes: set[str] = set()
    for extra in ([], ["--simulate-down", "mini1"]):
        result = run_cli(
            "audit", "-i", str(example / "hosts.yml"), "--triggers", str(example / "triggers.json"), "--json", *extra
        )
        assert result.returncode == 1  # the example has error findings on purpose
        codes |= {finding["code"] for finding in json.loads(result.stdout)["findings"]}
    trigger_outcomes = {
        "profile-undeclared",
        "profile-hosts-down",
        "profile-unroutable",
        "needs-split",
        "default-profile-missing",
        "profile-single-host",
        "profile-routed",
        "profile-everywhere",
    }
    assert codes == trigger_outcomes  # and no host finding: the example inventory itself is clean


def test_a_silent_hosts_queue_says_when_its_jobs_move() -> None:
    fleet = [FLEET[0], host("mini2", "mini2", None, {"ci": "/c"}, rehome_after_ms=60_000)]
    rows = [row("mini1", "s:prod,w:ci")]
    now = 1_800_000_000_000
    queues = [
        HostQueue("pi-jobs@mini2", "mini2", QueueCounts(waiting=2, delayed=1), now - 30_000),
        HostQueue("pi-jobs@mini1", "mini1", QueueCounts(waiting=5), None),  # live: nothing to say
        HostQueue("pi-jobs@gone", "gone", QueueCounts(), now - 999_999),  # empty: nothing to move
    ]
    report = audit(fleet, [], live_rows=rows, live_state="ok", host_queues=queues, now_ms=now)
    (finding,) = [f for f in report.findings if f.code == "queue-silent-host"]
    assert finding.hosts == ("mini2",) and "2 waiting, 1 delayed" in finding.message
    assert iso_string(now + 30_000) in finding.message  # its own threshold from the inventory, 60 s
    due = audit(fleet, [], live_rows=rows, live_state="ok", host_queues=queues[:1], now_ms=now + 60_000)
    assert "on the next sweep" in next(f.message for f in due.findings if f.code == "queue-silent-host")


def test_a_row_the_reader_refused_is_a_finding() -> None:
    from pi_dispatch.fleet.registry import InvalidRow

    refused = [InvalidRow("evil\x1b[2J", "its name is not a worker name")]
    report = audit(FLEET, [], live_rows=[], live_state="ok", invalid_rows=refused)
    (finding,) = [f for f in report.findings if f.code == "row-invalid"]
    assert "its name is not a worker name" in finding.message and "evil" in finding.subject


def test_the_live_audit_judges_the_store_itself() -> None:
    from pi_dispatch.fleet.storeview import Replica, StoreState

    alone = StoreState("master", (), "allkeys-lru", 0, promoted=False)
    synced = (Replica("10.0.0.2:6379", "online", 0), Replica("10.0.0.3:6379", "online", 1))
    unguarded = StoreState("master", synced, "noeviction", 0, promoted=False)
    guarded = StoreState("master", synced, "noeviction", 1, promoted=True)
    lagging = StoreState("master", (Replica("10.0.0.2:6379", "online", 9),), "noeviction", 1, promoted=False)
    rows = [row("mini1", "s:prod,w:ci")]

    now = 1_800_000_000_000

    def judged(state: StoreState) -> list[str]:
        report = audit(FLEET[:1], [], live_rows=rows, live_state="ok", store=state, now_ms=now)
        return [code for code in codes(report) if code.startswith("store-")]

    assert judged(alone) == ["store-eviction", "store-no-replica"]
    assert judged(unguarded) == ["store-writes-unguarded"]
    assert judged(guarded) == []
    assert judged(lagging) == ["store-no-replica"]  # a replica 9 s behind is not one a failover can trust
    from pi_dispatch.fleet.storereset import FleetEpoch

    forgetful = StoreState("master", synced, "noeviction", 1, promoted=False, persistence="off")
    assert judged(forgetful) == ["store-not-persistent"]
    emptied = FleetEpoch("r" * 40, now - 86_400_000, resets=2, resetAt=now - 60_000)
    assert judged(StoreState("master", synced, "noeviction", 1, promoted=False, epoch=emptied)) == ["store-reset"]
    assert audit(FLEET[:1], [], store=alone).findings == []  # without --live the store is not read


def test_a_host_unhealthy_by_its_own_account_is_a_finding_with_its_reason() -> None:
    reason = "egress-proxy-stopped: nothing answers on the pi-egress gateway's port 3128; fix: start the egress proxy"
    sick = row("mini1", "s:prod,w:ci", unhealthy=reason)
    report = audit(FLEET[:2], [], live_rows=[sick, row("mini2", "s:prod,w:ci")], live_state="ok", now_ms=10_000_000)
    found = [f for f in report.findings if f.code == "host-unhealthy"]
    assert [f.hosts for f in found] == [("mini1",)] and found[0].severity == "warning"
    assert found[0].message == f"takes no job: {reason}"


def test_workers_that_log_in_with_the_stores_own_password_are_named() -> None:
    """A worker presenting a password as the default user holds the store's administration in its env file."""
    shared = host("mini1", "mini1", valkey_url="redis://store:6379/0", valkey_password="the-stores-own")
    own = host("mini2", "mini2", valkey_url="redis://pi-worker@store:6379/0", valkey_password="pi-workers-own")
    open_store = host("mini3", "mini3", valkey_url="redis://store:6379/0")  # no password: nothing to leak
    found = [
        finding for finding in audit([shared, own, open_store], []).findings if finding.code == "store-user-shared"
    ]
    assert [(finding.hosts, finding.severity) for finding in found] == [(("mini1",), "warning")]
