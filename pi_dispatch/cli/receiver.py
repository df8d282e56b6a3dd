"""`pi-dispatch receiver` (serve the forge webhooks), `receiver check` and `init` (a starter triggers file, and an
egress allowlist when asked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.markup import escape

from pi_dispatch.cli.common import console, print_json, problems_as_json, write_file
from pi_dispatch.infra.units import ENV_FILE_OPTION

receiver_app = typer.Typer(invoke_without_command=True)
EnvFile = Annotated[
    Path | None,
    typer.Option(ENV_FILE_OPTION, help="Read this env file alone instead of the environment (as systemd would)."),
]
STARTER: Final[dict[str, Any]] = {
    "triggers": [
        {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}},
        {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "triage"}},
        {
            "on": {"type": "pull_request", "action": ["opened", "synchronize"]},
            "run": {"kind": "github", "flow": "review"},
        },
    ]
}


def _serve(env_file: Path | None) -> int:
    from pi_dispatch.receiver.entry import run

    return run(env_file)


@receiver_app.callback()
def receiver(ctx: typer.Context, env_file: EnvFile = None) -> None:
    """The webhook receiver: forge deliveries in, routed jobs out. With no command, serves until SIGTERM.

    Reads WEBHOOK_SECRET, PI_TRIGGERS_FILE, VALKEY_URL, RECEIVER_PORT, GITLAB_*, FORGEJO_*, AZURE_* and the rest.

    schemas/receiver-env.schema.json lists every variable. Exits 2 on a config error, 1 when a restart may help.
    """
    if ctx.invoked_subcommand is None:
        raise typer.Exit(_serve(env_file))


@receiver_app.command("serve")
def serve_command(env_file: EnvFile = None) -> None:
    """Serve the forge webhooks until SIGTERM (the same as no subcommand)."""
    raise typer.Exit(_serve(env_file))


@receiver_app.command("check")
def check(
    env_file: EnvFile = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (problems too) instead of text.")] = False,
) -> None:
    """Validate the receiver's configuration and triggers without serving: prints OK or every problem; 0 or 2."""
    from pi_dispatch.receiver.endpoints import load_receiver_config

    with problems_as_json(as_json):
        config = load_receiver_config(env_file)
    served = config.served
    where = str(env_file) if env_file else "the environment"
    rules = sum(1 for forge in config.rules.forges.values() for _ in _rules_of(forge))
    if as_json:
        said = {"ok": True, "source": where, "forges": served, "rules": rules}
        print_json(said | {"triggersFile": config.triggers_path.name})
        return
    console.print(
        escape(
            f"OK: {where} serves {', '.join(served) or 'no forge'}; "
            f"{rules} webhook rules in {config.triggers_path.name}"
        )
    )


def _rules_of(forge: Any) -> list[Any]:
    return [
        *forge.label,
        *([forge.comment] if forge.comment else []),
        *forge.pull_request,
        *forge.issue,
        *forge.pr_close,
    ]


def init(
    triggers: Annotated[Path, typer.Option("--triggers", help="Where to write the starter file.")] = Path(
        "triggers.json"
    ),
    egress_allowlist: Annotated[
        Path | None,
        typer.Option("--egress-allowlist", help="Also write a starter egress allowlist there (egress-proxy reads it)."),
    ] = None,
) -> None:
    """Write a starter triggers file (a label, a comment and a pull request rule for GitHub) and, when asked, a
    starter egress allowlist (the model provider and GitHub); never overwrites: exit 1 if one is there."""
    from pi_dispatch.core.egress import STARTER_ALLOWLIST, parse_allowlist
    from pi_dispatch.triggers.file import parse_triggers

    text = json.dumps(STARTER, indent=2) + "\n"
    parse_triggers(text, "starter")  # the starter is itself a file the parser accepts
    starters = [(triggers, text, "--triggers", "point PI_TRIGGERS_FILE at it")]
    if egress_allowlist is not None:
        parse_allowlist(STARTER_ALLOWLIST, "starter")
        fix = "keep it beside the worker's env file or point PI_EGRESS_ALLOWLIST_FILE at it"
        starters.append((egress_allowlist, STARTER_ALLOWLIST, "--egress-allowlist", fix))
    kept = False
    for path, content, option, then in starters:
        if write_file(path, content, option, exclusive=True):
            console.print(escape(f"wrote {path}: edit it, then {then}"))
        else:
            console.print(escape(f"{path} exists; left as it is"))
            kept = True
    if kept:
        raise typer.Exit(1)
