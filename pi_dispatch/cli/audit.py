"""`pi-dispatch audit`: what would be refused or misplaced, and why."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pi_dispatch.cli.common import ExtraVarsOption, JsonOption, ValkeyUrlOption, console, extra_variables, print_json
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem
from pi_dispatch.fleet.registry import InvalidRow, LiveHosts

if TYPE_CHECKING:
    from pi_dispatch.config.hostvars import InventoryHost
    from pi_dispatch.fleet.hosts import HostQueue
    from pi_dispatch.fleet.steal import Waiting
    from pi_dispatch.fleet.storeview import StoreState
    from pi_dispatch.triggers.file import Trigger


class FailOn(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


def audit(
    inventory: Annotated[Path, typer.Option("-i", "--inventory", help="The Ansible inventory file or directory.")],
    triggers: Annotated[
        list[Path] | None,
        typer.Option(
            "--triggers", help="A triggers.json (repeatable; default: the inventory's receivers' and workers')."
        ),
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="Also read the live registry: silent, stale and drifted hosts.")
    ] = False,
    url: ValkeyUrlOption = None,
    simulate_down: Annotated[
        list[str] | None,
        typer.Option("--simulate-down", help="Audit as if this inventory host were gone (repeatable)."),
    ] = None,
    as_json: JsonOption = False,
    fail_on: Annotated[
        FailOn, typer.Option("--fail-on", help="Exit 1 on findings at or above this level.")
    ] = FailOn.error,
    extra_vars: ExtraVarsOption = None,
    accept: Annotated[
        list[str] | None,
        typer.Option("--accept", help="A finding code accepted on purpose: still shown, not counted (repeatable)."),
    ] = None,
) -> None:
    """Every trigger whose jobs would be refused or misplaced, and the drift between inventory and fleet."""
    from pi_dispatch.audit.placement import audit as run_audit
    from pi_dispatch.console.progress import progress
    from pi_dispatch.console.tables import print_report
    from pi_dispatch.fleet.inventory import load_fleet
    from pi_dispatch.infra.clock import wall_ms

    with progress(console, quiet=as_json) as shown:
        step = shown.add_task("Loading the inventory", total=1)
        hosts, receiver_files = load_fleet(inventory, extra_variables(extra_vars))
        shown.update(step, completed=1)
        _check_simulated(hosts, simulate_down or [], inventory)
        loaded, host_triggers = _load_triggers(shown, receiver_files, hosts, triggers or [])
        rows, state, host_queues, invalid_rows, waiting, store = (
            _read_live(shown, url) if live or url else (None, "off", [], [], [], None)
        )
        shown.add_task(f"Auditing {len(loaded)} triggers across {len(hosts)} hosts", total=None)
        report = run_audit(
            hosts,
            loaded,
            live_rows=rows,
            live_state=state,
            simulate_down=simulate_down or [],
            host_queues=host_queues,
            invalid_rows=invalid_rows,
            waiting=waiting,
            now_ms=wall_ms(),
            host_triggers=host_triggers,
            store=store,
        )
    report.accepted = frozenset(accepted_codes(accept or []))
    if as_json:
        print_json(report.as_json())
    else:
        print_report(console, report)
    raise typer.Exit(ExitStatus.FAILURE if report.at_or_above(fail_on.value) else ExitStatus.OK)


def _check_simulated(hosts: Sequence[InventoryHost], simulate_down: Sequence[str], inventory: Path) -> None:
    """--simulate-down names inventory worker hosts only, or a config error lists the ones it may name."""
    unknown = sorted(set(simulate_down) - {host.name for host in hosts})
    if unknown:
        raise ConfigError(
            [
                Problem(
                    "--simulate-down",
                    f"{', '.join(unknown)} is not an inventory worker host",
                    str(inventory),
                    f"use one of: {', '.join(host.name for host in hosts)}",
                )
            ]
        )


def _load_triggers(
    shown: Any, receiver_files: Sequence[Path], hosts: Sequence[InventoryHost], given: Sequence[Path]
) -> tuple[list[Trigger], dict[str, list[Trigger]]]:
    """The triggers files' triggers (the given ones, else the inventory's receivers' and workers' own, as the roles
    deploy them), and each host's cron, judged where it runs."""
    from pi_dispatch.audit.cron import hosts_cron
    from pi_dispatch.triggers.file import load_triggers

    host_files = {host.name: source for host in hosts if (source := host.triggers_source) is not None}
    files = list(given)
    if not files:
        declared = dict.fromkeys([*receiver_files, *host_files.values()])
        files = [path for path in declared if path.is_file()]
    step = shown.add_task("Reading the triggers files", total=len(files) + len(host_files))
    loaded = []
    for path in files:
        loaded += load_triggers(path)
        shown.advance(step)
    return loaded, hosts_cron(hosts, lambda: shown.advance(step))


def _read_live(
    shown: Any, url: str | None
) -> tuple[list[dict[str, object]] | None, str, list[HostQueue], list[InvalidRow], list[Waiting], StoreState | None]:
    """The live registry's rows (None when unreachable), its state as the report says it, host queues, bad rows,
    the oldest jobs waiting on each queue, and the store's own state."""
    from pi_dispatch.cli.reads import read_fleet, store_address

    step = shown.add_task("Reading the live registry and host queues", total=1)
    read = read_fleet(store_address(url))
    shown.update(step, completed=1)
    if isinstance(read.live, LiveHosts):
        return read.live.hosts, "ok", read.host_queues, read.live.invalid, read.waiting, read.store
    return None, f"unreachable ({read.live.reason})", read.host_queues, [], [], None


def accepted_codes(codes: list[str]) -> list[str]:
    """--accept's codes, each one the audit knows, or a config error naming the unknown ones."""
    from pi_dispatch.audit.findings import CODES

    unknown = sorted(set(codes) - set(CODES))
    if unknown:
        raise ConfigError(
            [
                Problem(
                    "--accept",
                    f"{', '.join(unknown)} is not a finding code",
                    "command line",
                    "the codes of docs/reference.md",
                )
            ]
        )
    return codes
