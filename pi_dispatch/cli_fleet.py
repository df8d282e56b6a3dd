"""`pi-dispatch audit` (what would be refused or misplaced, and why) and `pi-dispatch top` (the fleet, live)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from pi_dispatch.cli_common import JsonOption, ValkeyUrlOption, console
from pi_dispatch.errors import ConfigError, ExitStatus, Problem
from pi_dispatch.registry import InvalidRow, LiveHosts


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
    extra_vars: Annotated[
        str | None,
        typer.Option(
            "-e", "--extra-vars", help="Variables as a JSON object that win over the inventory's, as the play's do."
        ),
    ] = None,
    accept: Annotated[
        list[str] | None,
        typer.Option("--accept", help="A finding code accepted on purpose: still shown, not counted (repeatable)."),
    ] = None,
) -> None:
    """Every trigger whose jobs would be refused or misplaced, and the drift between inventory and fleet."""
    from pi_dispatch.audit import audit as run_audit
    from pi_dispatch.clock import wall_ms
    from pi_dispatch.cron import hosts_cron
    from pi_dispatch.fleet import HostQueue
    from pi_dispatch.inventory import load_inventory, receiver_triggers
    from pi_dispatch.operations import print_report, read_fleet, valkey_url
    from pi_dispatch.progress import progress
    from pi_dispatch.triggers import load_triggers

    with progress(console, quiet=as_json) as shown:
        step = shown.add_task("Loading the inventory", total=1)
        hosts = load_inventory(inventory, extra_variables(extra_vars))
        shown.update(step, completed=1)
        unknown = sorted(set(simulate_down or []) - {host.name for host in hosts})
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
        host_files = {host.name: source for host in hosts if (source := host.triggers_source) is not None}
        files = list(triggers or [])
        if not files:  # the receivers' files and the workers' own, as the roles deploy them
            files = [
                path for path in dict.fromkeys([*receiver_triggers(inventory), *host_files.values()]) if path.is_file()
            ]
        step = shown.add_task("Reading the triggers files", total=len(files) + len(host_files))
        loaded = []
        for path in files:
            loaded += load_triggers(path)
            shown.advance(step)
        host_triggers = hosts_cron(hosts, lambda: shown.advance(step))  # each host's cron, judged where it runs
        rows, state, host_queues, invalid_rows = None, "off", list[HostQueue](), list[InvalidRow]()
        if live or url:
            step = shown.add_task("Reading the live registry and host queues", total=1)
            result, host_queues = read_fleet(valkey_url(url))
            shown.update(step, completed=1)
            rows, state = (
                (result.hosts, "ok") if isinstance(result, LiveHosts) else (None, f"unreachable ({result.reason})")
            )
            invalid_rows = result.invalid if isinstance(result, LiveHosts) else []
        shown.add_task(f"Auditing {len(loaded)} triggers across {len(hosts)} hosts", total=None)
        report = run_audit(
            hosts,
            loaded,
            live_rows=rows,
            live_state=state,
            simulate_down=simulate_down or [],
            host_queues=host_queues,
            invalid_rows=invalid_rows,
            now_ms=wall_ms(),
            host_triggers=host_triggers,
        )
    report.accepted = frozenset(accepted_codes(accept or []))
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2) + "\n")
    else:
        print_report(console, report)
    raise typer.Exit(ExitStatus.FAILURE if report.at_or_above(fail_on.value) else ExitStatus.OK)


def accepted_codes(codes: list[str]) -> list[str]:
    """--accept's codes, each one the audit knows, or a config error naming the unknown ones."""
    from pi_dispatch.findings import CODES

    unknown = sorted(set(codes) - set(CODES))
    if unknown:
        raise ConfigError(
            [Problem("--accept", f"{', '.join(unknown)} is not a finding code", "command line", "see the guide's §11")]
        )
    return codes


def extra_variables(text: str | None) -> dict[str, object]:
    """The -e variables: a JSON object, or a config error naming the option."""
    try:
        extra = json.loads(text) if text else {}
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise ConfigError([Problem("--extra-vars", "is not a JSON object", "command line", 'write {"name": value}')])
    return extra


def top(
    url: ValkeyUrlOption = None,
    once: Annotated[
        bool, typer.Option("--once", help="Print one frame and exit (1 when Valkey is unreachable).")
    ] = False,
) -> None:
    """The fleet live, about once a second: hosts, queues by state, the latest runs. q or Ctrl-C leaves; a pipe
    gets one frame, as with --once."""
    from pi_dispatch.operations import valkey_url
    from pi_dispatch.settings import rehome_after_ms
    from pi_dispatch.top import watch

    password = os.environ.get("VALKEY_PASSWORD") or None
    raise typer.Exit(
        asyncio.run(
            watch(console, valkey_url(url), password, rehome_after_ms(None), once=once or not console.is_terminal)
        )
    )
