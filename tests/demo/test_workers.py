"""The demo's workers' env: an inventory host's rendered env pointed at this machine, its profile allowlists too."""

from __future__ import annotations

from pathlib import Path

from pi_dispatch.config.hostvars import PREFIX, InventoryHost
from pi_dispatch.config.worker_settings import load_settings
from pi_dispatch.demo.workers import worker_environment
from pi_dispatch.worker.host.egressproxy import egress_plan


def test_a_hosts_profile_allowlists_are_written_locally_and_read_as_the_worker_reads_them(tmp_path: Path) -> None:
    host = InventoryHost(
        "mini1",
        {
            f"{PREFIX}name": "mini1",
            f"{PREFIX}wait_profiles": {"nightly": "/opt/pi-dispatch/profiles/nightly"},
            f"{PREFIX}egress_profiles": {"nightly": "offline"},
        },
        "test",
    )
    env, _ = worker_environment(host, "redis://127.0.0.1:1/0", tmp_path, "mini1", {"PI_EGRESS": "0"})
    assert env["PI_EGRESS_PROFILES"] == f"nightly:{tmp_path}/mini1/egress-profiles/nightly.conf"
    assert env["PI_WAIT_PROFILES"] == f"nightly:{tmp_path}/mini1/profiles/nightly"  # not the lists' table
    plan = egress_plan(load_settings(environment=lambda: env))
    assert plan.network_for(["nightly"]) == "none" and plan.network_for([]) is None
