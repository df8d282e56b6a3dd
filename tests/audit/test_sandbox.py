"""The live audit's runtime findings: a host whose row does not list a runtime its inventory needs, and a runsc
profile no live host can run."""

from __future__ import annotations

from typing import Any

from pi_dispatch.audit.sandbox import runtime_findings
from pi_dispatch.config.hostvars import PREFIX, InventoryHost


def host(name: str, **declared: Any) -> InventoryHost:
    return InventoryHost(name, {f"{PREFIX}name": name, **{PREFIX + key: value for key, value in declared.items()}}, "t")


def row(name: str, caps: str, runtimes: str = "", stale: int = 0) -> dict[str, object]:
    return {"name": name, "caps": caps, "routes": "true", "staleMs": stale, "runtimes": runtimes}


HOSTS = [
    host("mini1", secret_profiles={"deploy": "/r"}, runsc_profiles=["deploy"]),
    host("mini2", secret_profiles={"deploy": "/r"}, runsc_profiles=["deploy"]),
    host("mini3", wait_profiles={"ci": "/c"}, job_runtime="runsc"),
]


def test_hosts_that_run_what_they_need_say_nothing() -> None:
    rows = [row("mini1", "s:deploy", "runsc"), row("mini2", "", ""), row("mini3", "w:ci", "runsc")]
    found = [(f.code, f.subject) for f in runtime_findings(HOSTS, rows)]
    assert found == [("runtime-missing", "host mini2")]  # mini1 still runs deploy's jobs


def test_a_runsc_profile_no_live_host_can_run_is_an_error_and_each_failing_host_is_named() -> None:
    rows = [row("mini1", "", ""), row("mini2", "s:deploy", "runsc", stale=60_000), row("mini3", "w:ci", "")]
    found = runtime_findings(HOSTS, rows)
    assert [(f.code, f.subject, f.severity) for f in found] == [
        ("runtime-missing", "host mini1", "warning"),
        ("runtime-missing", "host mini3", "warning"),  # its own runtime: it takes no job at all
        ("runsc-profile-unserved", "profile 'deploy'", "error"),  # mini2 could, but its row is stale
    ]
    assert "pi_dispatch_worker_job_runtime" in found[1].message and "pi_dispatch_worker_gvisor" in found[2].fix
