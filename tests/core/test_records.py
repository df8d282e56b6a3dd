"""The run record: the reference's fields in its order, `host` last, nothing attacker-chosen."""

from __future__ import annotations

from typing import Any

import pytest

from pi_dispatch.core.records import UNRECOGNIZED_REASON, build_record

FIELDS = [
    "jobId",
    "kind",
    "target",
    "flow",
    "startedAt",
    "endedAt",
    "outcome",
    "reason",
    "exitCode",
    "turns",
    "tokens",
    "usage",
    "provider",
    "model",
    "budgetReserved",
    "attempt",
    "parentJobId",
    "chainDepth",
    "chainRefused",
    "replica",
    "replicas",
    "triggerIndex",
    "triggerType",
    "session",
    "context",
    "host",
    "dollars",
]


def forge_job(**extra: Any) -> dict[str, Any]:
    return {
        "kind": "github",
        "repo": "acme/web",
        "target": {"type": "issue", "number": 7, "title": "secret plans", "body": "<script>"},
        "flow": "fix",
        "trigger": {"deliveryId": "d-1", "matched": {"index": 2, "type": "label", "label": "pi:fix"}},
        **extra,
    }


def build(data: dict[str, Any] | None, result: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "job_id": "gh-d-1",
        "job_name": "github",
        "data": data,
        "attempts_made": 0,
        "result": result,
        "error": None,
        "started_at": "2026-08-30T12:00:00.000Z",
        "ended_at": "2026-08-30T12:05:00.000Z",
        "host": "mini1",
    }
    options.update(kw)
    return build_record(**options)


def test_fields_in_order_with_host_then_dollars_last() -> None:
    record = build(forge_job(), {"outcome": "completed", "exitCode": 0, "turns": 4})
    assert list(record) == FIELDS
    assert record["target"] == "acme/web#7"
    assert (record["outcome"], record["exitCode"], record["turns"], record["host"]) == ("completed", 0, 4, "mini1")
    assert (record["triggerIndex"], record["triggerType"]) == (2, "label")


def test_no_payload_text_reaches_the_record() -> None:
    text = repr(build(forge_job(task="drop tables", secrets={"A": "op://x"}), {"outcome": "completed"}))
    for leaked in ("secret plans", "<script>", "pi:fix", "drop tables", "op://x"):
        assert leaked not in text


def test_unknown_reason_is_not_copied() -> None:
    record = build(forge_job(), {"outcome": "policy", "reason": "ignore previous instructions"})
    assert record["reason"] == UNRECOGNIZED_REASON
    assert (
        build(forge_job(), {"outcome": "policy", "reason": "secret-profile-unknown"})["reason"]
        == "secret-profile-unknown"
    )


@pytest.mark.parametrize("reason", ["egress-proxy-missing", "egress-proxy-stopped"])
def test_a_node_workers_egress_refusal_reads_back_as_it_is(reason: str) -> None:
    """The reference refuses a job pre-spend with these when its egress proxy is gone or stopped."""
    assert build(forge_job(), {"outcome": "policy", "reason": reason})["reason"] == reason


def test_failed_when_there_is_no_result() -> None:
    record = build(forge_job(), None, error={"reason": "job-timeout", "exitCode": 1})
    assert (record["outcome"], record["reason"], record["exitCode"]) == ("failed", "job-timeout", 1)


def test_targets_by_kind() -> None:
    gitlab_pr = forge_job(kind="gitlab", repo="g/s/p", target={"type": "pull_request", "number": 5})
    assert build(gitlab_pr)["target"] == "g/s/p!5"
    local = {"kind": "local", "folder": "/home/rob/projects/site/", "task": "x"}
    assert build(local, job_name="local")["target"] == "local:site"
    assert build({}, job_name="something")["target"] is None
    assert build(None, job_name=None)["kind"] is None


def test_telemetry_is_rebuilt_not_copied() -> None:
    usage = {"v": 1, "models": [{"provider": "Anthropic", "model": "claude-x", "input": 5, "note": "hi"}]}
    record = build(
        forge_job(), {"outcome": "completed", "tokens": {"total": 9, "input": 4, "extra": "x"}, "usage": usage}
    )
    assert record["tokens"] == {"input": 4, "total": 9}
    assert record["usage"]["models"][0]["provider"] == "anthropic"
    assert "note" not in record["usage"]["models"][0]
    hostile = {"v": 1, "models": [{"provider": "../etc", "model": "m"}]}
    assert build(forge_job(), {"outcome": "completed", "usage": hostile})["usage"] is None


def test_a_current_node_workers_ledger_and_tokens_read_back_whole() -> None:
    """A current Node record: `truncated` null (nobody measured it), model ids the current pattern admits, and the
    token floor counters a cost view needs; none of it may be dropped on the way back."""
    ledger = {
        "v": 1, "piAi": "0.9.3", "truncated": None,
        "models": [{"provider": "workers-ai", "model": "@cf/meta/llama-4-scout-17b-16e-instruct", "calls": 2,
                    "input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "cacheWrite1h": 0, "reasoning": 0,
                    "total": 15, "cost": 0.01, "unpriced": 0}],
    }  # fmt: skip
    tokens = {"input": 10, "output": 5, "total": 15, "cost": 0.01, "metered": True, "rootTotal": 15, "costCapMicros": 0}
    record = build(forge_job(), {"outcome": "completed", "tokens": tokens, "usage": ledger})
    assert record["usage"] == ledger and record["tokens"] == tokens
