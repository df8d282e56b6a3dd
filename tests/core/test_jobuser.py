"""The job's user (upstream-jobrun.md §6.5, §9.11), and a root worker's that the reference does not have."""

from __future__ import annotations

from pi_dispatch.core.jobuser import JobUser, job_user
from pi_dispatch.core.reasons import Reason

ANY_UID = frozenset({"anyUid"})


def test_a_worker_of_its_own_uid() -> None:
    assert job_user(1234, 1234, ANY_UID, "pi") == JobUser("1234:1234", "/home/pi")
    assert job_user(1234, 1234, frozenset(), "pi") == Reason.JOB_IMAGE_ANY_UID_UNSUPPORTED
    assert job_user(1001, 1001, frozenset(), "pi") == JobUser()  # the image's own uid: its own user
    assert job_user(1234, 0, ANY_UID, "pi") == Reason.JOB_USER_UNMAPPABLE  # root group
    assert job_user(1234, 2375, ANY_UID, "pi", socket_gid=2375) == Reason.JOB_USER_UNMAPPABLE  # the docker group


def test_a_root_worker_never_runs_a_job_as_root() -> None:
    assert job_user(0, 0, frozenset(), "1001:1001") == JobUser(owner=(1001, 1001))
    assert job_user(0, 0, frozenset(), "1500") == JobUser(owner=(1500, 1500))
    assert job_user(0, 0, ANY_UID, "pi") == JobUser("1001:1001", "/home/pi", (1001, 1001))
    for user in ("", "root", "0", "0:0", "pi"):
        assert job_user(0, 0, frozenset(), user) == Reason.JOB_USER_UNMAPPABLE


def test_a_daemon_that_remaps_users_gives_no_job_a_user() -> None:
    for option in ("name=rootless", "name=userns"):
        assert job_user(1234, 1234, ANY_UID, "pi", daemon=frozenset({option})) == Reason.JOB_USER_UNMAPPABLE
        assert job_user(0, 0, ANY_UID, "1001", daemon=frozenset({option})) == Reason.JOB_USER_UNMAPPABLE
    seccomp = frozenset({"name=seccomp,profile=builtin", "name=cgroupns"})
    assert job_user(1234, 1234, ANY_UID, "pi", daemon=seccomp) == JobUser("1234:1234", "/home/pi")
