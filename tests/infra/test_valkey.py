"""The bounded Valkey helpers that need no server."""

from __future__ import annotations

import pytest

from pi_dispatch.infra.valkey import fleet_id, reply_text, reply_whole, with_password


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


@pytest.mark.parametrize(
    ("value", "text", "whole"),
    [
        (b"1789000000000", "1789000000000", 1789000000000),
        ("42", "42", 42),
        (None, "", None),
        (b"\xff7", "\ufffd7", None),  # not UTF-8: replaced, never raised
        ("\u0663", "\u0663", None),  # a digit a JS peer does not read as one
        (b"-1", "-1", None),
        (b"", "", None),
    ],
)
def test_a_reply_reads_as_text_and_as_a_whole_number_only_in_ascii_digits(
    value: object, text: str, whole: int | None
) -> None:
    assert reply_text(value) == text
    assert reply_whole(value) == whole
