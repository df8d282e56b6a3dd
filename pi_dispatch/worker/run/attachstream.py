"""A container's attach stream: Docker multiplexes stdout and stderr in frames of a header (the stream, the size)
and a payload; the job's output is the payloads in order, handed on by a thread of its own as they come."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

FRAME_HEADER: Final = struct.Struct(">BxxxL")  # the attach stream's frames: stream (1 stdout, 2 stderr), size
READ_BYTES: Final = 1024 * 1024
STDOUT: Final = 1


def attached_output(sock: Any) -> Iterator[tuple[bytes, bytes]]:
    """The payloads of an attach stream's frames as they arrive (several frames a read): all of them in order, and
    those of stdout alone."""
    from docker.utils.socket import read

    buffer = bytearray()
    while chunk := read(sock, READ_BYTES):
        buffer += chunk
        position, payloads, stdout = 0, bytearray(), bytearray()
        while len(buffer) - position >= FRAME_HEADER.size:
            stream, size = FRAME_HEADER.unpack_from(buffer, position)
            end = position + FRAME_HEADER.size + size
            if end > len(buffer):
                break
            payloads += buffer[position + FRAME_HEADER.size : end]
            if stream == STDOUT:
                stdout += buffer[position + FRAME_HEADER.size : end]
            position = end
        del buffer[:position]
        if payloads:
            yield bytes(payloads), bytes(stdout)


def hand_over(sock: Any, data: bytes) -> None:
    """Write `data` on the container's stdin and close it (the stream's write half: with `stdin_once`, the daemon
    then closes the container's stdin), the output still read. A stream that refuses leaves stdin open: a runner
    waiting on it ends with its timeout, its line unsigned."""
    raw = getattr(sock, "_sock", sock)
    with contextlib.suppress(OSError):
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)


def following(
    sock: Any,
    write: Callable[[bytes], object] | None,
    stdout: Callable[[bytes], object],
    lost: Callable[[], object],
    name: str,
) -> threading.Thread:
    """A started thread that hands the stream's payloads to `write` (when the output is kept) and stdout's to
    `stdout` as they come, and closes the socket at its end; `lost` hears of a stream that ended in an error (a
    daemon gone ends the stream, never the attempt)."""

    def follow() -> None:
        try:
            for data, out in attached_output(sock):
                if write is not None:
                    write(data)
                if out:
                    stdout(out)
        except Exception:  # broad: a thread's edge, where whatever escapes would go unseen
            lost()
        finally:
            for end in (sock, getattr(sock, "_sock", sock)):  # the SocketIO, and the socket it reads from
                with contextlib.suppress(OSError):
                    end.close()

    thread = threading.Thread(target=follow, name=name, daemon=True)
    thread.start()
    return thread
