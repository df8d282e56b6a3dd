"""The wait gate's pure parts: the label a check is given. (Holds and leases run in tests/worker/test_lifecycle.py.)"""

from __future__ import annotations

from pi_dispatch.testing.jobs import forge_job
from pi_dispatch.worker.waitgate import wait_target


def test_wait_target_is_the_id_only_label() -> None:
    assert wait_target(forge_job(7)) == "acme/app#7"
    assert wait_target({**forge_job(7), "kind": "gitlab", "target": {"type": "pull_request", "number": 7}}) == (
        "acme/app!7"
    )
    assert wait_target({"kind": "local", "folder": "/x"}) is None
    assert wait_target({**forge_job(7), "target": {"number": True}}) is None
