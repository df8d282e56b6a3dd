"""What each host could run of the jobs waiting: its own queue's, the shared queue's it serves, a peer's it may
steal. Pure."""

from __future__ import annotations

from pi_dispatch.fleet.backlog import could_run, runnable, shown_count
from pi_dispatch.fleet.steal import Waiting, parse_waiting


def job(queue: str, job_id: str, data: object, *, bound: bool = False, stolen: bool = False) -> Waiting:
    return Waiting(queue, job_id, data, 1_000, stolen, bound, "")


ROWS = [
    {"name": "prod1", "caps": "s:prod", "routes": "true", "staleMs": 0},
    {"name": "prod2", "caps": "s:prod", "routes": "true", "staleMs": 0},
    {"name": "plain", "caps": "", "routes": "false", "staleMs": 0},
    {"name": "gone", "caps": "s:prod", "routes": "true", "staleMs": 600_000},
]


def test_a_host_could_run_its_own_jobs_the_shared_ones_it_serves_and_a_peers_it_may_steal() -> None:
    waiting = [
        job("pi-jobs", "plain-1", {}),
        job("pi-jobs", "prod-shared", {"secretsProfile": "prod"}),
        job("pi-jobs@prod1", "prod-routed", {"secretsProfile": "prod"}),
        job("pi-jobs@prod1", "cron-run", {"kind": "local"}, bound=True),
        job("pi-jobs@prod1", "moved-once", {"secretsProfile": "prod"}, stolen=True),
    ]
    assert runnable(ROWS, waiting) == {"prod1": 5, "prod2": 3, "plain": 1}  # a silent host is not counted
    assert not could_run(ROWS[2], waiting[2])  # a nameless host steals nothing
    assert not could_run(ROWS[1], job("pi-jobs@prod1", "unreadable", None))


def test_stored_fields_are_read_as_the_stealer_sees_them() -> None:
    fields = [b'{"kind":"local"}', b"1700", b"2", b"2", None, None]
    parsed = parse_waiting("pi-jobs@a", "j", fields)
    assert parsed is not None and parsed.bound and parsed.stolen_already and parsed.enqueued_ms == 1700
    assert parse_waiting("pi-jobs@a", "gone", [None] * 6) is None
    cron = parse_waiting("pi-jobs@a", "repeat:abc:1", [b"{not json", b"", b"", None, b"abc", b"d1"])
    assert cron is not None and cron.bound and cron.data is None and cron.dedup_id == "d1"
    assert [shown_count(None), shown_count(3), shown_count(50)] == ["-", "3", "50+"]
