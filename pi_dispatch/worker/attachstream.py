"""The payloads of a container's attach stream: Docker multiplexes stdout and stderr in frames of a header (the
stream, the size) and a payload; the job's output is the payloads in order."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Final

FRAME_HEADER: Final = struct.Struct(">BxxxL")  # the attach stream's frames: stream (1 stdout, 2 stderr), size
READ_BYTES: Final = 1024 * 1024


def attached_output(sock: Any) -> Iterator[bytes]:
    """The payloads of an attach stream's frames, in order, as they arrive (several frames a read)."""
    from docker.utils.socket import read

    buffer = bytearray()
    while chunk := read(sock, READ_BYTES):
        buffer += chunk
        position, payloads = 0, bytearray()
        while len(buffer) - position >= FRAME_HEADER.size:
            _, size = FRAME_HEADER.unpack_from(buffer, position)
            end = position + FRAME_HEADER.size + size
            if end > len(buffer):
                break
            payloads += buffer[position + FRAME_HEADER.size : end]
            position = end
        del buffer[:position]
        if payloads:
            yield bytes(payloads)
