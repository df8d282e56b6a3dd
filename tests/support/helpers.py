"""Helpers the tests share: the CLI in this process or as a child, the machine's redis-server, a private dockerd."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from pi_dispatch.cli.app import main

# What a long-running process (the worker, the receiver) must never load: the CLI framework and the libraries that
# check settings (a child checks them for it, `config/handover.py`).
CLI_FRAMEWORK = ("typer", "rich", "click", "ansible")
SETTINGS_CHECKERS = ("pydantic", "pydantic_core", "pydantic_settings", "jsonschema")


def modules_loaded(code: str, roots: Iterable[str], prefixes: Iterable[str] = ()) -> list[str]:
    """Run `code` in a fresh interpreter; the modules it left loaded whose top package is one of `roots` or whose
    name starts with one of `prefixes`."""
    probe = (
        f"{code}\nimport sys\n"
        f"print(' '.join(sorted(name for name in sys.modules if name.split('.')[0] in {set(roots)!r}"
        f" or name.startswith({tuple(prefixes)!r}))))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return result.stdout.splitlines()[-1].split() if result.stdout.strip() else []


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


def run_cli_process(
    *args: str, columns: int = 200, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m pi_dispatch ARGS` in a child process, its output through a pipe; `env` adds to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "pi_dispatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": str(columns), **(env or {})},
        check=False,
    )


class Terminal:
    """`python -m pi_dispatch ARGS` in a pseudo-terminal that is its controlling terminal, as in a shell: rich
    sees a terminal, a typed key reaches it, Ctrl-C is its SIGINT. `output` is everything it drew."""

    def __init__(self, *args: str, columns: int = 160) -> None:
        import pty

        env = {**os.environ, "TERM": "xterm", "COLUMNS": str(columns), "LINES": "50"}
        env.pop("NO_COLOR", None)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe(sys.executable, [sys.executable, "-m", "pi_dispatch", *args], env)
        self.output = b""
        self.exit_code: int | None = None

    def _read(self, timeout_s: float) -> None:
        import select

        if select.select([self.fd], [], [], timeout_s)[0]:
            with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
                self.output += os.read(self.fd, 65536)

    def read_until(self, done: Callable[[bytes], bool], timeout_s: float = 60) -> bytes:
        deadline = time.monotonic() + timeout_s
        while not done(self.output):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not seen in the terminal: {self.output[-2000:]!r}")
            self._read(0.2)
        return self.output

    def press(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait(self, timeout_s: float = 60) -> int:
        """The exit code, reading what it draws meanwhile (a full terminal would block it)."""
        deadline = time.monotonic() + timeout_s
        while (ended := os.waitpid(self.pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"still running: {self.output[-2000:]!r}")
            self._read(0.05)
        self._read(0.2)
        self.exit_code = os.waitstatus_to_exitcode(ended[1])
        return self.exit_code

    def close(self) -> None:
        if self.exit_code is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            self.exit_code = -signal.SIGKILL
        with contextlib.suppress(OSError):
            os.close(self.fd)


def plain_rows(printed: str) -> dict[str, list[str]]:
    """The records of the plain tables a command prints through a pipe, by their first column: the cells of a line
    are two or more spaces apart, and no cell is empty (`-`)."""
    rows = (re.split(r"\s{2,}", line.strip()) for line in printed.splitlines())
    return {cells[0]: cells for cells in rows if len(cells) > 1}


Coroutine = Callable[..., Awaitable[Any]]


class Injected(RuntimeError):
    """The fault a test puts into a loop."""


def failing_once(original: Coroutine, calls: list[int]) -> Coroutine:
    """`original`, but its first call raises Injected."""

    async def patched(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise Injected("a fault put in by the test")
        return await original(*args, **kwargs)

    return patched


async def until(found: Callable[[], bool], what: str, ceiling_s: float = 180.0) -> None:
    """Return once `found()` holds, checked every 50 ms; a ceiling only a hang reaches."""
    deadline = time.monotonic() + ceiling_s
    while not found():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)
