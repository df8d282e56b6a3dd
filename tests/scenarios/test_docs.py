"""docs/multi-host.md: every command in it runs against a real example fleet, and its tables are complete."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from pi_dispatch.audit.findings import CODES
from pi_dispatch.config.rolevars import host_variable
from pi_dispatch.config.worker_variables import fields_by_variable, variables
from pi_dispatch.core.reasons import Reason
from pi_dispatch.demo.workers import worker_environment
from pi_dispatch.fleet.inventory import load_inventory
from tests.support.workers import running_worker, settings_of

REPO = Path(__file__).resolve().parent.parent.parent
GUIDE = REPO / "docs" / "multi-host.md"
REFERENCE = REPO / "docs" / "reference.md"
EXAMPLE = REPO / "inventory.example" / "hosts.yml"
# What some commands must say, beyond exiting as the guide says they do.
SAYS = {
    "pi-dispatch config render --host mini1": ["PI_WORKER_NAME=mini1", "PI_SECRET_PROFILES=prod:"],
    "pi-dispatch config render --host mini2": ["OK:"],
    "pi-dispatch route": ["pi-jobs@mini1"],
    "pi-dispatch enqueue --job inventory.example/jobs/deploy.json": ["pi-jobs@mini1"],
    "pi-dispatch enqueue --job inventory.example/jobs/ticks.json": ["gh-docs-3"],
    "pi-dispatch hosts": ["mini1", "mini2", "mini3", "s:prod"],
    "pi-dispatch limits": ["fleet", "3 live hosts run with the same limits"],
    "pi-dispatch top": ["mini1", "mini2", "mini3", "pi-jobs@mini1", "Latest runs"],  # a pipe gets one frame
    "pi-dispatch audit -i inventory.example/hosts.yml --triggers inventory.example/triggers.json --simulate": [
        "profile-hosts-down"
    ],
    "pi-dispatch logs gh-docs-3 -f": ["tick 1", "tick 2"],
    "pi-dispatch job gh-docs-3": ["job gh-docs-3", "attempts"],
    "pi-dispatch cancel gh-docs-2": ["cancelled gh-docs-2"],
    "pi-dispatch drain mini3": ["mini3: draining"],
    "pi-dispatch resume mini3": ["mini3: resumed"],
    "pi-dispatch actions --limit 5": ["resume", "mini3", "drain", "cli"],
}


def guide_commands() -> list[tuple[str, int]]:
    """Each `$ command` of the guide's console blocks, with the exit code its `# exits N` comment promises."""
    commands = []
    for line in GUIDE.read_text().splitlines():
        if line.startswith("$ "):
            command, _, comment = line[2:].partition("  # ")
            match = re.fullmatch(r"exits (\d+)", comment.strip())
            commands.append((command.strip(), int(match.group(1)) if match else 0))
    return commands


@contextlib.asynccontextmanager
async def example_fleet(valkey_url: str, state: Path) -> AsyncIterator[None]:
    """One in-process worker per inventory.example host, as the demo runs them."""
    (state / "secrets").mkdir()
    (state / "flags").mkdir()
    (state / "secrets" / "deploy-token").write_text("docs-deploy-token\n")
    async with contextlib.AsyncExitStack() as stack:
        for host in load_inventory(EXAMPLE):
            env, _ = worker_environment(host, valkey_url, state, host.name, {"PI_EGRESS": "0"})
            await stack.enter_async_context(running_worker(settings_of(env, hostname=host.name)))
        yield


def run(command: str, valkey_url: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "VALKEY_URL": valkey_url,
        "COLUMNS": "200",
    }
    return subprocess.run(
        ["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
async def test_every_command_in_the_guide_runs(
    valkey_url: str, client: aioredis.Redis, job_image: str, tmp_path: Path
) -> None:
    commands = guide_commands()
    assert len(commands) >= 9
    async with example_fleet(valkey_url, tmp_path):
        for command, expected in commands:
            done = await asyncio.to_thread(run, command, valkey_url)
            assert done.returncode == expected, f"{command}\n{done.stdout}\n{done.stderr}"
            for prefix, needles in SAYS.items():
                if command.startswith(prefix):
                    assert all(needle in done.stdout for needle in needles), f"{command}\n{done.stdout}"


def test_the_reference_lists_every_finding_code_and_setting() -> None:
    text = REFERENCE.read_text()
    assert [code for code in CODES if f"| `{code}` |" not in text] == []
    assert [variable for variable in variables() if f"| `{variable}` |" not in text] == []


def test_the_reference_names_each_settings_host_variable_and_every_reason() -> None:
    text = REFERENCE.read_text()
    rendered_from = {  # the role renders them from a file, or from lists it writes
        "PI_TRIGGERS_FILE": "pi_dispatch_worker_triggers_source",
        "PI_EGRESS_PROFILES": "(rendered from `pi_dispatch_worker_egress_profiles`)",
        "PI_SCOPED_LIMITS_FILE": "(rendered from `pi_dispatch_worker_scoped_limits`)",
        "PI_PAUSE_WINDOWS_FILE": "(rendered from `pi_dispatch_worker_pause_windows`)",
    }
    for variable, (name, info) in fields_by_variable().items():
        declared = host_variable(name, info)
        shown = f"`{declared}`" if declared else rendered_from[variable]
        shown = shown if shown.startswith(("`", "(")) else f"`{shown}`"
        assert f"| `{variable}` | {shown} |" in text, variable
    assert [reason for reason in Reason if f"| `{reason}` |" not in text] == []


@pytest.mark.parametrize("command", ["./dev demo", "./dev test"])
def test_the_readme_gives_the_two_commands(command: str) -> None:
    assert command in (REPO / "README.md").read_text()


def test_the_guide_lists_every_receiver_variable_and_drop_reason() -> None:
    from pi_dispatch.config.receiver_settings import RECEIVER_MODEL
    from pi_dispatch.receiver.routes import DROP_REASONS

    text = REFERENCE.read_text()
    for name, info in RECEIVER_MODEL.model_fields.items():
        assert f"| `{info.validation_alias}` |" in text, info.validation_alias
        assert name == "triggers_file" or f"| `pi_dispatch_receiver_{name}` |" in text, name
    guide = GUIDE.read_text()
    assert [reason for reason in DROP_REASONS if f"| `{reason}` |" not in guide] == []
    assert "poll" in guide and "Not ported" in guide


def test_wire_compat_names_every_reason_the_reference_marks_as_this_ports_own() -> None:
    own = re.findall(r"^\| `([a-z-]+)` \|[^|]*\| this port's", REFERENCE.read_text(), flags=re.M)
    said = (REPO / "docs" / "wire-compat.md").read_text()
    assert own and [reason for reason in own if f"`{reason}`" not in said] == []
    counted = ["No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten", "Eleven", "Twelve"]
    counted += ["Thirteen", "Fourteen", "Fifteen"]
    assert f"{counted[len(own)]} run reasons of this port's own" in said


def test_the_guide_has_a_contents_list_of_its_sections() -> None:
    text = GUIDE.read_text()
    sections = re.findall(r"^## (\d+\. .+)$", text, flags=re.M)
    assert sections and all(f"- [{title}](#" in text for title in sections)


def test_the_reference_lists_every_console_variable() -> None:
    from pi_dispatch.config.console_settings import ConsoleSettings

    text = REFERENCE.read_text()
    named = [str(info.validation_alias) for info in ConsoleSettings.model_fields.values()]
    assert named and [name for name in named if f"`{name}`" not in text.split("## Console settings", 1)[1]] == []


def test_the_readme_lists_every_command() -> None:
    import typer.main

    from pi_dispatch.cli.app import app

    text = (REPO / "README.md").read_text()
    listed = text.split("## Commands", 1)[1].split("```", 2)[1]
    commands = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    shown = set(re.findall(r"(?:pi-dispatch |\| ?)([a-z-]+)", listed))
    assert commands and [name for name in commands if name not in shown] == []
