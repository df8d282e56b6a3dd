"""`pi-dispatch top`: frames rendered from a live example fleet, an unreachable store, and the live screen left
with `q` in a real terminal."""

from __future__ import annotations

import asyncio
import io
import re
import time
from typing import Any

import pytest
from bullmq import Queue
from rich.console import Console

from pi_dispatch.console.output import show
from pi_dispatch.console.top import Frame, render
from pi_dispatch.demo.run import EXAMPLE
from pi_dispatch.fleet.hosts import FleetHost, HostQueue, QueueCounts, heartbeat_row
from pi_dispatch.fleet.inventory import load_inventory
from pi_dispatch.fleet.mirror import RunMirror
from pi_dispatch.fleet.receivers import ReceiverState, report_receiver
from pi_dispatch.fleet.registry import HostRegistry
from pi_dispatch.infra.valkey import connect
from pi_dispatch.testing.jobs import forge_job
from tests.support.helpers import Terminal, plain_rows, run_cli


def shown(frame: Frame, *, live: bool = False) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render(frame, 120_000, live=live))
    return console.export_text()


def test_a_frame_shows_store_values_as_text_and_marks_a_host_that_does_not_drain() -> None:
    now = 1_800_000_000_000
    rows: list[dict[str, object]] = [
        {
            "name": "mini1",
            "routes": "true",
            "caps": "s:prod",
            "staleMs": 2_000,
            "startedAt": str(now - 600_000),
            "concurrency": "2",
            "slotsFree": "1",
            "polledAt": str(now - 3_000),
            "consumer": "ok",
        },
        {"name": "mini2", "routes": "true", "caps": "", "staleMs": 1_000, "concurrency": "2", "consumer": "stuck"},
        {"name": "node1", "routes": "false", "caps": "", "staleMs": 900_000},
    ]
    queues = [
        HostQueue("pi-jobs", "", QueueCounts(waiting=3, failed=1), None, now - 42_000),
        HostQueue("pi-jobs@gone", "gone", QueueCounts(waiting=2), now - 60_000),
    ]
    runs: list[Any] = [{"endedAt": "[red]x[/red]\x1b[2J", "jobId": "gh-1", "host": "mini1", "outcome": "completed"}]
    text = shown(Frame(now, "redis://127.0.0.1:6379", None, rows, [], queues, runs, "ok"))
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 3}
    assert "yes" in lines["mini1"] and "1/2" in lines["mini1"] and "3 s ago" in lines["mini1"]
    assert "10 s ago" not in lines["mini1"] and "NOT DRAINING" not in lines["mini1"]
    assert "no: stuck" in lines["mini2"] and "NOT DRAINING" in lines["mini2"]
    assert "no: silent" in lines["node1"] and "NOT DRAINING" not in lines["node1"]
    assert "42 s ago" in lines["pi-jobs"] and "in 60 s" in lines["pi-jobs@gone"]
    assert "[red]x[/red]\\x1b[2J" in text  # markup and escapes shown as text, never acted on
    assert "q or Ctrl-C" not in text


def test_a_large_fleet_shows_the_hosts_and_queues_that_need_a_look_first_and_says_what_it_left_out() -> None:
    now = 1_800_000_000_000
    rows: list[dict[str, object]] = [
        {"name": f"idle{number:03d}", "routes": "true", "caps": "", "staleMs": 1_000, "concurrency": "2",
         "slotsFree": "2", "consumer": "ok"}
        for number in range(200)
    ]  # fmt: skip
    rows += [
        {"name": "zbusy", "routes": "true", "caps": "", "staleMs": 1_000, "concurrency": "4", "slotsFree": "0"},
        {"name": "zgone", "routes": "true", "caps": "", "staleMs": 900_000},
    ]
    queues = [HostQueue("pi-jobs", "", QueueCounts(), None)]
    queues += [
        HostQueue(f"pi-jobs@idle{number:03d}", f"idle{number:03d}", QueueCounts(), None) for number in range(200)
    ]
    queues += [
        HostQueue("pi-jobs@zbusy", "zbusy", QueueCounts(waiting=5, active=4), None),
        HostQueue("pi-jobs@zgone", "zgone", QueueCounts(waiting=1), now - 60_000),
    ]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render(Frame(now, "redis://127.0.0.1:6379", None, rows, [], queues), 120_000, live=False, rows=4))
    text = console.export_text()
    names = [line.split("│")[1].strip() for line in text.splitlines() if line.count("│") > 3]
    assert names[:4] == ["zgone", "zbusy", "idle000", "idle001"]  # the silent, the busiest, then by name
    assert "idle002" not in names and "198 more hosts not shown" in text
    assert names[4:] == ["pi-jobs", "pi-jobs@zgone", "pi-jobs@zbusy"]  # empty host queues left out
    assert "200 empty host queues" in text
    everything = Console(width=200, record=True, file=io.StringIO())
    everything.print(render(Frame(now, "x", None, rows, [], queues), 120_000, live=False, rows=0))
    assert "idle199" in everything.export_text() and "more hosts" not in everything.export_text()


def test_an_unreachable_store_is_a_frame_that_says_so() -> None:
    frame = Frame(1_800_000_000_000, "redis://127.0.0.1:1", unreachable="ConnectionError: refused")
    assert "Valkey is unreachable (ConnectionError: refused)." in shown(frame)
    assert "trying again every second" in shown(frame, live=True)
    answered = run_cli("top", "--once", "--valkey-url", "redis://127.0.0.1:1")
    assert answered.returncode == 1 and "Valkey is unreachable" in answered.stdout


async def _example_fleet(url: str) -> list[HostRegistry]:
    """The example inventory's workers as their registries publish them, jobs on the queues, a mirrored run."""
    client = connect(url)
    await client.flushdb()
    registries = []
    for host in load_inventory(EXAMPLE / "hosts.yml"):
        fleet_host = FleetHost.of_inventory(host)
        registry = HostRegistry(client, fleet_host.worker_name)
        facts: dict[str, Any] = dict(heartbeat_row(fleet_host, concurrency=2))
        facts |= {"polledAt": str(int(time.time() * 1000)), "slotsFree": "2", "consumer": "ok"}
        if fleet_host.worker_name == "mini2":
            facts["consumer"] = "stuck"
        await registry.start(facts)
        registries.append(registry)
    for queue_name, count in (("pi-jobs", 3), ("pi-jobs@mini1", 2)):
        queue = Queue(queue_name, {"connection": url})
        for number in range(count):
            await queue.add("github", forge_job(number), {"jobId": f"gh-{queue_name}-{number}"})
        await queue.close()
    await report_receiver(client, ReceiverState("edge:3000", 2, 1_024, True, int(time.time() * 1000)))
    record = {"jobId": "gh-done", "host": "mini1", "outcome": "completed", "endedAt": "2026-11-30T10:00:00.000Z"}
    await RunMirror(client, 14).mirror(record, "gh-done")
    return registries


@pytest.mark.redis
async def test_top_once_renders_the_live_example_fleet(valkey_url: str) -> None:
    registries = await _example_fleet(valkey_url)
    try:
        answered = await asyncio.to_thread(run_cli, "top", "--once", "--valkey-url", valkey_url)
    finally:
        for registry in registries:
            await registry.close()
        await registries[0].client.aclose()
    assert answered.returncode == 0, answered.stderr
    assert not set("│┃━─") & set(answered.stdout)  # through a pipe: plain columns, one record a line
    lines = plain_rows(answered.stdout)
    assert lines["mini1"][1] == "yes" and lines["mini1"][2] == "s:prod,w:ci,w:nightly"
    assert lines["mini2"][-1] == "NOT DRAINING" and lines["mini2"][1] == "no: stuck"
    assert "shared only" in lines["mini3"][1]  # no declared name: it drains the shared queue only
    could_run = {host: lines[host][6] for host in ("mini1", "mini3")}
    assert could_run == {"mini1": "5", "mini3": "3"}  # its own queue's and the shared ones; a nameless host's shared
    assert lines["pi-jobs"][1] == "3" and lines["pi-jobs@mini1"][1] == "2"
    assert lines["2026-11-30T10:00:00.000Z"][1:4] == ["gh-done", "mini1", "completed"]
    assert "receivers: edge:3000 spool 2 (1,024 bytes), store refusing its writes" in answered.stdout


@pytest.mark.redis
@pytest.mark.parametrize("key", [b"q", b"\x03"], ids=["q", "ctrl-c"])
def test_the_live_view_refreshes_in_a_terminal_and_a_key_leaves_it(valkey_url: str, key: bytes) -> None:
    terminal = Terminal("top", "--valkey-url", valkey_url)
    try:
        terminal.read_until(lambda drawn: drawn.count(b"pi-dispatch top") >= 2)  # a second frame: it refreshes
        assert b"\x1b[?1049h" in terminal.output  # the alternate screen: full-screen
        terminal.press(key)
        assert terminal.wait(10) == 0
        assert b"\x1b[?1049l" in terminal.output  # and the screen it found, given back
    finally:
        terminal.close()


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_identifiers_stay_whole_at_80_columns_and_through_a_pipe(terminal: bool) -> None:
    now = 1_800_000_000_000
    rows: list[dict[str, object]] = [
        {"name": f"mini{n}-of-a-long-hostname", "routes": "true", "caps": "s:prod,w:ci,w:nightly", "staleMs": 13_000}
        for n in (1, 2)
    ]
    queues = [HostQueue("pi-jobs", "", QueueCounts(waiting=1), None, None)]
    queues += [HostQueue(f"pi-jobs@mini{n}", f"mini{n}", QueueCounts(waiting=2), None, now - 5_000) for n in (1, 2)]
    job_id = "gh-22222222-2222-2222-2222-222222222222"
    runs: list[Any] = [
        {"endedAt": "2026-12-01T08:15:22.123Z", "jobId": job_id, "host": "mini1", "outcome": "refused",
         "reason": "secret-profile-unknown"},
    ]  # fmt: skip
    console = Console(width=80, file=io.StringIO(), force_terminal=terminal, color_system=None)
    show(console, render(Frame(now, "redis://127.0.0.1:6379", None, rows, [], queues, runs, "ok"), 120_000))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    words = set(re.split(r"[\s│┃]+", text))
    wanted = {"pi-jobs@mini1", "pi-jobs@mini2", job_id, "2026-12-01T08:15:22.123Z", "secret-profile-unknown"}
    assert wanted | {"mini1-of-a-long-hostname", "routable", "could"} <= words
    assert "13 s ago" in text  # a short value never wraps
    if not terminal:  # plain columns, one record a line, nothing drawn
        assert not set("│┃━─…") & set(text)
        assert plain_rows(text)["2026-12-01T08:15:22.123Z"] == [
            "2026-12-01T08:15:22.123Z", job_id, "mini1", "refused", "secret-profile-unknown", "-",  # used: nothing said
        ]  # fmt: skip
