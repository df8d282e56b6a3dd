"""`pi-dispatch demo`: a small fleet on an embedded Valkey, showing where jobs go and why.

Three hosts publish real registry rows (one with a secret profile, two with a wait profile, one with
no declared name) and a fourth has gone quiet. Sample forge deliveries are routed exactly as the
enqueue path routes them, each host records the runs it would take, and the merged fleet history is
read back. Everything it starts is stopped on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pi_dispatch import __version__
from pi_dispatch.capabilities import RouteTable, capability_tokens, explain_route, serialize_caps
from pi_dispatch.clock import wall_ms
from pi_dispatch.embedded import EmbeddedValkey
from pi_dispatch.history import RunRecorder, read_records
from pi_dispatch.jobs import forge_delivery_job_id
from pi_dispatch.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.mirror import RunMirror, hosts_in, merge_runs, read_mirrored_runs
from pi_dispatch.names import sanitize_worker_name
from pi_dispatch.records import build_record
from pi_dispatch.registry import HostRegistry, LiveHosts, read_live_hosts
from pi_dispatch.valkey import connect


@dataclass(frozen=True)
class DemoHost:
    hostname: str
    declared_name: str | None
    secret_profiles: dict[str, str] = field(default_factory=dict)
    wait_profiles: dict[str, str] = field(default_factory=dict)
    silent_for_ms: int = 0

    @property
    def name(self) -> str:
        return self.declared_name or sanitize_worker_name(self.hostname)


FLEET = (
    DemoHost("mini1.local", "mini1", {"prod": "/opt/pi/resolve-prod.sh"}, {"ci": "/opt/pi/wait-ci.sh"}),
    DemoHost("mini2.local", "mini2", {}, {"ci": "/opt/pi/wait-ci.sh"}),
    DemoHost("Mac-Mini-3.local", None, {"legacy": "/opt/pi/resolve-legacy.sh"}),
    DemoHost("mini4.local", "mini4", {"prod": "/opt/pi/resolve-prod.sh"}, silent_for_ms=120_000),
)

SAMPLE_JOBS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("d-1001", {"flow": "triage"}),
    ("d-1002", {"flow": "deploy", "secretsProfile": "prod"}),
    ("d-1003", {"flow": "review", "waitFor": [{"profile": "ci"}]}),
    ("d-1004", {"flow": "review", "waitFor": [{"profile": "ci"}], "replica": 1, "replicas": 3}),
    ("d-1004", {"flow": "review", "waitFor": [{"profile": "ci"}], "replica": 2, "replicas": 3}),
    ("d-1004", {"flow": "review", "waitFor": [{"profile": "ci"}], "replica": 3, "replicas": 3}),
    ("d-1005", {"flow": "release", "secretsProfile": "prod", "waitFor": [{"profile": "ci"}]}),
    ("d-1006", {"flow": "migrate", "secretsProfile": "nowhere"}),
    ("d-1007", {"flow": "legacy", "secretsProfile": "legacy"}),
)


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _host_facts(host: DemoHost) -> dict[str, object]:
    return {
        "version": __version__,
        "image": "pi-job:latest",
        "imageDigest": "",
        "concurrency": "3",
        "pid": str(os.getpid()),
        "routes": "true" if host.declared_name else "false",
        "caps": lambda: serialize_caps(capability_tokens(host.secret_profiles, host.wait_profiles)),
        "tz": "UTC",
    }


def _lagging(now: Callable[[], int], behind_ms: int) -> Callable[[], int]:
    """A host clock that stopped beating behind_ms ago, to show a stale row."""
    return lambda: now() - behind_ms


async def run_demo(console: Console, now: Callable[[], int] = wall_ms) -> int:
    """Run the demo and return an exit code."""
    console.rule("[bold]pi-dispatch demo: capability routing on a shared Valkey")
    with EmbeddedValkey() as valkey, tempfile.TemporaryDirectory(prefix="pi-dispatch-demo-") as scratch:
        console.print(f"Valkey: {valkey.origin}, {valkey.url} (private to this demo, stopped on exit)")
        client = connect(valkey.url)
        registries = [HostRegistry(client, host.name, now=_lagging(now, host.silent_for_ms)) for host in FLEET]
        try:
            for host, registry in zip(FLEET, registries, strict=True):
                await registry.start(_host_facts(host))
            await _show_fleet(console, client, now)
            routed = await _route_jobs(console, client, now)
            await _record_runs(console, client, Path(scratch), routed, now)
        finally:
            for registry in registries:
                await registry.close()
            await client.aclose()
    console.print("[green]Stopped the demo's Valkey; nothing is left running.")
    return 0


async def _show_fleet(console: Console, client: Any, now: Callable[[], int]) -> None:
    live = await read_live_hosts(client, now=now)
    assert isinstance(live, LiveHosts)
    table = Table(title="Registry: host:live and host:h:<name>, as every router reads them")
    for column in ("name", "routes", "caps", "stale"):
        table.add_column(column)
    for host in live.hosts:
        stale = host.get("staleMs")
        table.add_row(
            str(host["name"]),
            str(host["routes"]),
            str(host["caps"]) or "-",
            f"{int(stale) / 1000:.0f} s" if isinstance(stale, int) else "?",
        )
    console.print(table)


async def _route_jobs(
    console: Console, client: Any, now: Callable[[], int]
) -> list[tuple[str, dict[str, Any], str | None]]:
    live = await read_live_hosts(client, now=now)
    assert isinstance(live, LiveHosts)
    router = RouteTable.from_hosts(live.hosts)
    table = Table(title="Routing: one registry read, one decision per delivery", show_lines=True)
    for column in ("job id", "needs", "queue", "why"):
        table.add_column(column, overflow="fold")
    routed = []
    for delivery_id, data in SAMPLE_JOBS:
        job_id = forge_delivery_job_id("github", delivery_id, data.get("replica"))
        explanation = explain_route(live.hosts, data, job_id)
        host = router.route(list(explanation.needs), job_id)
        assert host == explanation.host  # the snapshot router and the literal port agree
        if host is not None:
            capable = [v.name for v in explanation.hosts if v.live and not v.lacks and v.routes]
            passed = [f"{v.name} {v.reason}" for v in explanation.hosts if not v.live or v.lacks]
            why = f"capable: {', '.join(capable)} (picked by job-id hash)"
            if passed:
                why += "; not: " + "; ".join(passed)
        else:
            why = str(explanation.abstention)
        queue = host_queue_name(host) if host else SHARED_QUEUE
        table.add_row(job_id, ", ".join(explanation.needs) or "-", queue, why)
        routed.append((job_id, data, host))
    console.print(table)
    return routed


async def _record_runs(
    console: Console,
    client: Any,
    scratch: Path,
    routed: list[tuple[str, dict[str, Any], str | None]],
    now: Callable[[], int],
) -> None:
    live_hosts = [host for host in FLEET if not host.silent_for_ms]
    recorders = {
        host.name: RunRecorder(scratch / host.name, RunMirror(client, 30, now=now) if host.declared_name else None)
        for host in live_hosts
    }
    # Work on the shared queue goes to whichever host pops it first; the demo lets them take turns.
    shared_takers = itertools.cycle(sorted((host.name for host in live_hosts), key=lambda name: name != "mini2"))
    for index, (job_id, data, host) in enumerate(routed):
        taker = host or next(shared_takers)
        started = now() - 60_000 + index * 1_000
        result = {"outcome": "completed", "exitCode": 0}
        needs_secret = data.get("secretsProfile")
        declared = next(h for h in FLEET if h.name == taker)
        if needs_secret and needs_secret not in declared.secret_profiles:
            result = {"outcome": "policy", "reason": "secret-profile-unknown", "exitCode": None}
        record = build_record(
            job_id=job_id,
            job_name="github",
            data={"kind": "github", "repo": "acme/web", "target": {"type": "issue", "number": 40 + index}, **data},
            attempts_made=0,
            result=result,
            error=None,
            started_at=_iso(started),
            ended_at=_iso(started + 500),
            host=taker,
        )
        recorders[taker].record(record)
    for recorder in recorders.values():
        await recorder.settle()
    viewer = live_hosts[0].name
    mirrored = await read_mirrored_runs(client)
    merged = merge_runs(read_records(scratch / viewer), mirrored.runs, limit=20)
    table = Table(
        title=f"Runs as {viewer} shows them: its own record files merged with the fleet mirror ({mirrored.degraded})"
    )
    for column in ("job id", "host", "outcome", "reason"):
        table.add_column(column)
    for run in merged:
        table.add_row(str(run["jobId"]), str(run["host"]), str(run["outcome"]), str(run["reason"] or "-"))
    console.print(table)
    unnamed = [h.name for h in live_hosts if not h.declared_name]
    console.print(
        f"Hosts in the merged history: {', '.join(hosts_in(merged))}. "
        f"{', '.join(unnamed)} declared no PI_WORKER_NAME, so its runs stay on its own disk and are not mirrored."
    )


def main(console: Console | None = None) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run_demo(console or Console()))
    return 130
