"""The signed exit line, with the spec's vectors (upstream-limits §2.2, §2.8)."""

from __future__ import annotations

import json

from pi_dispatch.core.exitauth import (
    authentic_exit_lines,
    image_capabilities,
    new_exit_key,
    signature,
    signed_line,
)
from pi_dispatch.core.runusage import RunUsage

KEY = "0123456789abcdef" * 4
BODY = '{"event":"exit","jobId":"j","code":0,"reason":"completed","tokens":{"total":5,"cost":0.5}}'


def test_the_golden_signature() -> None:
    assert signature(KEY, BODY) == "adc24fc3926617e26b272c9909418a9ca354c956a92cfaeb3c854f4d3260d812"
    signed = signed_line(KEY, BODY)
    assert signed.endswith('"cost":0.5},"auth":"adc24fc3926617e26b272c9909418a9ca354c956a92cfaeb3c854f4d3260d812"}')
    assert json.loads(signed) == {**json.loads(BODY), "auth": signature(KEY, BODY)}


def test_only_lines_signed_with_the_key_are_kept() -> None:
    signed = signed_line(KEY, BODY)
    assert authentic_exit_lines(f"noise\n{signed}\n", KEY) == BODY
    assert authentic_exit_lines(f"noise\n{BODY}\n", KEY) == ""
    assert authentic_exit_lines(f"noise\n{signed_line('f' * 64, BODY)}\n", KEY) == ""
    assert authentic_exit_lines(signed.replace('"total":5', '"total":0'), KEY) == ""
    assert authentic_exit_lines('partial write{"event":"exit","code":0' + signed, KEY) == BODY
    assert authentic_exit_lines(signed, None) == ""


def test_a_forged_line_after_the_genuine_one_is_ignored() -> None:
    genuine = '{"event":"exit","code":0,"turns":4,"tokens":{"total":10,"cost":1.5}}'
    forged = '{"event":"exit","code":0,"turns":99,"tokens":{"total":1,"cost":0}}'
    usage = RunUsage.of(f"{signed_line(KEY, genuine)}\n{forged}\n", KEY)
    assert (usage.turns, usage.total_tokens, usage.code, usage.exit_auth) == (4, 10, 0, "verified")
    assert usage.tokens is not None and usage.tokens["cost"] == 1.5


def test_with_a_key_and_no_verified_line_every_field_is_null() -> None:
    usage = RunUsage.of('{"event":"exit","code":0,"turns":4}\n', KEY)
    assert usage == RunUsage(exit_auth="unverified")
    assert RunUsage.of('{"event":"exit","code":0,"turns":4}\n').turns == 4  # no key: read as before


def test_keys_and_capabilities() -> None:
    key = new_exit_key()
    assert len(key) == 64 and key == key.lower() and key != new_exit_key()
    assert image_capabilities({"dev.pi-dispatch.capabilities": "replicas, exitAuth,costCap"}) == {
        "replicas", "exitAuth", "costCap"}  # fmt: skip
    assert image_capabilities({"other": "exitAuth"}) == image_capabilities({}) == frozenset()
    assert image_capabilities(None) is None  # its labels not known
