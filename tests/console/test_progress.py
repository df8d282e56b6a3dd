"""Progress on long commands: shown on a terminal while `audit` loads a large inventory, never in a pipe or
with --json (scripts read only the result)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.helpers import Terminal, run_cli

STEPS = (b"Loading the inventory", b"Reading the triggers files")


def large_fleet(root: Path, hosts: int = 150, triggers: int = 1500) -> tuple[Path, Path]:
    (root / "host_vars").mkdir(parents=True)
    names = [f"mini{index:04d}" for index in range(hosts)]
    listed = "\n".join(f"        {name}:" for name in names)
    (root / "hosts.yml").write_text(f"all:\n  children:\n    pi_dispatch_workers:\n      hosts:\n{listed}\n")
    for index, name in enumerate(names):
        profiles = f"pi_dispatch_worker_wait_profiles:\n  ci{index % 3}: /opt/pi/ci.sh\n"
        (root / "host_vars" / f"{name}.yml").write_text(f"pi_dispatch_worker_name: {name}\n{profiles}")
    entries = [
        {
            "on": {"type": "label", "any": ["pi"]},
            "run": {"kind": "github", "flow": "fix", "waitFor": [{"profile": f"ci{n % 4}"}]},
        }
        for n in range(triggers)
    ]
    (root / "triggers.json").write_text(json.dumps({"triggers": entries}))
    return root / "hosts.yml", root / "triggers.json"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return large_fleet(tmp_path_factory.mktemp("fleet"))


def test_a_terminal_sees_the_audit_load(fleet: tuple[Path, Path]) -> None:
    inventory, triggers = fleet
    terminal = Terminal("audit", "-i", str(inventory), "--triggers", str(triggers))
    try:
        assert terminal.wait(120) == 1  # ci3 is declared nowhere: errors
    finally:
        terminal.close()
    assert all(step in terminal.output for step in STEPS), terminal.output[:2000]
    assert b"profile-undeclared" in terminal.output  # the report follows the progress


def test_json_on_a_terminal_is_only_the_report(fleet: tuple[Path, Path]) -> None:
    inventory, triggers = fleet
    terminal = Terminal("audit", "-i", str(inventory), "--triggers", str(triggers), "--json")
    try:
        assert terminal.wait(120) == 1
    finally:
        terminal.close()
    assert not any(step in terminal.output for step in STEPS)
    report = json.loads(terminal.output.replace(b"\r\n", b"\n"))
    assert "profile-undeclared" in {finding["code"] for finding in report["findings"]}


def test_a_pipe_gets_the_report_without_progress(fleet: tuple[Path, Path]) -> None:
    inventory, triggers = fleet
    answered = run_cli("audit", "-i", str(inventory), "--triggers", str(triggers))
    assert answered.returncode == 1 and "ERROR" in answered.stdout
    assert not any(step.decode() in answered.stdout + answered.stderr for step in STEPS)
