"""The worker's entry: started as its unit starts it without the rest of the command line, and still refusing
bad config with the full command line's message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pi_dispatch.worker.entry import plain_invocation
from tests.support.helpers import run_cli_process


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["worker"], (None,)),
        (["worker", "--env-file", "/etc/pi-dispatch/worker.env"], (Path("/etc/pi-dispatch/worker.env"),)),
        (["worker", "--env-file=/etc/w.env"], (Path("/etc/w.env"),)),
        (["worker", "--help"], None),  # the full command line explains
        (["worker", "--env-file"], None),
        (["worker", "--env-file", "--help"], None),
        (["worker", "--env-file="], None),
        (["worker", "--envfile", "x"], None),
        (["hosts"], None),
        ([], None),
    ],
)
def test_only_the_ways_a_unit_starts_the_worker_skip_the_command_line(
    arguments: list[str], expected: tuple[Path | None] | None
) -> None:
    assert plain_invocation(arguments) == expected


def test_what_the_worker_imports_leaves_out_the_cli_framework_and_the_operator_code() -> None:
    probe = (
        "import sys\n"
        "import pi_dispatch.cli, pi_dispatch.worker.entry, pi_dispatch.worker.lifecycle\n"
        "import pi_dispatch.config.worker_settings\n"
        "print(' '.join(sorted(name for name in sys.modules if name.split('.')[0] in {'typer', 'rich', 'ansible',"
        " 'aiohttp'} or name.startswith(('pi_dispatch.cli.', 'pi_dispatch.console', 'pi_dispatch.receiver',"
        " 'pi_dispatch.audit')))))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.strip() == ""


def test_a_worker_started_as_its_unit_starts_it_refuses_bad_config_with_exit_2_and_no_traceback(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "worker.env"
    env_file.write_text("VALKEY_URL=redis://127.0.0.1:1\nPI_CONCURRENCY=0\n")
    result = run_cli_process("worker", "--env-file", str(env_file))
    assert result.returncode == 2
    assert "config error" in result.stderr and "PI_CONCURRENCY" in result.stderr
    assert "Traceback" not in result.stderr
