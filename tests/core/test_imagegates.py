"""An image's labels and the jobs they refuse (upstream-jobrun.md §6.4, §9.10)."""

from __future__ import annotations

from pi_dispatch.core.imagegates import ImageRefusal, image_refusal, label_list
from pi_dispatch.core.reasons import Reason

FORGES = "dev.pi-dispatch.forges"
CAPABILITIES = "dev.pi-dispatch.capabilities"


def test_list_labels() -> None:
    assert label_list({CAPABILITIES: " replicas , something-else "}, CAPABILITIES) == ("replicas", "something-else")
    assert label_list({CAPABILITIES: " , ,"}, CAPABILITIES) is None
    assert label_list({CAPABILITIES: "<no value>"}, CAPABILITIES) is None
    assert label_list(None, CAPABILITIES) is None


def test_the_forges_label_excludes_and_never_a_local_job() -> None:
    labels = {FORGES: "github,gitlab,forgejo"}
    assert image_refusal(labels, {"kind": "azure"}) == ImageRefusal(
        Reason.JOB_IMAGE_FORGE_UNSUPPORTED, ("github", "gitlab", "forgejo")
    )
    assert image_refusal(labels, {"kind": "gitlab"}) is None
    assert image_refusal(labels, {"kind": "local"}) is None
    assert image_refusal({FORGES: " , ,"}, {"kind": "azure"}) is None


def test_capabilities_gate_what_a_job_needs_first_match_wins() -> None:
    assert image_refusal({}, {"kind": "github", "replica": 1}) == ImageRefusal(Reason.JOB_IMAGE_REPLICAS_UNSUPPORTED)
    assert image_refusal({CAPABILITIES: "replicas"}, {"kind": "github", "replica": 1}) is None
    job = {"kind": "github", "command": "review", "excludeTools": ["bash"]}
    refused = image_refusal({CAPABILITIES: "replicas"}, job)
    assert refused == ImageRefusal(Reason.JOB_IMAGE_COMMANDS_UNSUPPORTED, ("replicas",))
    assert image_refusal({CAPABILITIES: "commands"}, job) == ImageRefusal(
        Reason.JOB_IMAGE_EXCLUDE_TOOLS_UNSUPPORTED, ("commands",)
    )
    models = {"kind": "github", "models": ["anthropic/claude-x"]}
    assert image_refusal({}, models) == ImageRefusal(Reason.JOB_IMAGE_MODEL_POLICY_UNSUPPORTED)
    assert image_refusal({CAPABILITIES: "modelPolicy"}, models) is None
