"""Files that survive a crash whole, and a failed write named by its cause, never its path."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

# Temporary files end in neither .json nor .log, so the reaper and readers never take them for records.
_TEMP_SUFFIX = ".partial"


def write_atomically(target: Path, content: bytes, mode: int | None = None) -> None:
    """Temp file, fsync, rename, fsync of the folder: once this returns, the file survives a crash whole.
    The file is private (0600) unless mode says otherwise."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=_TEMP_SUFFIX)
    try:
        if mode is not None:
            os.fchmod(handle, mode)
        with os.fdopen(handle, "wb") as temp:
            temp.write(content)
            temp.flush()
            os.fsync(temp.fileno())
        Path(temp_name).replace(target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)  # the rename itself is durable only once the folder is
    finally:
        os.close(folder)


def failure_name(error: BaseException) -> str:
    """A write's failure by its cause (`ENOSPC`, `EROFS`, ...), never its path."""
    code = getattr(error, "errno", None)
    return errno.errorcode.get(code, type(error).__name__) if isinstance(code, int) else type(error).__name__
