"""Inventory → env file: loaded with ansible-core's own loader, rendered by one rule, read back the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pi_dispatch.config.envfile import parse_env_text
from pi_dispatch.config.hostvars import PREFIX, InventoryHost, env_values, find_host, render_host_env
from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import load_settings
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.fleet.inventory import load_inventory
from tests.support.helpers import run_cli

INVENTORY = Path(__file__).parent.parent / "data" / "inventory"
FACTS = HostFacts("host.local", Path("/home/pi"), 1000)


@pytest.fixture(scope="module")
def hosts() -> list[InventoryHost]:
    return load_inventory(INVENTORY)


def test_loads_worker_hosts_with_group_vars_and_templating(hosts: list[InventoryHost]) -> None:
    assert [host.name for host in hosts] == ["mini1", "mini2", "mini3"]
    mini1 = find_host(hosts, "mini1", str(INVENTORY))
    assert mini1.worker_name == "mini1" and mini1.secret_profiles == {"prod": "/opt/pi/resolve-prod.sh"}
    assert mini1.vars[PREFIX + "valkey_url"] == "redis://store:6379/0"  # templated from groups[...]
    assert mini1.vars[PREFIX + "valkey_password"] == "password with space"
    assert find_host(hosts, "mini3", str(INVENTORY)).worker_name is None


def test_render_is_exact(hosts: list[InventoryHost]) -> None:
    assert render_host_env(find_host(hosts, "mini1", str(INVENTORY))) == (
        "# Rendered by pi-dispatch from the inventory for host mini1; a rollout overwrites edits.\n"
        "VALKEY_URL=redis://store:6379/0\n"
        'VALKEY_PASSWORD="password with space"\n'
        "PI_WORKER_NAME=mini1\n"
        "PI_SECRET_PROFILES=prod:/opt/pi/resolve-prod.sh\n"
        "PI_WAIT_PROFILES=ci:/opt/pi/wait-ci.sh\n"
        "PI_CONCURRENCY=4\n"
        "PI_CAPTURE_JOB_LOGS=0\n"
        "TZ=UTC\n"
        "PI_JOB_CONTRACT=event\n"
    )


def test_rendered_files_load_as_the_worker_reads_them(hosts: list[InventoryHost], tmp_path: Path) -> None:
    for host in hosts:
        path = tmp_path / host.name
        path.write_text(render_host_env(host))
        loaded = load_settings(path, facts=FACTS)
        assert loaded.worker_name_declared is (host.worker_name is not None)
        assert loaded.secret_profiles == host.secret_profiles and loaded.wait_profiles == host.wait_profiles


def test_unknown_host_and_bad_vars_are_config_errors(hosts: list[InventoryHost]) -> None:
    with pytest.raises(ConfigError, match="use one of: mini1, mini2, mini3"):
        find_host(hosts, "mini9", str(INVENTORY))
    bad = InventoryHost("mini7", {PREFIX + "name": "bad name", PREFIX + "secret_profiles": {"prod": "rel.sh"}}, "inv")
    with pytest.raises(ConfigError) as caught:
        render_host_env(bad)
    text = str(caught.value)
    assert "pi_dispatch_worker_name" in text and "pi_dispatch_worker_secret_profiles" in text and "mini7" in text


def test_missing_inventory_and_missing_group(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_inventory(tmp_path / "nope")
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    lonely:\n")
    with pytest.raises(ConfigError, match="has no group pi_dispatch_workers"):
        load_inventory(tmp_path / "hosts.yml")


def test_cli_render_matches_and_exits_2_on_unknown_host() -> None:
    ok = run_cli("config", "render", "--host", "mini2", "-i", str(INVENTORY))
    assert ok.returncode == 0 and "PI_WORKER_NAME=mini2\n" in ok.stdout
    assert "PI_LOGS_DIR=/var/lib/pi-dispatch/mini2/logs\n" in ok.stdout
    missing = run_cli("config", "render", "--host", "x", "-i", str(INVENTORY))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True).filter(
    lambda n: not n.lower().endswith((".json", ".log"))
)
profile_names = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)
paths = st.from_regex(r"/[A-Za-z0-9._/ -]{0,24}", fullmatch=True).map(str.rstrip).filter(lambda p: p != "")
host_vars = st.fixed_dictionaries(
    {},
    optional={
        PREFIX + "name": names,
        PREFIX + "secret_profiles": st.dictionaries(profile_names, paths, max_size=4),
        PREFIX + "wait_profiles": st.dictionaries(profile_names, paths, max_size=4),
        PREFIX + "concurrency": st.integers(1, 999),
        PREFIX + "log_retention_days": st.integers(0, 36500),
        PREFIX + "capture_job_logs": st.booleans(),
        PREFIX + "valkey_password": st.text(
            st.characters(min_codepoint=0x20, exclude_characters="\x7f"), min_size=1, max_size=20
        ),
        PREFIX + "logs_dir": paths,
    },
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(host_vars)
def test_random_host_vars_render_and_parse_back_to_the_same_settings(declared: dict[str, Any]) -> None:
    host = InventoryHost("h", declared, "generated")
    parsed = parse_env_text(render_host_env(host), "rendered")
    assert parsed.problems == [] and parsed.values == env_values(declared)
    loaded = load_settings(facts=FACTS, environment=lambda: parsed.values)
    assert loaded.worker_name_declared is (PREFIX + "name" in declared)
    assert loaded.secret_profiles == declared.get(PREFIX + "secret_profiles", {})
    assert loaded.wait_profiles == declared.get(PREFIX + "wait_profiles", {})
    assert loaded.concurrency == declared.get(PREFIX + "concurrency", 3)
    assert loaded.capture_job_logs is declared.get(PREFIX + "capture_job_logs", True)  # kept unless declared off
    password = declared.get(PREFIX + "valkey_password")
    assert (loaded.valkey_password.get_secret_value() if loaded.valkey_password else None) == password


EXAMPLE = Path(__file__).resolve().parent.parent.parent / "inventory.example" / "hosts.yml"


def _role_filter(name: str = "pi_dispatch_env_file") -> Any:
    import importlib.util

    plugin = EXAMPLE.parent.parent / "ansible" / "roles" / "pi_dispatch_worker" / "filter_plugins" / "pi_dispatch.py"
    spec = importlib.util.spec_from_file_location("pi_dispatch_role_filter", plugin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()[name]


def test_every_example_host_is_valid_and_the_role_renders_what_config_render_prints() -> None:
    hosts = load_inventory(EXAMPLE)
    assert sorted(host.name for host in hosts) == ["mini1", "mini2", "mini3"]
    render = _role_filter()
    for host in hosts:
        printed = run_cli("config", "render", "--host", host.name, "-i", str(EXAMPLE))
        assert printed.returncode == 0, printed.stderr
        assert render(host.vars, host.name) == printed.stdout
    assert "PI_WORKER_NAME" not in printed.stdout  # mini3 declares no name


def test_the_profile_lists_the_role_writes_are_where_the_env_file_names_them_and_read_back(tmp_path: Path) -> None:
    from pi_dispatch.worker.host.egressproxy import egress_plan

    env_file = str(tmp_path / "worker.env")
    profiles = {"deploy": ["api.example.com", ".cdn.example"], "sealed": "offline"}
    declared = {f"{PREFIX}name": "mini1", f"{PREFIX}env_file": env_file, f"{PREFIX}egress_profiles": profiles}
    files = _role_filter("pi_dispatch_egress_profile_files")(profiles, env_file)
    rendered = _role_filter()(declared, "mini1")
    (tmp_path / "egress-profiles").mkdir()
    for file in files:
        Path(file["path"]).write_text(file["content"])
    Path(env_file).write_text(rendered)
    settings = load_settings(Path(env_file))
    assert set(settings.egress_profiles) == {"deploy", "sealed"}
    plan = egress_plan(settings)
    assert [d.written for d in plan.lists["deploy"].destinations] == ["api.example.com", ".cdn.example"]
    assert plan.lists["sealed"].destinations == () and "offline" in files[1]["content"]
    assert f"PI_EGRESS_PROFILES=deploy:{tmp_path}/egress-profiles/deploy.conf,sealed:" in rendered


def test_the_role_filter_refuses_an_invalid_host_with_the_validators_message() -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="pi_dispatch_worker_concurrency"):
        _role_filter()({f"{PREFIX}concurrency": 0}, "mini9")


def test_an_inventory_folder_loads_without_a_warning_in_either_form(tmp_path: Path) -> None:
    """The example folder holds scripts, jobs and triggers files beside the inventory: Ansible, given the folder,
    must not try them as inventory sources (from the checkout, through ansible.cfg; from anywhere, through the CLI)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    bin_dir = Path(sys.executable).parent
    for source in ("inventory.example/", "inventory.example/hosts.yml"):
        listed = [bin_dir / "ansible-inventory", "-i", source, "--graph"]
        graph = subprocess.run(listed, cwd=repo, capture_output=True, text=True, check=True)
        assert "WARNING" not in graph.stderr and "mini1" in graph.stdout
        rendered = subprocess.run(
            [sys.executable, "-m", "pi_dispatch", "config", "render", "-i", repo / source, "--host", "mini1"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        assert rendered.stderr == "" and "PI_WORKER_NAME=mini1" in rendered.stdout


def test_the_ansible_configs_ignore_what_the_cli_ignores() -> None:
    import configparser

    from pi_dispatch.fleet.inventory import NOT_INVENTORY

    repo = Path(__file__).resolve().parents[2]
    for config in (repo / "ansible.cfg", repo / "ansible" / "ansible.cfg"):
        parsed = configparser.ConfigParser(interpolation=None)
        parsed.read(config)
        listed = [pattern.strip() for pattern in parsed["inventory"]["ignore_patterns"].split(",")]
        assert tuple(listed) == NOT_INVENTORY, config
