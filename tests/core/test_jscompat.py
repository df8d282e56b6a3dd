"""JavaScript value semantics the port relies on, checked against values V8 produces."""

from __future__ import annotations

import math

import pytest

from pi_dispatch.core.jscompat import MISSING, date_parse, fnv1a32, js_json, js_number, js_sorted, js_string, truthy

FNV_VECTORS = [
    ("", 2166136261),
    ("j", 4010556029),
    ("j1", 2621425060),
    ("j2", 2671757917),
    ("j3", 2654980298),
    ("j4", 2571092203),
    ("gh:acme/web:d-1", 463780771),
    ("gh-d-1", 190005969),
    ("gh-3f2a8c10-1d2e-11ef-9a7c-0242ac120002", 452187585),
    ("gh-3f2a8c10-1d2e-11ef-9a7c-0242ac120002-r2", 3643177808),
    ("gl-abc", 2946551991),
    ("fj-x", 3977495868),
    ("az-y", 1015795372),
    ("h\u00e9llo", 4058363231),
    ("\U0001f600", 3409036472),
]


@pytest.mark.parametrize(("text", "expected"), FNV_VECTORS)
def test_fnv1a_over_utf16_code_units(text: str, expected: int) -> None:
    assert fnv1a32(text) == expected


def test_sort_is_by_utf16_code_unit_not_code_point() -> None:
    # U+FF5E is above the surrogate range in code units, U+1F600 below it: JS puts the emoji first.
    assert js_sorted(["\uff5e", "\U0001f600", "a", "B"]) == ["B", "a", "\U0001f600", "\uff5e"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (MISSING, "undefined"),
        (True, "true"),
        (5, "5"),
        (5.0, "5"),
        (0.1, "0.1"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (-0.0, "0"),
        (2**60, "1152921504606847000"),
        ([1, None, "a"], "1,,a"),
        ({"a": 1}, "[object Object]"),
    ],
)
def test_string_coercion(value: object, expected: str) -> None:
    assert js_string(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0.0),
        ("", 0.0),
        (" 12 ", 12.0),
        ("\u00a012\ufeff", 12.0),
        ("0x10", 16.0),
        ("1e3", 1000.0),
        ("5.", 5.0),
        (".5", 0.5),
        ([5], 5.0),
        (True, 1.0),
        ("Infinity", math.inf),
        ("0012", 12.0),
        ("1789000000000", 1789000000000.0),
    ],
)
def test_number_coercion(value: object, expected: float) -> None:
    assert js_number(value) == expected


@pytest.mark.parametrize(
    "value",
    # digits Python's float() reads and JS's Number() does not: Arabic-Indic, full-width, superscript
    [MISSING, "abc", "1_000", "0x", "inf", "nan", "--1", [1, 2], {"a": 1}, "\u0663", "\uff11\uff12", "\u00b2"],
)
def test_number_coercion_nan(value: object) -> None:
    assert math.isnan(js_number(value))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-08-30T12:00:00.000Z", 1788091200000),
        ("2026-08-30T12:00Z", 1788091200000),
        ("2026-08-30", 1788048000000),
        ("2026-08", 1785542400000),
        ("2026", 1767225600000),
        ("+002026-08-30T12:00:00Z", 1788091200000),
        ("2026-02-31T00:00:00Z", 1772496000000),  # V8 rolls the day over into March
        ("2026-08-30T24:00:00Z", 1788134400000),
        ("2026-08-30T12:00:00.1234567Z", 1788091200123),
        ("2026-08-30t12:00:00+02:00", 1788084000000),
        ("2026-08-30T12:00:00.000+23:59", 1788004860000),
        ("2026-09-01T09:00:00.123-05:30", 1788273000123),
    ],
)
def test_date_parse_iso(text: str, expected: int) -> None:
    assert date_parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "2026-13-01",
        "2026-00-10",
        "2026-01-00",
        "2026-08-30T24:00:01Z",
        "2026-08-30T12:60:00Z",
        "2026-08-30T12:00:60Z",
        "2026-08-30T12",
        "2026-08-30T12:00:00.Z",
        "-000000-01-01T00:00:00Z",
        "2026-08-30T12:00:00.000+25:00",
        " 2026-08-30T12:00:00Z",
        "2026-08-30T12:00:00Z ",
        "+275760-09-13T00:00:00.001Z",
        "\u0662\u0660\u0662\u0666-08-30",  # Arabic-Indic digits: Python's \d reads them, JS does not
    ],
)
def test_date_parse_refuses(text: str) -> None:
    assert math.isnan(date_parse(text))


def test_json_matches_json_stringify() -> None:
    record = {"a": 1.0, "b": [1e21, None, True], "c": '\u2028\x1b"', "d": "\ud800", "e": math.nan}
    assert js_json(record) == '{"a":1,"b":[1e+21,null,true],"c":"\u2028\\u001b\\"","d":"\\ud800","e":null}'


@pytest.mark.parametrize(
    ("value", "expected"), [(0, False), ("", False), (math.nan, False), ("0", True), ([], True), ({}, True)]
)
def test_truthiness(value: object, expected: bool) -> None:
    assert truthy(value) is expected
