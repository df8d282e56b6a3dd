"""`pi-dispatch top`: the fleet as it runs, one frame about every second.

A frame costs a few round trips whatever the store holds: the registry (SMEMBERS, then one pipelined HGETALL per
host), the silent hosts (`rehome:silent`), every queue's counters, re-home clock and oldest waiting jobs in one
(`fleet/queueview.py`; from those, how many each host could run, beside its used/total slots), the newest
mirrored runs (ZREVRANGEBYSCORE with a LIMIT, then MGET) and each receiver's line (one HGETALL). The host queues
read are those of the registry's routable hosts, of the silent hosts (a re-home sweep also SCANs for queues nobody
registered, every ten minutes fleet-wide) and any seen before. A frame of a large fleet shows at most ROWS lines
per table, what needs a look first, and says how many it left out. An unreachable store gives a frame that says
so, and the next frame tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pi_dispatch.console.output import show
from pi_dispatch.console.plaintext import plain
from pi_dispatch.console.rowview import clock_note, run_usage, typed_row
from pi_dispatch.console.terminal import keep_whole, visible
from pi_dispatch.core.capabilities import is_draining, is_live, is_stuck, unhealthy_reason
from pi_dispatch.core.jscompat import finite, iso_string, js_number
from pi_dispatch.core.keys import SHARED_QUEUE
from pi_dispatch.core.scopedlimits import ScopedLimits
from pi_dispatch.core.storeusers import reads_configuration
from pi_dispatch.fleet.backlog import BACKLOG_READ, runnable, shown_count
from pi_dispatch.fleet.hosts import FleetHost, HostQueue
from pi_dispatch.fleet.limitview import LimitsView, limits_summary, published_caps, read_limits
from pi_dispatch.fleet.liveness import not_draining
from pi_dispatch.fleet.mirror import read_mirrored_runs
from pi_dispatch.fleet.queueview import read_queues
from pi_dispatch.fleet.receivers import ReceiverState, read_receivers
from pi_dispatch.fleet.registry import InvalidRow, LiveHosts, read_live_hosts
from pi_dispatch.fleet.rehome import known_host_queues
from pi_dispatch.fleet.storeview import StoreState, read_store_state
from pi_dispatch.infra.clock import wall_ms
from pi_dispatch.infra.signals import STOP_SIGNALS
from pi_dispatch.infra.valkey import STORE_FAULTS, describe

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from pi_dispatch.infra.store import StoreAddress

REFRESH_S: Final = 1.0
ROWS: Final = 40  # per table, unless asked otherwise
LATEST_RUNS: Final = 10
QUIT_KEYS: Final = frozenset(b"qQ")


@dataclass(frozen=True)
class Frame:
    """What one refresh read. `unreachable` says why there is nothing else."""

    at_ms: int
    store: str
    unreachable: str | None = None
    hosts: list[dict[str, object]] = field(default_factory=list)
    invalid: list[InvalidRow] = field(default_factory=list)
    queues: list[HostQueue] = field(default_factory=list)  # the shared queue first, then each host's
    runs: list[Any] = field(default_factory=list)
    mirror: str = "off"
    could_run: dict[str, int] = field(default_factory=dict)  # by host: the waiting jobs it could run
    store_state: StoreState | None = None
    receivers: list[ReceiverState] = field(default_factory=list)
    limits: LimitsView | None = None  # the fleet's windows, against the caps its live hosts publish


@dataclass
class FrameReader:
    """Reads frames from one connection, remembering the host queues it has seen."""

    client: aioredis.Redis
    store: str
    known: set[str] = field(default_factory=set)  # every host queue seen, so one emptied stays in view
    address: StoreAddress | None = None  # for the Sentinels' view of a replicated store

    async def read(self) -> Frame:
        now_ms = wall_ms()
        live = await read_live_hosts(self.client, prune=False)
        if not isinstance(live, LiveHosts):
            return Frame(now_ms, self.store, unreachable=live.reason)
        try:
            self.known.update(await known_host_queues(self.client, live.hosts))
            read = await read_queues(
                self.client, [SHARED_QUEUE, *sorted(self.known)], live.hosts, now_ms, backlog=BACKLOG_READ
            )
        except STORE_FAULTS as error:  # the store went away between two reads
            return Frame(now_ms, self.store, unreachable=describe(error))
        mirrored = await read_mirrored_runs(self.client, limit=LATEST_RUNS)
        could = runnable(live.hosts, read.waiting)
        user = self.address.username if self.address is not None else None
        state = await read_store_state(self.client, self.address, configuration=reads_configuration(user))
        receivers = await read_receivers(self.client, now_ms)
        limits = await read_limits(
            self.client, *published_caps(live.hosts), ScopedLimits(), rows=live.hosts, now_ms=now_ms
        )
        return Frame(
            now_ms,
            self.store,
            None,
            live.hosts,
            live.invalid,
            read.queues,
            mirrored.runs,
            mirrored.degraded,
            could,
            state,
            receivers,
            limits,
        )


def _ago(now_ms: int, at: object) -> str:
    stamp = js_number(at)
    if not finite(stamp) or stamp <= 0:
        return "-"
    return f"{max(0, now_ms - int(stamp)) // 1000} s ago"


def _slot_use(row: Mapping[str, object]) -> tuple[float, float]:
    """A row's slots: (in use, in all), either NaN when the row does not say."""
    total, free = js_number(row.get("concurrency")), js_number(row.get("slotsFree"))
    return total - free, total


def _slots(row: Mapping[str, object]) -> str:
    used, total = _slot_use(row)
    if not finite(total):
        return "?"
    return f"{int(used)}/{int(total)}" if finite(used) else f"?/{int(total)}"


def _routable(row: Mapping[str, object]) -> Text:
    if not is_live(row):
        return Text("no: silent", style="red")
    if is_stuck(row):
        return Text("no: stuck", style="red")
    if is_draining(row):
        return Text("no: draining", style="yellow")
    if reason := unhealthy_reason(row):
        return Text(f"no: unhealthy ({plain(reason)})", style="red")
    if FleetHost.of_row(row).routes != "true":
        return Text("shared only", style="yellow")
    return Text("yes", style="green")


def _used_slots(row: Mapping[str, object]) -> float:
    used, _ = _slot_use(row)
    return used if finite(used) else 0.0


def _attention(frame: Frame) -> Callable[[Mapping[str, object]], tuple[int, float, str]]:
    """A host's place in the frame: one that cannot be routed to (silent, stuck, draining or not draining) first,
    then the busiest, then by name."""

    def key(row: Mapping[str, object]) -> tuple[int, float, str]:
        flagged = not is_live(row) or is_stuck(row) or is_draining(row) or not_draining(row, frame.at_ms) is not None
        return (0 if flagged else 1, -_used_slots(row), str(row.get("name")))

    return key


def _more(shown: int, total: int, what: str) -> Text:
    return (
        Text(f"… {total - shown} more {what} not shown (--rows 0 shows all)", style="dim")
        if total > shown
        else Text("")
    )


def hosts_table(frame: Frame, rows: int = 0) -> Table:
    """The hosts, those needing a look and the busiest first; at most `rows` of them (0: all)."""
    chosen = sorted(frame.hosts, key=_attention(frame))
    chosen = chosen[:rows] if rows > 0 else chosen
    table = Table(
        title=f"Hosts ({len(frame.hosts)})", expand=True, caption=_more(len(chosen), len(frame.hosts), "hosts")
    )
    for column in ("host", "routable", "caps", "beat", "up since", "slots", "could run", "last poll", ""):
        table.add_column(column, overflow="fold")
    for row in chosen:
        stale = row.get("staleMs")
        beat = (f"{int(stale) // 1000} s ago" if isinstance(stale, int) else "undatable") + clock_note(row)
        draining = not_draining(row, frame.at_ms)
        table.add_row(
            visible(row.get("name")),
            _routable(row),
            visible(FleetHost.of_row(row).caps or "-"),
            visible(beat),
            visible(_ago(frame.at_ms, row.get("startedAt"))),
            visible(_slots(row)),
            visible(shown_count(frame.could_run.get(str(row.get("name"))))),
            visible(_ago(frame.at_ms, row.get("polledAt"))),
            Text("NOT DRAINING", style="bold red") if draining is not None else Text(""),
        )
    return keep_whole(table, "host")


def queues_table(frame: Frame, rehome_after_ms: int, rows: int = 0) -> Table:
    """The shared queue, then the host queues holding jobs, a silent host's first, then the fullest; at most
    `rows` (0: all); an empty host queue is left out."""
    states = ("waiting", "delayed", "prioritized", "active", "failed")
    shared, hosts = frame.queues[:1], frame.queues[1:]
    holding = sorted(
        (queue for queue in hosts if queue.counts.total + queue.counts.failed > 0),
        key=lambda queue: (queue.silent_since_ms is None, -queue.counts.total, queue.queue),
    )
    chosen = shared + holding
    chosen = chosen[:rows] if rows > 0 else chosen
    empty = len(hosts) - len(holding)
    note = _more(len(chosen), len(frame.queues) - empty, "queues holding jobs")
    if empty:
        note.append(f"{' · ' if note.plain else ''}{empty} empty host queues", style="dim")
    table = Table(title="Queues", expand=True, caption=note)
    for column in ("queue", *states, "oldest waiting", "re-home"):
        table.add_column(column, justify="right" if column in states else "left")
    for queue in chosen:
        counts = queue.counts.by_state()
        due = queue.due_ms(rehome_after_ms)
        if due is None:
            rehome = "-"
        elif queue.counts.movable == 0:
            rehome = "silent host, nothing to move"
        else:
            rehome = "due now" if due <= frame.at_ms else f"in {(due - frame.at_ms) // 1000} s"
        table.add_row(
            visible(queue.queue),
            *(Text(str(counts[state])) for state in states),
            visible(_ago(frame.at_ms, queue.oldest_waiting_ms)),
            visible(rehome),
        )
    return keep_whole(table, "queue")


def runs_table(frame: Frame) -> Table:
    table = Table(title=Text(plain(f"Latest runs (mirror {frame.mirror})")), expand=True)
    for column in ("ended", "job id", "host", "outcome", "reason", "used"):
        table.add_column(column, overflow="fold")
    for run in frame.runs:
        if isinstance(run, dict):
            said = (visible(run.get(key) or "-") for key in ("endedAt", "jobId", "host", "outcome", "reason"))
            table.add_row(*said, visible(run_usage(run)))
    return keep_whole(table, "ended", "job id", "host", "outcome", "reason")


def render(frame: Frame, rehome_after_ms: int, *, live: bool = True, rows: int = ROWS) -> RenderableType:
    """One frame as rich renderables (`live`: with how to leave); every value from the store is plain text. Each
    table shows at most `rows` lines (0: all): a frame of a thousand hosts shows those that need a look."""
    leave = " · q or Ctrl-C to leave" if live else ""
    header = Text(plain(f"pi-dispatch top · {frame.store} · {iso_string(frame.at_ms)}{leave}"))
    if frame.unreachable is not None:
        again = "; trying again every second" if live else ""
        message = f"Valkey is unreachable ({frame.unreachable}){again}."
        return Group(header, Panel(visible(message, 2_000), style="red"))
    parts: list[RenderableType] = [header]
    if frame.store_state is not None:
        parts.append(Text(plain(frame.store_state.summary())))
    if frame.receivers:
        said = " · ".join(receiver.summary(frame.at_ms) for receiver in frame.receivers)
        parts.append(Text(plain(f"receivers: {said}")))
    if frame.limits is not None:
        parts.append(Text(plain(limits_summary(frame.limits))))
    parts += [hosts_table(frame, rows), queues_table(frame, rehome_after_ms, rows)]
    if frame.invalid:
        parts.append(Text(plain(f"{len(frame.invalid)} registry rows refused as invalid (see pi-dispatch hosts)")))
    parts.append(runs_table(frame))
    return Group(*parts)


def frame_json(frame: Frame, rehome_after_ms: int) -> dict[str, object]:
    """One frame as `top --json` prints it: the rows typed as `hosts --json` types them, every queue, the runs."""
    queues = [
        asdict(queue) | {"counts": queue.counts.by_state(), "rehomeAt": queue.due_ms(rehome_after_ms)}
        for queue in frame.queues
    ]
    state = frame.store_state
    return {
        "at": iso_string(frame.at_ms),
        "store": frame.store,
        "unreachable": frame.unreachable,
        "storeState": None if state is None else asdict(state) | {"inSync": state.in_sync, "maxLagS": state.max_lag_s},
        "hosts": [typed_row(row | {"couldRun": frame.could_run.get(str(row.get("name")))}) for row in frame.hosts],
        "invalid": [asdict(row) for row in frame.invalid],
        "queues": queues,
        "runs": frame.runs,
        "mirror": frame.mirror,
        "receivers": [receiver.as_json() for receiver in frame.receivers],
        "limits": None if frame.limits is None else frame.limits.as_json(),
    }


@contextlib.contextmanager
def _keys_that_quit(stop: asyncio.Event) -> Iterator[None]:
    """`q` sets stop (the terminal in cbreak mode, restored on the way out); Ctrl-C and SIGTERM do too."""
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    saved = None
    if fd is not None:
        import termios
        import tty

        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)

        def on_key() -> None:
            if QUIT_KEYS & set(os.read(fd, 64)):
                stop.set()

        loop.add_reader(fd, on_key)
    try:
        yield
    finally:
        if fd is not None and saved is not None:
            import termios

            loop.remove_reader(fd)
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


async def watch(
    console: Console,
    store: StoreAddress,
    rehome_after_ms: int,
    *,
    once: bool,
    rows: int | None = None,
    as_json: bool = False,
) -> int:
    """Print one frame (`once`, `as_json`: exit 1 when the store is unreachable), or refresh full-screen until q or
    Ctrl-C."""
    from rich.live import Live

    rows = ROWS if rows is None else rows
    client = store.client()
    reader = FrameReader(client, store.shown(), address=store)
    try:
        if as_json:
            frame = await reader.read()
            sys.stdout.write(json.dumps(frame_json(frame, rehome_after_ms), indent=2) + "\n")
            return 0 if frame.unreachable is None else 1
        if once:
            frame = await reader.read()
            show(console, render(frame, rehome_after_ms, live=False, rows=rows))
            return 0 if frame.unreachable is None else 1
        stop = asyncio.Event()
        with (
            _keys_that_quit(stop),
            Live(console=console, screen=True, auto_refresh=False, redirect_stderr=False) as live,
        ):
            while not stop.is_set():
                live.update(render(await reader.read(), rehome_after_ms, rows=rows), refresh=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), REFRESH_S)
        return 0
    finally:
        with contextlib.suppress(*STORE_FAULTS):
            await client.aclose()
