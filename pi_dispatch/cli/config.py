"""`pi-dispatch config check|triggers|show|render|schema`: the worker's configuration, validated, shown, rendered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from pi_dispatch.cli.common import (
    EnvFileOption,
    ExtraVarsOption,
    JsonOption,
    console,
    errors,
    extra_variables,
    print_json,
    problems_as_json,
    write_file,
)
from pi_dispatch.core.errors import ConfigError, ExitStatus, Problem

if TYPE_CHECKING:
    from pi_dispatch.config.worker_settings import WorkerSettings
    from pi_dispatch.core.egressprofiles import EgressPlan

config_app = typer.Typer(
    no_args_is_help=True, help="Validate, show and render a worker's configuration; check triggers files; the schemas."
)


@config_app.command("check")
def config_check(
    env_file: EnvFileOption = None,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Also ask the real services: the store, Docker, the job image, each profile's script, the "
            "logs and jobs folders (run it as the worker's user). Exit 1 naming the first that fails.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Validate the worker's configuration: prints OK or every problem; exit 0 or 2 (1 when --live finds a fault)."""
    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.triggers.schedules import load_cron
    from pi_dispatch.worker.gates.limits import absent_limit_files, read_limit_files
    from pi_dispatch.worker.host.egressproxy import egress_plan
    from pi_dispatch.worker.host.preflight import live_checks

    with problems_as_json(as_json):
        settings = load_settings(env_file)
        plan = egress_plan(settings)  # each profile's allowlist, read as the worker reads it at boot
        read_limit_files(settings, present_only=True)  # and the scoped limits and pause windows that are here
        cron: int | None = None
        if settings.triggers_file is not None:
            _, triggers = load_cron(settings.triggers_file, "PI_TRIGGERS_FILE")
            cron = sum(trigger.on_type == "cron" for trigger in triggers)
    wide = _public_suffix_wildcards(settings, env_file, plan) + absent_limit_files(settings)
    where = str(env_file) if env_file else "the environment"
    checks = asyncio.run(live_checks(settings, plan)) if live else []
    failed = next((check for check in checks if not check.ok), None)
    if as_json:
        report = {"ok": failed is None, "source": where, "worker": settings.worker_name}
        report |= {"nameDeclared": settings.worker_name_declared, "cronEntries": cron, "warnings": wide}
        print_json(report | {"checks": [check.as_json() for check in checks]})
    else:
        declared = "declared" if settings.worker_name_declared else "not declared, derived from the hostname"
        said = "cron disabled" if cron is None else f"{cron} cron entries"
        console.print(escape(f"OK: {where} configures worker {settings.worker_name!r} ({declared}; {said})"))
        for check in checks:
            line = f"{'ok' if check.ok else 'FAIL':>4}  {check.name}: {check.detail}"
            console.print(escape(line), highlight=False, soft_wrap=True)  # a path is never cut
        for warning in wide:
            errors.print(escape(f"warning: {warning}"), highlight=False, soft_wrap=True)
    if failed is not None:
        errors.print(escape(f"error: {failed.name}: {failed.detail}"), highlight=False)
        raise typer.Exit(ExitStatus.FAILURE)


def _public_suffix_wildcards(settings: WorkerSettings, env_file: Path | None, plan: EgressPlan) -> list[str]:
    """Each entry of this host's allowlists that covers a public suffix, said with where it is and the fix."""
    from pi_dispatch.core.egress import ALLOWLIST_VARIABLE
    from pi_dispatch.infra.publicsuffix import WILDCARD_FIX, public_suffix_wildcards
    from pi_dispatch.worker.host.egressproxy import PROFILES_VARIABLE, allowlist_path, read_allowlist

    lists = {f"{PROFILES_VARIABLE} entry {name!r}": allowlist for name, allowlist in plan.lists.items()}
    if settings.egress_network is not None:
        with contextlib.suppress(ConfigError):  # the proxy reads it, and refuses what is wrong with it
            lists[ALLOWLIST_VARIABLE] = read_allowlist(allowlist_path(settings.egress_allowlist_file, env_file))
    return [
        f"{where}: {entry} covers a public suffix, so a job may send to anyone's name under it; fix: {WILDCARD_FIX}"
        for where, allowlist in lists.items()
        for entry in public_suffix_wildcards(allowlist)
    ]


@config_app.command("triggers")
def config_triggers(
    file: Annotated[Path, typer.Argument(help="The triggers file to check.")],
    zone: Annotated[
        str | None, typer.Option("--tz", help="The zone cron entries fire in (default: TZ, else this host's).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Check a triggers file as the worker reads it (and the receiver, which reads the same format): every problem
    at once, exit 0 or 2; each cron entry's next three runs in the host's zone."""
    from pi_dispatch.infra.clock import host_zone
    from pi_dispatch.triggers.cronpatterns import next_runs
    from pi_dispatch.triggers.schedules import cron_entries, load_cron

    with problems_as_json(as_json):
        _, triggers = load_cron(file, str(file))
    where = host_zone(zone or os.environ.get("TZ")) or "UTC"
    cron: list[dict[str, Any]] = [
        {"index": entry.index, "id": str(entry.on["id"]), "pattern": str(entry.on["pattern"]), "zone": where}
        | {"next": [run.isoformat() for run in next_runs(str(entry.on["pattern"]), where)]}
        for entry in cron_entries(triggers)
    ]
    if as_json:
        sys.stdout.write(json.dumps({"ok": True, "file": str(file), "triggers": len(triggers), "cron": cron}) + "\n")
        return
    console.print(escape(f"OK: {file}: {len(triggers)} triggers, {len(cron)} of them cron"), soft_wrap=True)
    for entry in cron:
        runs = ", ".join(entry["next"]) or "never (no date matches the pattern)"
        line = f"  cron {entry['id']} ({entry['pattern']}, {where}): next {runs}"
        console.print(escape(line), highlight=False, soft_wrap=True)


@config_app.command("show")
def config_show(env_file: EnvFileOption = None, as_json: JsonOption = False) -> None:
    """The effective settings and where each came from; secrets are redacted."""
    from pi_dispatch.config.worker_settings import load_settings
    from pi_dispatch.console.output import show
    from pi_dispatch.console.terminal import keep_whole
    from pi_dispatch.infra.valkey import redacted

    settings = load_settings(env_file)
    values = settings.model_dump(mode="json", exclude={"sources"})
    if settings.valkey_password is not None:
        values["valkey_password"] = "********"  # noqa: S105 - the redaction mark
    values["valkey_url"] = redacted(settings.valkey_url)
    if as_json:
        console.print_json(data={"settings": values, "sources": settings.sources})
        return
    table = Table(title="pi-dispatch worker settings")
    for column in ("setting", "value", "source"):
        table.add_column(column)
    for key, value in values.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        table.add_row(key, shown, settings.sources.get(key, "derived"))
    show(console, keep_whole(table, "setting", "source"))


@config_app.command("render")
def config_render(
    host: Annotated[str, typer.Option("--host", help="The inventory host to render.")],
    inventory: Annotated[Path, typer.Option("-i", "--inventory", help="The Ansible inventory file or directory.")],
    extra_vars: ExtraVarsOption = None,
) -> None:
    """Print the env file the host's worker should have, rendered from the inventory."""
    from pi_dispatch.config.hostvars import find_host, render_host_env
    from pi_dispatch.fleet.inventory import load_inventory

    hosts = load_inventory(inventory, extra_variables(extra_vars))
    sys.stdout.write(render_host_env(find_host(hosts, host, str(inventory))))


@config_app.command("schema")
def config_schema(
    name: Annotated[
        str | None, typer.Argument(help="worker-env, host-vars, receiver-env or console-env; all when left out.")
    ] = None,
    write: Annotated[
        Path | None, typer.Option("--write", help="Write NAME.schema.json into this folder instead of printing.")
    ] = None,
) -> None:
    """The JSON Schemas generated from the settings declaration (the published contract under schemas/)."""
    from pi_dispatch.config.published import GENERATED, generated

    if name is not None and name not in GENERATED:
        raise ConfigError(
            [Problem(name, "is not a generated schema", "config schema", f"one of {', '.join(GENERATED)}")]
        )
    for each in [name] if name else GENERATED:
        if write is None:
            sys.stdout.write(generated(each))
        else:
            write_file(write / f"{each}.schema.json", generated(each), "--write")
            console.print(escape(f"wrote {write / f'{each}.schema.json'}"))
