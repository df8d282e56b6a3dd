"""The runtime a job runs under, decided by the host from the profiles it binds, and what the host serves once its
runtimes have been tried."""

from __future__ import annotations

import json

import pytest

from pi_dispatch.core.runtimes import RUNSC, RuntimeChoice, daemon_json_with_runsc, row_runtimes

CHOICE = RuntimeChoice(None, frozenset({"deploy", "untrusted"}))


def test_a_runsc_profile_runs_under_runsc_and_anything_else_under_the_hosts_runtime() -> None:
    assert CHOICE.needed() == (RUNSC,)
    assert CHOICE.for_profiles(["deploy", "ci"]) == RUNSC and CHOICE.for_profiles(["ci"]) is None
    everything = RuntimeChoice("runc", frozenset({"deploy"}))
    assert everything.needed() == ("runc", RUNSC) and everything.for_profiles([]) == "runc"


def test_what_needs_a_runtime_that_failed_is_not_served_and_docker_s_default_always_is() -> None:
    failed, working = CHOICE.with_working([]), CHOICE.with_working([RUNSC])
    assert failed.unserved() == {"deploy", "untrusted"} and not failed.usable(RUNSC) and failed.usable(None)
    assert working.unserved() == frozenset() and working.usable(RUNSC)


def test_a_rows_runtimes_are_read_as_hostile_text() -> None:
    assert row_runtimes("runc,runsc") == {"runc", "runsc"}
    assert row_runtimes(b"runsc") == {"runsc"}
    assert row_runtimes("runsc,/usr/bin/evil,,-x,a b") == {"runsc"}
    assert row_runtimes(None) == frozenset() and row_runtimes(7) == frozenset()


def test_runsc_is_registered_in_daemon_json_and_the_rest_of_it_kept() -> None:
    kept = '{"log-driver": "journald", "runtimes": {"kata": {"path": "kata-runtime"}, "runsc": {"path": "/old"}}}'
    written = json.loads(daemon_json_with_runsc(kept, "--network=host  --platform=systrap"))
    assert written["log-driver"] == "journald" and written["runtimes"]["kata"] == {"path": "kata-runtime"}
    assert written["runtimes"]["runsc"] == {"path": "runsc", "runtimeArgs": ["--network=host", "--platform=systrap"]}
    assert json.loads(daemon_json_with_runsc("", ""))["runtimes"]["runsc"]["runtimeArgs"] == []
    for hostile in ("[1]", '{"runtimes": 7}', "{not json"):
        with pytest.raises(ValueError):
            daemon_json_with_runsc(hostile, "")
