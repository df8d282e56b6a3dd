"""Settings checked in a forked child and handed to a parent that never loads the checking libraries: the same
values, the same refusals, secrets still masked, and a child that dies is a failure, never a silent default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_dispatch.config.handover import HandoverFailed, Secret, checked_in_child, secret_text, settled
from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import WorkerSettings, load_settings
from pi_dispatch.core.errors import ConfigError, ExitStatus, PiDispatchError
from pi_dispatch.worker.entry import SETTINGS_PROPERTIES
from tests.support.helpers import SETTINGS_CHECKERS, modules_loaded

FACTS = HostFacts("host.local", Path("/home/pi"), 1000)
ENV = (
    "VALKEY_URL=redis://store.lan:6379/2\nVALKEY_PASSWORD=s3cret-value\nPI_WORKER_NAME=mini1\n"
    "PI_SECRET_PROFILES=prod:/opt/resolve\nPI_ALLOWED_IMAGES=a:1,b:2\nPI_JOB_CPUS=1.5\nPI_LOGS_DIR=/var/lib/pi/logs\n"
    "PI_TRIGGERS_FILE=/etc/pi-dispatch/triggers.json\nPI_CAPTURE_JOB_LOGS=0\n"
)


def test_the_handed_settings_carry_every_field_and_property_the_model_loaded(tmp_path: Path) -> None:
    env_file = tmp_path / "worker.env"
    env_file.write_text(ENV)
    loaded = load_settings(env_file, facts=FACTS)
    handed = checked_in_child(lambda: settled(load_settings(env_file, facts=FACTS), SETTINGS_PROPERTIES))
    for name in WorkerSettings.model_fields:
        if name == "valkey_password":
            continue
        assert getattr(handed, name) == getattr(loaded, name), name
    assert handed.worker_name_declared is True
    assert secret_text(handed.valkey_password) == "s3cret-value" == secret_text(loaded.valkey_password)
    assert "s3cret" not in repr(handed) and "s3cret" not in str(handed.valkey_password)
    with pytest.raises(AttributeError, match="frozen"):
        handed.concurrency = 9
    with pytest.raises(AttributeError, match="no 'model_dump'"):
        handed.model_dump()


def test_a_refusal_in_the_child_is_raised_here_with_every_problem(tmp_path: Path) -> None:
    env_file = tmp_path / "worker.env"
    env_file.write_text("PI_CONCURRENCY=0\nPI_JOB_CPUS=lots\n")
    with pytest.raises(ConfigError) as here:
        load_settings(env_file, facts=FACTS)
    with pytest.raises(ConfigError) as handed:
        checked_in_child(lambda: settled(load_settings(env_file, facts=FACTS)))
    assert handed.value.problems == here.value.problems and len(handed.value.problems) == 2
    assert handed.value.exit_code == ExitStatus.CONFIG


def test_a_child_that_dies_without_an_answer_is_a_failure_systemd_restarts() -> None:
    with pytest.raises(HandoverFailed, match="without an answer") as failed:
        checked_in_child(lambda: os._exit(9))
    assert failed.value.exit_code == ExitStatus.FAILURE


def test_another_error_in_the_child_keeps_its_message_and_exit_status() -> None:
    class Unreadable(PiDispatchError):
        exit_code = ExitStatus.CONFIG

    def load() -> object:
        raise Unreadable("the env file /etc/w.env cannot be read")

    with pytest.raises(HandoverFailed, match="cannot be read") as failed:
        checked_in_child(load)
    assert failed.value.exit_code == ExitStatus.CONFIG


def test_a_secret_compares_by_value_and_never_shows_it() -> None:
    assert Secret("a") == Secret("a") != Secret("b")
    assert "a" not in repr(Secret("a")).replace("Secret", "")
    assert secret_text(None) is None


def test_the_worker_process_checks_its_settings_without_loading_the_checking_libraries(tmp_path: Path) -> None:
    env_file = tmp_path / "worker.env"
    env_file.write_text(ENV)
    code = (
        "from pathlib import Path\n"
        "from pi_dispatch.worker.entry import checked_settings\n"
        f"settings = checked_settings(Path({str(env_file)!r}))\n"
        "assert (settings.worker_name, settings.job_cpus) == ('mini1', 1.5)\n"
    )
    assert modules_loaded(code, SETTINGS_CHECKERS) == []
