"""The demo's cron table: each host's BullMQ job schedulers as its worker reconciled them, read back from Valkey."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pi_dispatch.audit.cron import hosts_cron
from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.console.output import show
from pi_dispatch.console.terminal import keep_whole
from pi_dispatch.core.jscompat import iso_string
from pi_dispatch.core.keys import SHARED_QUEUE, host_queue_name
from pi_dispatch.fleet.registry import LiveHosts, read_live_hosts
from pi_dispatch.triggers.schedules import cron_entries

RECONCILE_TIMEOUT_S: Final = 15.0


async def _schedulers(url: str, queue_name: str, expected: int) -> list[dict[str, Any]]:
    """The queue's schedulers, once the worker has put as many there as its file declares (or the wait ran out)."""
    from bullmq import Queue

    queue = Queue(queue_name, {"connection": url})
    try:
        deadline = time.monotonic() + RECONCILE_TIMEOUT_S
        while True:
            found: list[dict[str, Any]] = await queue.getJobSchedulers(0, -1, True)
            if len(found) >= expected or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.2)
    finally:
        await queue.close()


async def show_cron(console: Console, url: str, client: Any, hosts: list[InventoryHost]) -> None:
    """One row per scheduler of each host that declares a triggers file."""
    expected = {name: len(cron_entries(found)) for name, found in hosts_cron(hosts).items()}
    live = await read_live_hosts(client)
    rows = {str(row.get("name")): row for row in live.hosts} if isinstance(live, LiveHosts) else {}
    table = Table(title="Cron: each host's triggers file, as BullMQ job schedulers on its own queue")
    for column in ("host", "scheduler", "pattern", "queue", "next run", "row fpCron"):
        table.add_column(column)
    for host in hosts:
        if host.name not in expected:
            continue
        name = host.worker_name
        queue_name = host_queue_name(name) if name else SHARED_QUEUE
        row = rows.get(name or "", {})
        zone = str(row.get("tz") or "the host's zone")
        for scheduler in await _schedulers(url, queue_name, expected[host.name]):
            upcoming = scheduler.get("next")
            table.add_row(
                host.name,
                escape(str(scheduler.get("key"))),
                escape(f"{scheduler.get('pattern')} ({scheduler.get('tz') or zone})"),
                queue_name,
                iso_string(int(upcoming)) if isinstance(upcoming, int) else "-",
                str(row.get("fpCron") or "-"),
            )
    show(console, keep_whole(table, "host", "scheduler", "queue", "next run"))
    console.print(
        "Each fires a local job (id repeat:<scheduler>:<millis>) on its host's own queue; it is never routed, so "
        "the audit checks that host serves what the entry needs."
    )
