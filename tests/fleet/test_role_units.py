"""The worker role's units that no molecule host can run (the egress proxy's firewall and squid belong to the machine
the jobs' bridge is on, not a host container): rendered as the role renders them, and measured by systemd's own
`systemd-analyze security`, as the scenario measures the worker's and the receiver's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "pi_dispatch_worker"
EXPOSURE_GOAL = 2.5  # systemd-analyze: 0 sandboxed .. 10 exposed


def rendered(template: str) -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    environment = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.from_string((ROLE / "templates" / template).read_text()).render(
        ansible_managed="Ansible managed", **defaults
    )


def test_the_egress_proxys_unit_runs_the_command_before_the_worker_and_restarts_at_once() -> None:
    unit = rendered("pi-dispatch-egress-proxy.service.j2")
    assert "ExecStart=/opt/pi-dispatch/venv/bin/pi-dispatch egress-proxy --env-file /etc/pi-dispatch/worker.env" in unit
    assert "Before=pi-dispatch-worker.service" in unit and "Restart=always" in unit
    assert "StartLimitIntervalSec=0" in unit  # never left failed: the worker holds its jobs until it answers


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_egress_proxys_unit_is_sandboxed_within_the_goal(tmp_path: Path) -> None:
    unit = tmp_path / "pi-dispatch-egress-proxy.service"
    unit.write_text(rendered("pi-dispatch-egress-proxy.service.j2"))
    measured = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", measured.stdout)
    assert found is not None, measured.stdout + measured.stderr
    assert float(found[1]) <= EXPOSURE_GOAL, measured.stdout
