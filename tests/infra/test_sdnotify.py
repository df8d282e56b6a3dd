"""systemd's notify protocol against a real datagram socket: what a Type=notify unit with WatchdogSec hears."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path

import pytest

from pi_dispatch.infra.sdnotify import WATCHDOG_SHARE, notify, watchdog_interval_s
from tests.support.workers import CEILING_S as WORKER_CEILING_S
from tests.support.workers import start_worker_process, worker_env

CEILING_S = 30.0  # only a hang reaches it


def listening(path: str) -> socket.socket:
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(5)
    return receiver


def test_a_state_line_reaches_the_notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False  # outside systemd: nothing to tell
    path = str(tmp_path / "notify")
    with listening(path) as receiver:
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert notify("READY=1") is True
        assert receiver.recv(256) == b"READY=1"
    assert notify("WATCHDOG=1") is False  # the socket is gone: refused, never raised


def test_a_notify_socket_nobody_reads_never_blocks_the_sender(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the reader's queue is full the line is dropped, never waited on: the worker sends from its event loop,
    which a blocked send froze for good (a test whose loop was busy elsewhere hung there, unread)."""
    path = str(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(path)
        sent: list[bool] = []
        sender = threading.Thread(target=lambda: sent.extend(notify(f"STATUS={i}") for i in range(1000)), daemon=True)
        sender.start()
        sender.join(CEILING_S)
        assert not sender.is_alive() and len(sent) == 1000
        assert sent[0] and not sent[-1]  # the first ones queued, the rest dropped
        assert receiver.recv(64) == b"STATUS=0"


def test_an_abstract_notify_socket_is_reached_too(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"pi-dispatch-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("\0" + name)
        receiver.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("STOPPING=1") is True
        assert receiver.recv(256) == b"STOPPING=1"


def test_the_watchdog_is_fed_three_times_per_period_and_only_by_its_own_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert watchdog_interval_s() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval_s() == 30 / WATCHDOG_SHARE
    monkeypatch.setenv("WATCHDOG_PID", "1")  # meant for another process
    assert watchdog_interval_s() is None
    monkeypatch.delenv("WATCHDOG_PID")
    for bad in ("0", "-5", "soon", "", "²", "٣0"):  # str.isdigit() takes the last two
        monkeypatch.setenv("WATCHDOG_USEC", bad)
        assert watchdog_interval_s() is None


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.slow
def test_a_worker_process_says_ready_feeds_the_watchdog_and_says_stopping(
    tmp_path: Path, valkey_url: str, job_image: str
) -> None:
    path = str(tmp_path / "notify")
    env = worker_env(tmp_path, valkey_url, job_image, "mini1", NOTIFY_SOCKET=path, WATCHDOG_USEC="1500000")
    with listening(path) as receiver:
        # a worker's start takes seconds on a machine busy with the other tests: each wait has only a hang's ceiling
        receiver.settimeout(WORKER_CEILING_S)
        process = start_worker_process(env, tmp_path / "worker.log")
        try:
            heard = []
            while heard.count(b"WATCHDOG=1") < 3:
                try:
                    heard.append(receiver.recv(256))
                except TimeoutError:
                    raise AssertionError((heard, (tmp_path / "worker.log").read_text()[-2000:])) from None
            assert heard[0] == b"READY=1"  # once serving, before the first feed
            process.send_signal(signal.SIGTERM)
            while (message := receiver.recv(256)) == b"WATCHDOG=1" or message.startswith(b"STATUS="):
                pass
            assert message == b"STOPPING=1"
            assert process.wait(60) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
