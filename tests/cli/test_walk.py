"""Every command, given bad input or an unreachable store, answers in a few lines with the right exit status, and
never with a traceback: the walk of the whole command tree (a new command without a bad input here fails)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import typer.main

from pi_dispatch.cli.app import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory.example"
NO_SCHEME = "127.0.0.1:16399"
NOT_JSON = "[not json"  # an --extra-vars that is no JSON object: a config error, exit 2
MISSING = "/nonexistent/pi-dispatch/t.json"


def leaf_commands(command: Any, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if hasattr(command, "commands"):  # a group (typer's own click types are not always click's)
        return {leaf for name, sub in command.commands.items() for leaf in leaf_commands(sub, (*path, name))}
    return {path}


def closed_port() -> int:
    with socket.socket() as probe:  # a port nothing listens on: bound, then released
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bad_inputs(job_file: Path, down: str) -> dict[tuple[str, ...], list[list[str]]]:
    """For each command, the invocations that must fail cleanly: a store URL without a scheme (2), a store nobody
    answers at (1), a missing file or folder (2)."""
    store_reads: dict[tuple[str, ...], list[str]] = {
        ("top",): ["--once"],
        ("hosts",): [],
        ("limits",): [],
        ("runs",): [],
        ("job",): ["gh-1"],
        ("logs",): ["gh-1"],
        ("cancel",): ["gh-1"],
        ("retry",): ["gh-1"],
        ("drain",): ["mini1"],
        ("resume",): ["mini1"],
        ("actions",): [],
        ("enqueue",): ["--job", str(job_file)],
        ("run",): [str(job_file.parent), "--task", "tidy", "--host", "mini1"],
        ("route",): ["--job", str(job_file)],
        ("rollout", "in-flight"): ["-i", str(EXAMPLE), "--host", "mini1"],
        ("rollout", "gate"): ["-i", str(EXAMPLE), "--host", "mini1", "--timeout", "1"],
    }
    walked = {
        command: [[*command, *rest, "--valkey-url", NO_SCHEME], [*command, *rest, "--valkey-url", down]]
        for command, rest in store_reads.items()
    }
    walked[("audit",)] = [["audit", "-i", MISSING], ["audit", "-i", str(EXAMPLE), "--live", "--valkey-url", NO_SCHEME]]
    walked[("init",)] = [["init", "--triggers", MISSING]]
    walked[("demo",)] = [["demo", "-i", MISSING]]
    walked[("worker",)] = [["worker", "--env-file", MISSING]]
    walked[("limits",)] += [["limits", "--env-file", MISSING]]
    walked[("job-network",)] = [["job-network", "--deny", MISSING, "--check"]]  # not an address: refused first
    walked[("egress-proxy",)] = [["egress-proxy", "--env-file", MISSING]]  # refused before anything is touched
    walked[("runtime-reap",)] = [["runtime-reap", MISSING]]  # it takes no argument: refused before containerd is asked
    walked[("receiver", "serve")] = [["receiver", "serve", "--env-file", MISSING]]
    walked[("receiver", "check")] = [["receiver", "check", "--env-file", MISSING]]
    walked[("config", "check")] = [["config", "check", "--env-file", MISSING]]
    walked[("config", "show")] = [["config", "show", "--env-file", MISSING]]
    walked[("config", "triggers")] = [["config", "triggers", MISSING]]
    walked[("config", "render")] = [
        ["config", "render", "-i", MISSING, "--host", "mini1"],
        ["config", "render", "-i", str(EXAMPLE), "--host", "mini1", "--extra-vars", NOT_JSON],
    ]
    walked[("config", "schema")] = [["config", "schema", "--write", MISSING]]
    # the console serves until stopped: a store that cannot be named (2), an address this host does not have with
    # logins declared (1; beyond loopback without logins it is refused first, 2: tests/web/test_entry.py)
    with_logins = job_file.parent / "console.env"
    with_logins.write_text(f"PI_CONSOLE_LOGINS=ops:read:{'0' * 64}\n")
    with_logins.chmod(0o600)
    walked[("console",)] = [
        ["console", "--valkey-url", NO_SCHEME],
        ["console", "--env-file", str(with_logins), "--bind", "no-such-host.invalid"],
        ["console", "--env-file", MISSING],
    ]
    # the socket proxy serves until stopped: a group this host does not have (2)
    socket = str(job_file.parent / "d.sock")
    walked[("docker-proxy",)] = [["docker-proxy", "--socket", socket, "--jobs-dir", MISSING, "--group", MISSING]]
    return walked


def run(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    quiet = {key: value for key, value in os.environ.items() if not key.startswith(("VALKEY_", "PI_", "WEBHOOK_"))}
    return subprocess.run(
        [sys.executable, "-m", "pi_dispatch", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        env=quiet | {"COLUMNS": "80"},
        cwd=REPO,
        check=False,
    )


def test_the_walk_covers_every_command(tmp_path: Path) -> None:
    assert set(bad_inputs(tmp_path / "job.json", "")) == leaf_commands(typer.main.get_command(app))


def test_no_command_shows_a_traceback_for_bad_input(tmp_path: Path) -> None:
    job_file = tmp_path / "job.json"
    job_file.write_text(
        json.dumps({"kind": "github", "repo": "acme/app", "flow": "triage", "trigger": {"deliveryId": "d-1"}})
    )
    invocations = [
        args for runs in bad_inputs(job_file, f"redis://127.0.0.1:{closed_port()}/0").values() for args in runs
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        done = list(pool.map(run, invocations))
    wrong = []
    for arguments, result in zip(invocations, done, strict=True):
        said = (result.stdout + result.stderr).strip()
        expected = 2 if {NO_SCHEME, MISSING, NOT_JSON} & set(arguments) else 1
        if "Traceback" in said or result.returncode != expected or not said or len(said.splitlines()) > 6:
            wrong.append(f"{' '.join(arguments)} -> {result.returncode}: {said[-600:]}")
    assert wrong == []


@pytest.mark.parametrize("flag", ["--version"])
def test_version_names_this_release_and_the_reference(flag: str) -> None:
    from pi_dispatch import REFERENCE, __version__

    result = run([flag])
    assert result.returncode == 0
    assert result.stdout.strip() == f"pi-dispatch {__version__} (wire-compatible with {REFERENCE})"


def test_every_command_has_an_example_whose_options_it_takes() -> None:
    from pi_dispatch.cli.app import EXAMPLES, command

    root = command()
    assert set(EXAMPLES) == leaf_commands(root)
    for path, example in EXAMPLES.items():
        found = root
        for name in path:
            found = found.commands[name]
        taken = {opt for param in found.params for opt in param.opts}
        used = {word.split("=")[0] for word in example.split() if word.startswith("-")}
        assert used <= taken, (path, used - taken)
        assert found.epilog == f"Example: {example}"


def test_help_names_values_as_words_never_as_the_framework_types() -> None:
    for arguments in (["audit", "--help"], ["job", "--help"], ["config", "schema", "--help"], ["--help"]):
        said = run(arguments)
        noise = re.findall(r"<(?:str|bool|int|float|path|file|list\[[^]]*\])>|list\[", said.stdout)
        assert said.returncode == 0 and noise == [], (arguments, noise)
    assert "--install-completion" in run(["--help"]).stdout
