"""fpCron, cronCount and the schedulers' job template: the reference's vectors, and node computing the same files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pi_dispatch.triggers.file import parse_triggers
from pi_dispatch.triggers.schedules import (
    LOCAL_JOB_OPTIONS,
    authored_cron,
    canonical_json,
    cron_fingerprint,
    fingerprint,
    schedules_of,
    zones_disagree,
)

NIGHTLY = {
    "on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
    "run": {"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up", "maxTurns": 3, "image": "a:1"},
}
LABEL = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}


def fp(entries: list[Any], tz: str = "UTC") -> str:
    return cron_fingerprint(authored_cron(parse_triggers(json.dumps({"triggers": entries}), "t")), tz)


def changed(field: str, value: object) -> dict[str, Any]:
    return {"on": NIGHTLY["on"], "run": {**NIGHTLY["run"], field: value}}


# upstream-vectors §4, "Cron fingerprint (same file)"
def test_the_same_file_gives_the_same_fingerprint() -> None:
    assert fp([NIGHTLY]) == fp([json.loads(json.dumps(NIGHTLY))])
    assert len(fp([NIGHTLY])) == 16


@pytest.mark.parametrize(
    ("field", "value"),
    [("folder", "/srv/other"), ("flow", "lint"), ("task", "other"), ("image", "b:2"), ("maxTurns", 4)],
)
def test_each_run_field_changes_the_fingerprint(field: str, value: object) -> None:
    assert fp([changed(field, value)]) != fp([NIGHTLY])


def test_the_zone_changes_the_fingerprint() -> None:
    assert fp([NIGHTLY], "UTC") != fp([NIGHTLY], "Europe/Amsterdam")


def test_disabled_abstains_and_an_empty_list_is_an_opinion() -> None:
    assert cron_fingerprint(None, "UTC") == ""
    assert fp([]) != ""


def test_a_webhook_trigger_does_not_change_it() -> None:
    assert fp([NIGHTLY, LABEL]) == fp([NIGHTLY])


def test_a_float_that_is_a_whole_number_hashes_as_the_integer() -> None:
    assert fp([changed("maxTurns", 3.0)]) == fp([NIGHTLY])


def test_canonical_json_sorts_keys_at_every_depth_by_utf16() -> None:
    assert canonical_json({"b": 1, "a": [{"y": None, "x": 2.5}], "\ue000": 0, "\U0001f600": 1}) == (
        '{"a":[{"x":2.5,"y":null}],"b":1,"\U0001f600":1,"\ue000":0}'
    )
    assert fingerprint({"a": 1}) == fingerprint({"a": 1.0})


def test_the_job_template_is_the_local_job_of_the_contract() -> None:
    (schedule,) = schedules_of(parse_triggers(json.dumps({"triggers": [LABEL, changed("maxTurns", 3.0)]}), "t"))
    assert schedule.scheduler_id == "nightly"
    assert schedule.pattern == "0 3 * * *"
    assert list(schedule.data) == ["kind", "folder", "flow", "task", "maxTurns", "image", "trigger"]
    assert schedule.data["kind"] == "local"
    assert schedule.data["maxTurns"] == 3
    assert isinstance(schedule.data["maxTurns"], int)
    assert schedule.data["trigger"] == {"id": "nightly", "pattern": "0 3 * * *"}
    assert LOCAL_JOB_OPTIONS["attempts"] == 2
    assert LOCAL_JOB_OPTIONS["removeOnComplete"] == {"age": 86400}
    assert LOCAL_JOB_OPTIONS["removeOnFail"] == {"age": 604800}


def test_zones_disagree_only_on_two_named_zones() -> None:
    assert zones_disagree("UTC", ["UTC", "", None]) == []
    assert zones_disagree("UTC", ["Europe/Amsterdam", "UTC"]) == ["Europe/Amsterdam", "UTC"]
    assert zones_disagree("", ["Asia/Tokyo"]) == []


# The reference's algorithm, run by node on the file's own text: JSON.parse reads the numbers, the cron entries'
# runs are projected to the reference parser's shape (absent fields present as undefined), keys are sorted, and
# JSON.stringify writes each scalar. Written from the contract (§3.3), not copied.
NODE_FINGERPRINT = r"""
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
const cases = JSON.parse(readFileSync(0, "utf8"));
const canon = (v) => {
  if (v === null || v === undefined || typeof v !== "object") return JSON.stringify(v ?? null);
  if (Array.isArray(v)) return "[" + v.map(canon).join(",") + "]";
  return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canon(v[k])).join(",") + "}";
};
const optional = ["command", "skillsDir", "secrets", "secretsProfile"];
const runOf = (r) => {
  const run = { kind: "local", folder: r.folder, flow: r.flow, task: r.task, provider: r.provider, model: r.model,
    maxTurns: r.maxTurns, github: r.github, packages: r.packages, image: r.image, resume: r.resume };
  for (const key of optional) if (r[key] !== undefined) run[key] = r[key];
  return run;
};
const out = cases.map(([text, tz]) => {
  const schedules = JSON.parse(text).triggers.filter((t) => t.on.type === "cron")
    .map((t) => ({ schedulerId: t.on.id, pattern: t.on.pattern, run: runOf(t.run) }));
  return createHash("sha256").update(canon({ tz, schedules })).digest("hex").slice(0, 16);
});
process.stdout.write(JSON.stringify(out));
"""

NODE_FILES = [
    ('{"triggers": []}', "UTC"),
    (json.dumps({"triggers": [NIGHTLY, LABEL]}), "UTC"),
    (json.dumps({"triggers": [NIGHTLY]}), "Europe/Amsterdam"),
    (
        '{"triggers": [{"on": {"type": "cron", "id": "f", "pattern": "*/5 * * * *"}, "run": {"kind": "local", '
        '"folder": "/a", "flow": "x", "task": "t", "maxTurns": 3.0, "provider": null, "github": false}}]}',
        "UTC",
    ),
    (
        '{"triggers": [{"on": {"type": "cron", "id": "g.1_x-", "pattern": "0 0 1 1 *"}, "run": {"kind": "local", '
        '"folder": "/b\\u00e9", "command": "echo \\"hi\\" \\u2028 \\ud83d\\ude00", "packages": true, "resume": false, '
        '"secretsProfile": "prod", "secrets": {"b": "r1", "B": "r\\u00e9", "_a": "r3", "a_": "r4"}, '
        '"skillsDir": "/s", "maxTurns": 10.0}}, ' + json.dumps(LABEL) + "]}",
        "Asia/Kathmandu",
    ),
]


@pytest.mark.node
def test_fp_cron_equals_the_reference_algorithm_under_node(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed, so the reference's algorithm cannot be run (apt-get install nodejs)")
    script = tmp_path / "fingerprint.mjs"
    script.write_text(NODE_FINGERPRINT, encoding="utf-8")
    answer = subprocess.run(
        [node, str(script)], input=json.dumps(NODE_FILES), capture_output=True, text=True, check=True, timeout=60
    )
    expected = json.loads(answer.stdout)
    ours = [cron_fingerprint(authored_cron(parse_triggers(text, "t")), tz) for text, tz in NODE_FILES]
    assert ours == expected
    assert len(set(ours)) == len(ours)  # five files, five fingerprints: the vector can tell them apart
