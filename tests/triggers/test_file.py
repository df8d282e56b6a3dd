"""The triggers file, read as the reference reads it (receiver-contract §8, §15.8): one parser for the receiver,
the worker and the audit; refusals name the trigger and the field, never the value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_dispatch.core.errors import ConfigError
from pi_dispatch.receiver.rules import Rules
from pi_dispatch.triggers.file import DISARMED, collect_triggers, load_triggers, parse_triggers

LABEL = {"type": "label", "any": ["pi:fix"]}
CRON = {
    "on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
    "run": {"kind": "local", "folder": "/srv", "flow": "n", "task": "t"},
}


def parse(*entries: Any, **top: Any) -> list[Any]:
    return parse_triggers(json.dumps({"triggers": list(entries), **top}), "triggers.json")


def refusal(*entries: Any) -> str:
    with pytest.raises(ConfigError) as raised:
        parse(*entries)
    return str(raised.value)


def entry(on: dict[str, Any] | None = None, **run: Any) -> dict[str, Any]:
    """A label entry; a field given as None is left out."""
    fields = {"kind": "github", "flow": "fix"} | run
    return {"on": on or LABEL, "run": {key: value for key, value in fields.items() if value is not None}}


def test_indices_count_cron_entries_and_groups_hold_every_forge() -> None:
    comment = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "triage"}}
    pr = {"on": {"type": "pull_request", "action": ["opened"]}, "run": {"kind": "github", "flow": "review"}}
    rules = Rules.from_triggers(parse(CRON, entry(), comment, pr))
    github = rules.of("github")
    assert [github.label[0].index, github.comment.index, github.pull_request[0].index] == [1, 2, 3]
    assert rules.of("gitlab").label == () and rules.of("gitlab").comment is None
    assert set(rules.forges) == {"github", "gitlab", "forgejo", "azure"}
    assert rules.known_flows == {"fix", "triage", "review"}


def test_indices_are_raw_across_forges() -> None:
    entries = [
        entry(kind=kind) if kind != "azure" else entry(kind=kind, repository="r")
        for kind in ("github", "gitlab", "forgejo", "azure")
    ]
    rules = Rules.from_triggers(parse(*entries))
    assert [rules.of(kind).label[0].index for kind in ("github", "gitlab", "forgejo", "azure")] == [0, 1, 2, 3]


def test_execution_fields_are_kept_per_rule() -> None:
    triggers = parse(
        entry(packages=False, image="img:1"), entry({"type": "label", "any": ["x"]}, flow=None, command="deploy")
    )
    assert triggers[0].run == {"kind": "github", "flow": "fix", "packages": False, "image": "img:1"}
    assert triggers[1].run == {"kind": "github", "command": "deploy"}


def test_command_rules_add_no_known_flow() -> None:
    commands = parse(entry(flow=None, command="a"), entry({"type": "label", "any": ["y"]}, flow=None, command="b"))
    assert Rules.from_triggers(commands).known_flows == frozenset()


def test_unknown_top_level_keys_and_run_fields_are_ignored() -> None:
    triggers = parse(entry(futureField=1), version=2)
    assert "futureField" not in triggers[0].run


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{ not json", "not valid JSON"),
        ("[]", '"triggers" array'),
        ('{"triggers": {}}', '"triggers" array'),
        ('{"triggers": [], "triggers": []}', "duplicate key"),
    ],
)
def test_a_file_that_is_not_a_triggers_file(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_triggers(text, "triggers.json")
    assert said in str(raised.value)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"on": {"type": "label", "none": ["x"]}, "run": {"kind": "github", "flow": "f"}}, "on.any"),
        ({"on": {"type": "label", "label": "pi:fix"}, "run": {"kind": "github", "flow": "f"}}, "on.any"),
        (
            {"on": {"type": "cron", "id": "n", "pattern": "* * * * *"}, "run": {"kind": "github", "flow": "f"}},
            "run.kind",
        ),
        ({"on": {"type": "label", "any": ["x"]}, "run": {"kind": "local", "flow": "f"}}, "run.kind"),
        ({"on": {"type": "pull_request"}, "run": {"kind": "github", "flow": "f"}}, "on.action"),
        ({"on": {"type": "pull_request", "action": ["open"]}, "run": {"kind": "github", "flow": "f"}}, "on.action[0]"),
        (
            {"on": {"type": "pull_request", "action": ["closed", "opened"]}, "run": {"kind": "github", "flow": "f"}},
            "on.action",
        ),
        ({"on": {"type": "pull_request", "action": ["labeled"]}, "run": {"kind": "github", "flow": "f"}}, "on.any"),
        (
            {
                "on": {"type": "pull_request", "action": ["created"], "any": ["x"]},
                "run": {"kind": "azure", "flow": "f"},
            },
            "on.any",
        ),
        ({"on": {"type": "issue", "action": ["closed"]}, "run": {"kind": "azure", "flow": "f"}}, "on.type"),
        (
            {"on": {"type": "issue", "action": ["closed"], "once": True}, "run": {"kind": "github", "flow": "f"}},
            "on.once",
        ),
        (
            {
                "on": {"type": "issue", "action": ["closed"], "number": 4, "once": True},
                "run": {"kind": "github", "flow": "f", "replicas": 2},
            },
            "on.once",
        ),
        ({"on": {"type": "label", "any": ["x"], "number": 4}, "run": {"kind": "github", "flow": "f"}}, "on.number"),
        ({"on": {"type": "comment", "phrase": " "}, "run": {"kind": "github", "flow": "f"}}, "on.phrase"),
        (
            {
                "on": {"type": "pull_request", "action": ["opened"], "reviewState": ["approved"]},
                "run": {"kind": "github", "flow": "f"},
            },
            "on.reviewState",
        ),
        (entry(flow="Fix Me"), "run.flow"),
        (entry(command="deploy"), "run.command"),
        (entry(flow=None, command="/deploy"), "run.command"),
        (entry(flow=None), "run.flow"),
        (entry(secretsProfile="prod"), "run.secretsProfile"),
        (entry(secrets={"PI_JOB_ID": "x"}), "run.secrets.PI_JOB_ID"),
        (entry(secrets={"1X": "x"}), "run.secrets"),
        (entry(replicas=1), "run.replicas"),
        (entry(replicas=4), "run.replicas"),
        (entry(waitFor=[{"profile": "ci"}], replicas=2), "run.waitFor"),
        (entry(waitfor=[{"profile": "ci"}]), "run.waitfor"),
        (entry(wait_for=[{"profile": "ci"}]), "run.wait_for"),
        (entry(modelId="x"), "run.modelId"),
        (entry(max_turns=3), "run.max_turns"),
        (entry(allowedModels=["a/b"]), "run.allowedModels"),
        (
            {"on": {"type": "label", "any": ["x"], "provider": "openai"}, "run": {"kind": "github", "flow": "f"}},
            "on.provider",
        ),
        (entry(provider="open ai"), "run.provider"),
        (entry(provider="ópenai"), "run.provider"),
        (entry(model="a" * 65), "run.model"),
        (entry(maxTurns=0), "run.maxTurns"),
        (entry(models=["a/b", "A/B"]), "run.models[1]"),
        (entry(provider="a", model="b", models=["c/d"]), "run.models"),
        (entry(maxCostUsd="0"), "run.maxCostUsd"),
        (entry(maxCostUsd="1.1234567"), "run.maxCostUsd"),
        (entry(excludeTools=["bash", "bash"]), "run.excludeTools[1]"),
        (entry(tools=["read"]), "run.tools"),
        (entry(instructions="x" * 2001), "run.instructions"),
        (entry(repository="r"), "run.repository"),
        (entry(kind="azure"), "run.repository"),
        (entry(portfolio=True), "run.portfolio"),
        (entry(backend="podman"), "run.backend"),
        (entry(backends="local"), "run.backends"),
    ],
)
def test_refusals_name_the_trigger_and_the_field(bad: dict[str, Any], field: str) -> None:
    said = refusal(CRON, bad)
    assert f"trigger 1 {field}:" in said, said


def test_a_trigger_with_a_bad_selector_and_a_bad_run_field_names_both() -> None:
    said = refusal(entry({"type": "label", "any": "pi:fix"}, maxTurns=0))
    assert "trigger 0 on.any:" in said and "trigger 0 run.maxTurns:" in said, said
    cron = {"on": {"type": "cron", "id": "a:b", "pattern": "0 3 * * *"}, "run": {**CRON["run"], "folder": ""}}
    said = refusal(cron)
    assert "trigger 0 on.id:" in said and "trigger 0 run.folder:" in said, said
    cron["on"] |= {"pattern": "* *", "once": True}
    said = refusal(cron)
    assert all(f"trigger 0 {field}:" in said for field in ("on.id", "on.pattern", "on.once", "run.folder")), said
    closing = {"type": "pull_request", "action": ["closed"], "any": ["x"], "reviewState": ["approved"], "once": 1}
    said = refusal({"on": closing, "run": {"kind": "github", "flow": "a", "image": "-x"}})
    assert all(f"trigger 0 {field}:" in said for field in ("on.any", "on.reviewState", "on.once", "run.image")), said


def test_config_triggers_says_every_problem_of_a_trigger_at_once(tmp_path: Path) -> None:
    from tests.support.helpers import run_cli

    bad_run = {"maxTurns": 0, "image": "-x", "models": "all", "maxCostUsd": -1, "replicas": 1, "backend": "no such"}
    path = tmp_path / "triggers.json"
    path.write_text(json.dumps({"triggers": [entry({"type": "label", "any": "pi:fix"}, **bad_run)]}))
    checked = run_cli("config", "triggers", str(path))
    assert checked.returncode == 2, checked
    named = {line.split(":")[0] for line in checked.stderr.splitlines() if line.startswith("trigger 0 ")}
    assert named == {"trigger 0 on.any", *(f"trigger 0 run.{field}" for field in bad_run)}, checked.stderr


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


@given(
    st.sampled_from(["label", "comment", "issue", "pull_request", "cron"]),
    st.sampled_from(["github", "gitlab", "forgejo", "azure", "local"]),
    st.dictionaries(st.sampled_from(["any", "all", "none", "action", "number", "once", "phrase", "id", "pattern"]),
                    json_values, max_size=4),
    st.dictionaries(st.sampled_from(["flow", "command", "maxTurns", "folder", "task", "replicas", "secrets"]),
                    json_values, max_size=4),
)  # fmt: skip
def test_any_entry_parses_or_is_refused_by_field(
    on_type: str, kind: str, on: dict[str, Any], run: dict[str, Any]
) -> None:
    """Both halves of an entry are checked even when the other is refused: neither may raise on the other's input."""
    document = json.dumps({"triggers": [{"on": {**on, "type": on_type}, "run": {**run, "kind": kind}}]})
    triggers, problems = collect_triggers(document, "triggers.json")
    assert len(triggers) + bool(problems) == 1
    assert all(problem.subject.startswith("trigger 0 ") for problem in problems)


def test_refusals_never_carry_the_value() -> None:
    secret = "op://vault/do-not-print"
    said = refusal(entry(secrets={"TOKEN": " " + secret}), entry(secretsProfile="p:" + secret))
    assert "trigger 0" in said and "trigger 1" in said and "do-not-print" not in said


def test_one_comment_trigger_per_forge() -> None:
    comment = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "a"}}
    assert "trigger 1 on.type: at most one github comment trigger" in refusal(comment, comment)
    gitlab = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "gitlab", "flow": "a"}}
    assert len(parse(comment, gitlab)) == 2


def test_valid_files_in_the_reference_shape() -> None:
    triggers = parse(
        CRON,
        {
            "on": {"type": "pull_request", "action": ["review_submitted"], "reviewState": ["changes_requested"]},
            "run": {"kind": "github", "flow": "r"},
        },
        {
            "on": {"type": "pull_request", "action": ["label_updated"], "any": ["go"]},
            "run": {"kind": "forgejo", "flow": "g"},
        },
        {"on": {"type": "pull_request", "action": ["open", "update"]}, "run": {"kind": "gitlab", "flow": "g"}},
        {
            "on": {"type": "issue", "action": ["close"], "number": 5, "once": True},
            "run": {"kind": "gitlab", "command": "wrap"},
        },
        entry(maxCostUsd=2.5, models=["openai/gpt-5.4"], provider="openai", model="gpt-5.4", maxTurns=9.0),
        entry(instructions="é" * 2000, excludeTools=["bash", "powershell"], skillsDir="/srv/skills", backend="local"),
    )
    assert triggers[1].on["reviewState"] == ["changes_requested"]
    assert triggers[5].run["maxCostUsd"] == 2.5 and triggers[5].run["maxTurns"] == 9.0
    assert triggers[0].on == {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"}
    null_provider = {"on": LABEL, "run": {"kind": "github", "flow": "f", "provider": None}}
    assert "provider" not in parse(null_provider)[0].run  # null means the deployment default


def test_a_spent_one_shot_keeps_its_slot_and_groups_nowhere() -> None:
    armed = {
        "on": {"type": "issue", "action": ["closed"], "number": 4, "once": True},
        "run": {"kind": "github", "flow": "wrap"},
    }
    spent = {**armed, "on": {**armed["on"], "disarmed": {"at": "2026-01-01T00:00:00Z", "jobId": "gh-1"}}}
    triggers = parse(entry(), spent, entry(flow="other"))
    assert triggers[1].on_type == DISARMED and triggers[1].run == {}
    rules = Rules.from_triggers(triggers)
    assert [rule.index for rule in rules.of("github").label] == [0, 2] and rules.of("github").issue == ()
    assert "wrap" not in rules.known_flows
    armed_rules = Rules.from_triggers(parse(entry(), armed))
    assert armed_rules.of("github").issue[0].index == 1 and armed_rules.of("github").issue[0].number == 4
    assert armed_rules.of("github").issue[0].once and "wrap" in armed_rules.known_flows
    close = {
        "on": {"type": "pull_request", "action": ["closed"], "number": 7, "once": True},
        "run": {"kind": "github", "flow": "c"},
    }
    spent_close = {**close, "on": {**close["on"], "disarmed": {"at": "now"}}}
    assert Rules.from_triggers(parse(close)).of("github").pr_close
    assert not Rules.from_triggers(parse(spent_close)).of("github").pr_close
    assert "on.disarmed" in refusal({**spent, "on": {**spent["on"], "disarmed": {"at": ""}}})
    assert "on.disarmed" in refusal({**spent, "on": {**spent["on"], "once": False}})


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_triggers(tmp_path / "triggers.json", "./triggers.json")
    said = str(raised.value)
    assert "./triggers.json" in said and "pi-dispatch init" in said and "PI_TRIGGERS_FILE" in said


def test_the_shipped_example_is_in_the_reference_shape() -> None:
    example = Path(__file__).parent.parent.parent / "inventory.example" / "triggers.json"
    triggers = load_triggers(example)
    assert len(triggers) == 8 and all("label" not in trigger.on for trigger in triggers)
    assert all(trigger.on["action"] for trigger in triggers if trigger.on_type == "pull_request")
