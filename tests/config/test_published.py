"""The published schemas are generated from the one declaration of each setting, and say what the code does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_dispatch.config.hostvars import PREFIX, host_forms
from pi_dispatch.config.patterns import whole_number_pattern
from pi_dispatch.config.published import GENERATED, generated
from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import WorkerSettings, load_settings
from pi_dispatch.config.worker_variables import variables
from pi_dispatch.core.profiles import _parse
from tests.support.helpers import run_cli

SCHEMAS = Path(__file__).resolve().parent.parent.parent / "schemas"
FACTS = HostFacts("host.local", Path("/home/pi"), 1000)


@pytest.mark.parametrize("name", GENERATED)
def test_the_committed_schema_is_the_generated_one(name: str) -> None:
    committed = (SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8")
    assert committed == generated(name), f"regenerate it: pi-dispatch config schema --write schemas/ ({name})"


def test_config_schema_prints_and_writes_what_is_committed(tmp_path: Path) -> None:
    printed = run_cli("config", "schema", "host-vars")
    assert printed.returncode == 0 and json.loads(printed.stdout)["title"] == "pi-dispatch inventory host variables"
    written = run_cli("config", "schema", "--write", str(tmp_path))
    assert written.returncode == 0
    for name in GENERATED:
        assert (tmp_path / f"{name}.schema.json").read_text() == (SCHEMAS / f"{name}.schema.json").read_text()
    assert run_cli("config", "schema", "nope").returncode == 2


def test_every_setting_has_one_host_variable_and_every_variable_one_setting() -> None:
    env_vars = variables()
    host_vars = [name for name in host_forms() if name.startswith(PREFIX)]
    assert len(set(env_vars)) == len(env_vars) == len(WorkerSettings.model_fields)
    assert len(set(host_vars)) == len(host_vars)
    env_schema = json.loads(generated("worker-env"))["properties"]
    host_schema = json.loads(generated("host-vars"))["properties"]
    assert list(env_schema) == list(env_vars)
    assert set(host_schema) == set(host_vars)


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**10))
def test_the_whole_number_pattern_matches_exactly_the_range(low: int, span: int, probe: int) -> None:
    high = low + span
    pattern = re.compile(f"(?:{whole_number_pattern(low, high)})")
    for number in (probe, low, high, low - 1, high + 1, probe % (high + 2)):
        if number >= 0:
            assert (pattern.fullmatch(str(number)) is not None) is (low <= number <= high), (low, high, number)
    assert pattern.fullmatch("0" + str(max(low, 1))) is None  # never a leading zero


def test_an_env_file_is_a_settings_source_that_replaces_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "worker.env"
    path.write_text("PI_WORKER_NAME=mini1\nPI_CONCURRENCY=7\nPI_SECRET_PROFILES=prod:/opt/r.sh\n")
    monkeypatch.setenv("PI_JOB_IMAGE", "from-the-environment:1")
    direct = WorkerSettings(_env_file=path)  # pydantic-settings' own entry point, through settings_customise_sources
    loaded = load_settings(path, facts=FACTS)
    assert (direct.worker_name, direct.concurrency, direct.secret_profiles) == ("mini1", 7, {"prod": "/opt/r.sh"})
    assert direct.job_image == loaded.job_image == "pi-job:latest"  # the file alone, as systemd gives it
    assert WorkerSettings().job_image == "from-the-environment:1"


def test_each_profile_variable_is_parsed_once_per_load() -> None:
    _parse.cache_clear()
    env = {"PI_SECRET_PROFILES": "prod:/opt/r.sh,stage:/opt/s.sh", "PI_WAIT_PROFILES": "ci:/opt/ci.sh"}
    load_settings(facts=FACTS, environment=lambda: env)
    info = _parse.cache_info()
    assert info.misses == 2, info  # the schema's format check and the model share one parse of each value
