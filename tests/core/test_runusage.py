"""The runner's exit line read as the reference reads it: its own test vectors (../shared/spec/upstream-limits.md
§2.8), each field rebuilt and validated, nothing else of the line kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pi_dispatch.core.runusage import TAIL_CHARS, RunUsage, read_context, read_tokens, read_usage


@pytest.mark.parametrize(
    ("tail", "turns"),
    [
        ('{"event":"exit","code":0,"turns":7}\n', 7),
        ('{"event":"pi_auto_retry"}\n{"event":"pi_auto_retry"}\n{"event":"exit","code":0,"turns":12}', 12),
        ('{"event":"exit","code":2,"reason":"config"}', None),
        ('garbage not json\n{"event":"exit","turns":3}', 3),
        ('{"event":"exi', None),
        ('{"event":"exit","turns":2}\n{"event":"exit","turns":9}', 9),
        ('stray{"event":"exit","turns":5}', 5),
        ('{"event":"exit","turns":99{"event":"exit","turns":4}', 4),
        ('{"event":"exit","turns":99}{"event":"exit","turns":6}', 6),
        ('stray{"event":"exit","turns":99}{"event":"exit","turns":6}', 6),
        ('stray{"event":"exit","turns":7', None),
        ('{"event":"exit","turns":7.0}', 7),
        ('{"event":"exit","turns":"7"}', None),
    ],
)
def test_the_last_exit_line_is_found_and_a_glued_one_repaired(tail: str, turns: int | None) -> None:
    assert RunUsage.of(tail).turns == turns


def test_a_field_is_read_from_the_last_exit_line_only_and_a_fragment_never_counts() -> None:
    first = RunUsage.of('{"event":"exit","turns":8,"tokens":{"total":50}}\nokens":{"total":123}}')
    assert (first.turns, first.tokens) == (8, {"total": 50})
    last = RunUsage.of('urns":8,"tokens":{"total":123}}\n{"event":"exit","turns":9,"tokens":{"total":50}}')
    assert (last.turns, last.tokens) == (9, {"total": 50})
    assert RunUsage.of('{"event":"exit","turns":2,"tokens":{"total":5}}\n{"event":"exit"}').tokens is None


def test_an_exit_line_older_than_the_tail_is_lost() -> None:
    line = '{"event":"exit","turns":3}\n'
    assert RunUsage.of(line + "x" * (TAIL_CHARS - len(line) + 1)).turns is None
    assert RunUsage.of(line + "x" * (TAIL_CHARS - len(line) - 1)).turns == 3


@pytest.mark.parametrize(
    ("tokens", "kept"),
    [
        (42, None),
        ([1, 2], None),
        ({"input": 10}, None),
        ({"total": 5, "input": 2, "leaked": "secret", "nested": {"a": 1}}, {"input": 2, "total": 5}),
        ({"total": 5, "cost": "free"}, {"total": 5}),
        (
            {"metered": False, "total": 9, "cost": 0.25, "costCapMicros": 100},
            {"total": 9, "cost": 0.25, "metered": False, "costCapMicros": 100},
        ),
    ],
)
def test_tokens_are_rebuilt_through_the_known_keys_in_their_order(tokens: Any, kept: Any) -> None:
    read = read_tokens(tokens)
    assert read == kept and (
        read is None
        or list(read) == [key for key in ("input", "total", "cost", "metered", "costCapMicros") if key in read]
    )


def row(**fields: Any) -> dict[str, Any]:
    return {"provider": "a", "model": "m", **fields}


def test_the_usage_ledger_keeps_twelve_keys_per_row_and_nulls_on_any_violation() -> None:
    smuggled = read_usage({"v": 1, "models": [row(provider="Anthropic", smuggled="SECRET_EXTRA")]})
    assert smuggled is not None and smuggled["models"][0]["provider"] == "anthropic"
    assert "smuggled" not in smuggled["models"][0] and len(smuggled["models"][0]) == 12
    assert read_usage({"v": 1, "models": [row()]}) == {
        "v": 1, "piAi": None, "truncated": None,
        "models": [row(calls=0, input=0, output=0, cacheRead=0, cacheWrite=0, cacheWrite1h=0, reasoning=0, total=0,
                       cost=0, unpriced=0)],
    }  # fmt: skip
    for bad in (
        {"v": 0, "models": [row()]}, {"v": 1.5, "models": [row()]}, {"v": 1, "piAi": "evil-string", "models": [row()]},
        {"v": 1, "truncated": -1, "models": [row()]}, {"v": 1, "models": []}, {"v": 1, "models": [42]},
        {"v": 1, "models": [row()] * 10}, {"v": 1, "models": [row(provider="p" * 65)]},
        {"v": 1, "models": [row(provider="bad provider!")]}, {"v": 1, "models": [row(provider="../etc")]},
        {"v": 1, "models": [row(total=1e999)]}, {"v": 1, "models": [row(input=-1)]},
        {"v": 1, "models": [row(cost=None)]},
    ):  # fmt: skip
        assert read_usage(bad) is None, bad
    for model in (
        "@cf/meta/llama-4-scout-17b-16e-instruct",
        "~anthropic/claude-sonnet-latest",
        "qwen2.5:0.5b-instruct-q4_K_M",
    ):
        assert read_usage({"v": 1, "models": [row(model=model)]}) is not None, model
    assert read_usage({"v": 1, "models": [row(provider="p" * 64)]}) is not None


def test_context_and_code_and_a_policy_reason_are_read_as_the_reference_reads_them() -> None:
    assert read_context({"tokens": 0, "window": 200000}) == {"tokens": 0, "window": 200000}
    assert read_context({"tokens": 2**53 - 1, "window": 2**53 - 1}) is not None
    for bad in ({"tokens": 100}, {"tokens": 1, "window": 0}, {"tokens": -1, "window": 9}, {"tokens": 1.5, "window": 9},
                {"tokens": "1", "window": 9}, {"tokens": 1e21, "window": 9}):  # fmt: skip
        assert read_context(bad) is None, bad
    assert RunUsage.of('{"event":"exit","code":"0"}').code is None
    assert RunUsage.of('{"event":"exit","code":1.5}').code is None
    assert RunUsage.of('{"event":"exit","code":0}\n{"event":"exit","code":1}').code == 1
    said = '{"event":"exit","jobId":"gh-1","code":%s,"reason":"provider-auth-refused"}'
    assert RunUsage.of(said % "2").reason == "provider-auth-refused"
    for code in ("1", "0", '"2"', "2.5", "null"):
        assert RunUsage.of(said % code).reason is None, code
    assert RunUsage.of('{"event":"exit","code":2,"reason":"turn_budget"}').reason is None


def test_a_session_keeps_only_a_reason_of_the_closed_set() -> None:
    line = {"event": "exit", "session": {"resumed": True, "reason": "expired", "extra": "x"}}
    assert RunUsage.of(json.dumps(line)).session == {"resumed": True, "reason": "expired"}
    line["session"] = {"resumed": False, "reason": "whatever the job said"}
    assert RunUsage.of(json.dumps(line)).session == {"resumed": False, "reason": None}
    assert RunUsage.of('{"event":"exit","session":{"resumed":"yes"}}').session is None
