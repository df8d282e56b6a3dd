"""The bounded Valkey helpers that need no server."""

from __future__ import annotations

import pytest

from pi_dispatch.infra.valkey import fleet_id, with_password


@pytest.mark.parametrize(
    ("url", "password", "expected"),
    [
        ("redis://store:6379/0", "s3cret", "redis://:s3cret@store:6379/0"),
        ("rediss://pi@store:6380", "p@ss:w/rd", "rediss://pi:p%40ss%3Aw%2Frd@store:6380"),
        ("redis://:inurl@store:6379", "other", "redis://:inurl@store:6379"),  # the URL's own password wins
        ("redis://store:6379", None, "redis://store:6379"),
        ("redis://store:6379", "", "redis://store:6379"),
        ("unix:///run/valkey.sock", "s3cret", "unix://:s3cret@/run/valkey.sock"),  # a socket authenticates too
    ],
)
def test_with_password(url: str, password: str | None, expected: str) -> None:
    assert with_password(url, password) == expected


def test_fleet_id_names_the_store_and_never_the_password() -> None:
    plain = fleet_id("redis://store:6379/0")
    assert fleet_id("redis://:s3cret@store:6379/0") == plain
    assert fleet_id("redis://store:6379/1") != plain and len(plain) == 12
