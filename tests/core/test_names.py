"""Worker names, profile names and job-id filenames (upstream-vectors §3.1, §3.2, §7.2)."""

from __future__ import annotations

import pytest

from pi_dispatch.core.names import (
    WORKER_NAME_RE,
    is_profile_name,
    sanitize_job_id,
    sanitize_worker_name,
    worker_name_problem,
)

SANITIZED = [
    ("Robs-Mac-Mini.local", "robs-mac-mini.local"),
    ("MAC-MINI", "mac-mini"),
    ("a b/c", "a-b-c"),
    ("--weird--", "weird"),
    ("---", "worker"),
    ("", "worker"),
    (None, "worker"),
    ("a" * 90, "a" * 64),
    ("prod.json", "prod-json"),
    ("Box.LOG", "box-log"),
    ("a" * 59 + ".json", "a" * 59 + "-json"),
    ("..", "worker"),
    (".", "worker"),
    ("x" * 200, "x" * 64),
    ("9front", "9front"),
    ("_leading", "worker"),
    ("-", "worker"),
    ("éè", "worker"),
    ("😀", "worker"),
    ("a" * 60 + ".log", "a" * 60 + "-log"),
    ("b" * 63 + ".", "b" * 63),
    ("HOST.JSON", "host-json"),
    ("x.json.log", "x.json-log"),
    ("a" * 64, "a" * 64),
    ("My_Host.Example.COM", "my_host.example.com"),
    ("a..b", "a..b"),
    ("host--name", "host-name"),
    ("Kelvin\u212a", "kelvink"),
]


@pytest.mark.parametrize(("raw", "expected"), SANITIZED)
def test_sanitize_worker_name(raw: str | None, expected: str) -> None:
    name = sanitize_worker_name(raw)
    assert name == expected
    assert WORKER_NAME_RE.fullmatch(name)
    assert worker_name_problem(name) is None


@pytest.mark.parametrize("declared", ["Mac-Mini-1", "mini1", "9front", "a" * 64, "my_host.example.com"])
def test_declared_worker_name_is_taken_verbatim(declared: str) -> None:
    assert worker_name_problem(declared) is None


@pytest.mark.parametrize(
    "declared",
    ["has space", "colon:name", "slash/name", "-leading", ".leading", "x" * 65, "comma,name", "hash#name", "mini1\n"],
)
def test_declared_worker_name_refused(declared: str) -> None:
    problem = worker_name_problem(declared)
    assert problem is not None and "letter or digit" in problem


@pytest.mark.parametrize("declared", ["prod.json", "prod.LOG"])
def test_declared_worker_name_reserved_tail(declared: str) -> None:
    problem = worker_name_problem(declared)
    assert problem is not None and ".json or .log" in problem


@pytest.mark.parametrize(
    ("job_id", "expected"),
    [
        ("repeat:nightly:1700000000000", "repeat_nightly_1700000000000"),
        ("gh-abc-r2", "gh-abc-r2"),
        ("a/b c", "a_b_c"),
        ("manual:t1:99", "manual_t1_99"),
        ("container:pi-job-x", "container_pi-job-x"),
        ("é", "_"),
        ("😀", "__"),
        (None, "unknown-job"),
        ("", "unknown-job"),
        (12345, "12345"),
    ],
)
def test_sanitize_job_id(job_id: object, expected: str) -> None:
    assert sanitize_job_id(job_id) == expected


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("prod", True),
        ("a.b_c-9", True),
        ("a:b", False),
        ("a,b", False),
        ("", False),
        ("prod\n", False),
        ("é", False),
        (7, False),
    ],
)
def test_profile_name_charset(name: object, ok: bool) -> None:
    assert is_profile_name(name) is ok
