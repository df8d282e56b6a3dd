"""The shipped Prometheus alert rules load and behave as their unit tests say, through the real promtool (Debian's
prometheus package; `./dev test` installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

FILES = Path(__file__).resolve().parents[2] / "ansible" / "files"
RULES, UNIT_TESTS = FILES / "pi-dispatch.rules.yml", FILES / "pi-dispatch.rules.test.yml"


def promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    assert found, "promtool is missing: apt-get install --no-install-recommends prometheus (./dev test does)"
    return subprocess.run([found, *arguments], capture_output=True, text=True, timeout=120, check=False, cwd=FILES)


def test_the_rules_load() -> None:
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_rules_fire_as_their_unit_tests_say() -> None:
    tested = promtool("test", "rules", UNIT_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_has_a_severity_a_runbook_and_a_unit_test() -> None:
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert rules and all(rule["labels"]["severity"] in ("critical", "warning") for rule in rules)
    assert all(rule["annotations"]["runbook"].strip() for rule in rules)
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    tested = {case["alertname"] for test in cases for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert tested == {rule["alert"] for rule in rules}
