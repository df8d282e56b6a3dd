"""The forge's fixed comments (upstream-jobrun.md §7.4, §9.1)."""

from __future__ import annotations

import re

from pi_dispatch.core.forgecomments import FINAL_FAILURE, TEXTS, comment_text
from pi_dispatch.core.reasons import Reason


def test_the_stops_texts() -> None:
    for reason, said in (
        (Reason.WORKER_ABORT, "the worker ended this run"),
        (Reason.OPERATOR_CANCEL, "the operator cancelled this run"),
        (Reason.RUNNER_POLICY, "ended inside the container"),
    ):
        text = comment_text(reason)
        assert text is not None and said in text and text.endswith("Not retried.") and "/" not in text
    for reason in (Reason.PROVIDER_AUTH_REFUSED, Reason.COST_CAP, Reason.COST_CAP_UNENFORCEABLE):
        assert re.fullmatch(r"Stopped: .* Not retried\.", TEXTS[reason]) and "\\" not in TEXTS[reason]


def test_placeholders_are_this_hosts_words() -> None:
    assert (
        comment_text("daily-token-cap", {"spent": 12, "cap": 10}) == "Over the daily token cap (12/10 tokens). Not run."
    )
    text = comment_text("job-image-replicas-unsupported", {"image": "pi-job:1", "declared": ""})
    assert text is not None and "(`dev.pi-dispatch.capabilities` is absent)" in text and '"pi-job:1"' in text
    declared = comment_text("job-image-commands-unsupported", {"image": "i", "declared": "replicas"})
    assert declared is not None and "declares: replicas" in declared


def test_what_gets_no_comment() -> None:
    for reason in ("sha-gone", "pi-too-large", "local-folder-not-a-repo", "completed", None, "toString"):
        assert comment_text(reason) is None
    assert FINAL_FAILURE.startswith("Failed: an error stopped this job")
