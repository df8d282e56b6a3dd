"""Which user a job's container runs as, decided from facts (never a probe container), as the reference decides it
for a worker running as its own user, and never root for a worker running as root.

A worker of its own uid runs a job as that uid (`--user=<uid>:<gid>`, `HOME=/home/pi`), so the job can write the
workspace the worker made, on an image that declares `anyUid`; as the image's own user when the worker's uid is the
image's (1001). A root group, or the Docker socket's group, would hand the job more than its files: refused. A
worker running as root (the demo, tests, CI) runs a job as the image's own numeric user, or, on an `anyUid` image, as
1001; the job's folders are then handed to that user. The reference refuses a root worker outright. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from pi_dispatch.core.imagegates import ANY_UID
from pi_dispatch.core.reasons import Reason

IMAGE_UID: Final = 1001  # the reference image's `pi` user
CONTAINER_HOME: Final = "/home/pi"
REMAPPING: Final = ("name=rootless", "name=userns")  # the daemon's security options that remap a job's uid
NUMERIC_USER: Final = re.compile(r"([1-9][0-9]{0,9})(?::([1-9][0-9]{0,9}))?")


@dataclass(frozen=True)
class JobUser:
    """`--user` (None: the image's own), the `HOME` that goes with it, and who the job's folders are handed to
    (None: they stay the worker's)."""

    user: str | None = None
    home: str | None = None
    owner: tuple[int, int] | None = None


def _numeric(user: str) -> tuple[int, int] | None:
    found = NUMERIC_USER.fullmatch(user.strip())
    if found is None:
        return None
    uid = int(found.group(1))
    return uid, int(found.group(2) or uid)


def job_user(
    euid: int,
    egid: int,
    capabilities: frozenset[str],
    image_user: str,
    *,
    socket_gid: int | None = None,
    daemon: frozenset[str] = frozenset(),
) -> JobUser | Reason:
    """The job's user on this host, or why no user can be given (`job-user-unmappable`,
    `job-image-any-uid-unsupported`). `daemon`: its security options: a rootless daemon or one that remaps users
    gives a job's uid another owner on the host, so no uid can write what the worker made."""
    if any(option.startswith(REMAPPING) for option in daemon):
        return Reason.JOB_USER_UNMAPPABLE
    any_uid = ANY_UID in capabilities
    if euid == 0:
        if (owner := _numeric(image_user)) is not None:
            return JobUser(owner=owner)
        if any_uid:
            return JobUser(f"{IMAGE_UID}:{IMAGE_UID}", CONTAINER_HOME, (IMAGE_UID, IMAGE_UID))
        return Reason.JOB_USER_UNMAPPABLE
    if euid == IMAGE_UID:
        return JobUser()
    if not any_uid:
        return Reason.JOB_IMAGE_ANY_UID_UNSUPPORTED
    if egid == 0 or (socket_gid is not None and egid == socket_gid):
        return Reason.JOB_USER_UNMAPPABLE
    return JobUser(f"{euid}:{egid}", CONTAINER_HOME)
