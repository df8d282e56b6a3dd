"""The worker's settings: schema first, then typed; every problem at once; exit 2 from the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_dispatch.config.sources import HostFacts
from pi_dispatch.config.worker_settings import load_settings
from pi_dispatch.core.errors import ConfigError
from tests.support.helpers import run_cli

FACTS = HostFacts(hostname="Robs-Mac-Mini.local", home=Path("/home/rob"), euid=1000)


def load(env: dict[str, str]) -> object:
    return load_settings(facts=FACTS, environment=lambda: env)


def refused(env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(env)
    return [str(problem) for problem in caught.value.problems]


def test_declared_name_is_verbatim() -> None:
    settings = load_settings(facts=FACTS, environment=lambda: {"PI_WORKER_NAME": "Mac-Mini-1"})
    assert (settings.worker_name, settings.worker_name_declared) == ("Mac-Mini-1", True)


@pytest.mark.parametrize("env", [{}, {"PI_WORKER_NAME": ""}])
def test_unset_or_empty_name_is_not_declared(env: dict[str, str]) -> None:
    settings = load_settings(facts=FACTS, environment=lambda: env)
    assert (settings.worker_name, settings.worker_name_declared) == ("robs-mac-mini.local", False)


def test_defaults_and_typed_values() -> None:
    settings = load_settings(
        facts=FACTS,
        environment=lambda: {
            "PI_SECRET_PROFILES": "prod:/opt/a.sh",
            "PI_WAIT_INTERVAL_MS": "1000",
            "PI_CONCURRENCY": " 5",
        },
    )
    assert settings.secret_profiles == {"prod": "/opt/a.sh"} and settings.wait_profiles == {}
    assert settings.wait_interval_ms == 30_000  # clamped up, as upstream does
    assert settings.concurrency == 5 and settings.log_retention_days == 30
    assert settings.logs_dir == Path("/home/rob/.pi-dispatch/logs")
    assert settings.valkey_url == "redis://127.0.0.1:6379" and settings.job_image == "pi-job:latest"
    assert settings.sources["concurrency"] == "environment" and settings.sources["job_image"] == "default"
    no_home = HostFacts("h", None, 1234)
    assert load_settings(facts=no_home, environment=lambda: {}).logs_dir.parts[-2:] == ("pi-dispatch-1234", "logs")


def test_process_environment_is_read_through_pydantic_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PI_WORKER_NAME", "mini9")
    monkeypatch.setenv("PI_WAIT_PROFILES", "ci:/opt/ci.sh")
    monkeypatch.delenv("PI_SECRET_PROFILES", raising=False)
    settings = load_settings(facts=FACTS)
    assert (settings.worker_name, settings.wait_profiles) == ("mini9", {"ci": "/opt/ci.sh"})


def test_every_problem_at_once_each_naming_its_variable() -> None:
    messages = refused(
        {
            "PI_WORKER_NAME": "prod.json",
            "PI_CONCURRENCY": "0",
            "PI_SECRET_PROFILES": "prod:rel",
            "VALKEY_URL": "http://x",
            "PI_CAPTURE_JOB_LOGS": "true",
        }
    )
    assert len(messages) == 5
    for variable in ("PI_WORKER_NAME", "PI_CONCURRENCY", "PI_SECRET_PROFILES", "VALKEY_URL", "PI_CAPTURE_JOB_LOGS"):
        assert any(message.startswith(variable) and "fix:" in message for message in messages), variable


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"PI_SECRET_PROFILES": "prod:/x,prod:/y"}, "declares 'prod' twice"),
        ({"PI_SECRET_PROFILES": "a:b:c"}, "ABSOLUTE"),  # the path "b:c" is drive-relative
        ({"PI_WAIT_PROFILES": "a,b:/x"}, "name:/absolute/path"),
        ({"PI_WAIT_PROFILES": "ci:relative/check.sh"}, "ABSOLUTE"),
        ({"PI_WORKER_NAME": "mini1\nPI_CONCURRENCY=99"}, "PI_WORKER_NAME"),
        ({"PI_LOGS_DIR": "/var/log\n"}, "PI_LOGS_DIR"),
    ],
)
def test_hostile_values_are_refused_by_name(env: dict[str, str], fragment: str) -> None:
    assert any(fragment in message for message in refused(env))


def test_ten_thousand_profiles_are_refused_once_by_their_count_not_one_by_one() -> None:
    huge = ",".join(f"p{i}:/opt/pi/p{i}.sh" for i in range(10_000))
    messages = refused({"PI_SECRET_PROFILES": huge})
    assert [message for message in messages if "PI_SECRET_PROFILES" in message] == [
        next(message for message in messages if "10000 profiles; at most 256" in message)
    ]  # the count is checked before each entry: one message, never ten thousand (how long it takes is bench/'s)


def test_secrets_are_never_in_errors_or_repr() -> None:
    messages = refused({"VALKEY_PASSWORD": "hunter2\nsecond", "PI_CONCURRENCY": "x"})
    assert all("hunter2" not in message for message in messages)
    settings = load_settings(facts=FACTS, environment=lambda: {"VALKEY_PASSWORD": "hunter2"})
    assert "hunter2" not in repr(settings) and settings.valkey_password is not None
    assert settings.valkey_password.get_secret_value() == "hunter2"


def test_cli_check_ok_and_refusal_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "tmpXYZ"  # Ansible's validate: hands over a temp file without a suffix
    good.write_text("PI_WORKER_NAME=mini1\nPI_SECRET_PROFILES=prod:/opt/pi/r.sh\nVALKEY_PASSWORD=hunter2\n")
    ok = run_cli("config", "check", "--env-file", str(good))
    assert ok.returncode == 0 and "OK" in ok.stdout and "mini1" in ok.stdout
    bad = tmp_path / "bad"
    bad.write_bytes(b"PI_WORKER_NAME=bad name\nPI_CONCURRENCY=0\nVALKEY_PASSWORD=hunter2\n")
    result = run_cli("config", "check", "--env-file", str(bad))
    assert result.returncode == 2
    assert "PI_WORKER_NAME" in result.stderr and "PI_CONCURRENCY" in result.stderr and str(bad) in result.stderr
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr + result.stdout


@pytest.mark.parametrize("content", [b"TZ=Z\xfcrich\n", b"\x00\x01\x02", b'PI_WORKER_NAME="unterminated\n'])
def test_cli_hostile_files_exit_2_without_traceback(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "hostile.env"
    path.write_bytes(content)
    result = run_cli("config", "check", "--env-file", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr and str(path) in result.stderr


def test_cli_missing_file_exits_2(tmp_path: Path) -> None:
    result = run_cli("config", "check", "--env-file", str(tmp_path / "nope.env"))
    assert result.returncode == 2 and "cannot be read" in result.stderr


def test_cli_show_redacts_and_names_sources(tmp_path: Path) -> None:
    path = tmp_path / "worker.env"
    path.write_text("PI_WORKER_NAME=mini1\nVALKEY_PASSWORD=hunter2\n")
    result = run_cli("config", "show", "--json", "--env-file", str(path))
    assert result.returncode == 0 and "hunter2" not in result.stdout and "********" in result.stdout
    assert f'"worker_name": "{path}"' in result.stdout and '"concurrency": "default"' in result.stdout


def test_a_replicated_store_is_named_by_its_sentinels_and_refused_by_name_when_malformed() -> None:
    settings = load({"VALKEY_SENTINELS": "s1:26379, s2:26379", "VALKEY_SENTINEL_PASSWORD": "spw"})
    assert settings.valkey_sentinels == "s1:26379, s2:26379" and settings.valkey_primary_name == "pi-dispatch"
    for env in ({"VALKEY_SENTINELS": "s1"}, {"VALKEY_SENTINELS": "s1:26379;s2:26379"}):
        assert any(message.startswith("VALKEY_SENTINELS") and "fix:" in message for message in refused(env))
    assert any(message.startswith("VALKEY_PRIMARY_NAME") for message in refused({"VALKEY_PRIMARY_NAME": "a b"}))


def test_the_cli_refuses_malformed_sentinels_in_one_line_with_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VALKEY_SENTINELS", "store1")
    done = run_cli("hosts")
    assert done.returncode == 2, done.stderr
    assert "VALKEY_SENTINELS" in done.stderr and "Traceback" not in done.stderr


def test_a_misspelt_variable_is_refused_with_the_setting_it_resembles() -> None:
    said = refused({"PI_CONCURENCY": "3", "PI_FOO": "1", "VALKEY_PASWORD": "x"})
    assert any(line.startswith("PI_CONCURENCY:") and "did you mean PI_CONCURRENCY?" in line for line in said)
    assert any(line.startswith("PI_FOO:") and "not a variable pi-dispatch knows" in line for line in said)
    assert any("did you mean VALKEY_PASSWORD?" in line for line in said)


def test_variables_of_other_tools_and_of_the_receiver_and_the_job_pass() -> None:
    load(
        {
            "GITHUB_TOKEN": "t",
            "HOME": "/root",
            "WEBHOOK_SECRET": "s",
            "PI_JOB_ID": "gh-1",
            "PI_RECEIVER_HEALTH_ADDR": "",
        }
    )


def test_the_cli_refuses_a_misspelt_variable_in_an_env_file_and_the_receiver_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "worker.env"
    env_file.write_text("PI_WORKER_NAME=mini1\nPI_CONCURENCY=3\n")
    worker = run_cli("config", "check", "--env-file", str(env_file))
    assert worker.returncode == 2 and "did you mean PI_CONCURRENCY?" in worker.stderr
    monkeypatch.setenv("WEBHOOK_SECRT", "x")
    receiver = run_cli("receiver", "check")
    assert receiver.returncode == 2 and "did you mean WEBHOOK_SECRET?" in receiver.stderr


@pytest.mark.parametrize(("value", "on"), [(None, True), ("", True), ("1", True), ("0", False)])
def test_egress_is_on_unless_exactly_0_as_the_reference_reads_it(value: str | None, on: bool) -> None:
    settings = load_settings(facts=FACTS, environment=lambda: {} if value is None else {"PI_EGRESS": value})
    assert settings.egress is on
    # with it on, jobs join the egress proxy's network unless one is named; with it off, the daemon's default
    assert settings.jobs_network == ("pi-egress" if on else None)
    assert settings.egress_network == ("pi-egress" if on else None)


@pytest.mark.parametrize("value", ["yes", "true", "01", " 1", "on"])
def test_egress_takes_no_other_spelling(value: str) -> None:
    assert any("PI_EGRESS" in message for message in refused({"PI_EGRESS": value}))


def test_jobs_cut_off_from_every_network_need_no_egress_proxy() -> None:
    settings = load_settings(facts=FACTS, environment=lambda: {"PI_JOB_NETWORK": "none"})
    assert settings.egress and settings.jobs_network == "none" and settings.egress_network is None
    named = load_settings(facts=FACTS, environment=lambda: {"PI_JOB_NETWORK": "pi-egress-b", "PI_EGRESS": "1"})
    assert named.egress_network == "pi-egress-b"
