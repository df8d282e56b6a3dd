"""Each forge's entry (`schema/forges/<kind>.json`): valid against its schema, the one source of every lower layer's
words for it, in step with the published triggers schema and the receiver's packages; and a fifth forge added as
its package and its entry alone is known to every layer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from pi_dispatch.config.schemas import load_schema
from pi_dispatch.core.forges import FORGES, entries

REPO = Path(__file__).resolve().parents[2]


def test_every_entry_is_valid_and_named_by_its_kind_with_its_own_prefix_and_place() -> None:
    validator = Draft202012Validator(load_schema("forge"))
    found = entries()
    assert sorted(found) == sorted(FORGES) and len(found) >= 4
    for name, entry in found.items():
        assert [error.message for error in validator.iter_errors(entry)] == [], name
        assert entry["kind"] == name
    assert len({words.job_id_prefix for words in FORGES.values()}) == len(FORGES)
    assert [words.order for words in FORGES.values()] == sorted({words.order for words in FORGES.values()})
    assert list(FORGES) == ["github", "gitlab", "forgejo", "azure"]  # the reference's order


def test_the_receiver_serves_exactly_the_forges_with_entries_in_their_order() -> None:
    from pi_dispatch.receiver.forges import registered

    assert [forge.name for forge in registered()] == list(FORGES)


def _pull_request(kind: str, action: str) -> dict[str, Any]:
    return {"triggers": [{"on": {"type": "pull_request", "action": [action]}, "run": {"kind": kind, "flow": "x"}}]}


def _issue(kind: str, action: str) -> dict[str, Any]:
    return {"triggers": [{"on": {"type": "issue", "action": [action]}, "run": {"kind": kind, "flow": "x"}}]}


def test_the_published_triggers_schema_takes_each_forges_words_and_no_others() -> None:
    """triggers.schema.json is written by hand for people to read: it must say what the entries say."""
    schema = Draft202012Validator(load_schema("triggers"))
    every_word = {action for words in FORGES.values() for action in (*words.pr_actions, *(words.issue_actions or ()))}
    for kind, words in FORGES.items():
        for action in every_word:
            assert schema.is_valid(_pull_request(kind, action)) == (action in words.pr_actions), (kind, action)
            taken = words.issue_actions is not None and action in words.issue_actions
            assert schema.is_valid(_issue(kind, action)) == taken, (kind, action)
    assert not schema.is_valid(_pull_request("sketch", "opened"))


SKETCH_ENTRY: dict[str, Any] = {
    "kind": "sketch",
    "title": "Sketch",
    "order": 5,
    "jobIdPrefix": "sk-",
    "deliveryId": "X-Sketch-Delivery",
    "pullRequestSeparator": "!",
    "pullRequest": {
        "actions": ["proposed", "closed"],
        "close": "closed",
        "label": None,
        "reviewVerdicts": False,
        "labelPredicates": True,
    },
    "issue": {"actions": ["closed"]},
    "repositoryNamedOn": [],
    "tokenVariables": ["SKETCH_TOKEN"],
    "variables": [
        {"name": "SKETCH_WEBHOOK_SECRET", "form": "secret", "default": None, "help": "Sketch's webhook secret."},
        {"name": "SKETCH_MODE", "form": {"oneOf": ["plain", "fancy"]}, "default": None, "help": "How it signs."},
    ],
}
# The sketch's receiver package: Forgejo's dialect under its own name, armed by its own variable.
SKETCH_PACKAGE = """
from pi_dispatch.receiver.forges.forgejo import SPEC as FORGEJO
from pi_dispatch.forgeapi.common import forge_setting
from pi_dispatch.receiver.forges.spec import Arming, Forge
import dataclasses

def arm(arming: Arming) -> object:
    return forge_setting(arming.settings, "SKETCH_WEBHOOK_SECRET")

SPEC = dataclasses.replace(FORGEJO, name="sketch", path="/sketch", arm=arm)
"""
# What every layer below the receiver's package says of it, read in a fresh interpreter from the copy.
SKETCH_PROBE = """
import json, sys
from pathlib import Path
from pydantic import ValidationError
from pi_dispatch.core.jobs import FORGE_KINDS, forge_delivery_job_id, target_separator, semantic_dedup_id
from pi_dispatch.config.published import generated
from pi_dispatch.config.receiver_settings import RECEIVER_MODEL
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.receiver.endpoints import build_config
from pi_dispatch.receiver.forges import registered
from pi_dispatch.triggers.file import check_triggers
from pi_dispatch.core.jobenv import reserved_secret_name

folder = Path(sys.argv[1])
pr = {"on": {"type": "pull_request", "action": ["proposed"]}, "run": {"kind": "sketch", "flow": "fix"}}
foreign = {"on": {"type": "pull_request", "action": ["opened"]}, "run": {"kind": "sketch", "flow": "fix"}}
(folder / "triggers.json").write_text(json.dumps({"triggers": [pr]}))
env = {"PI_TRIGGERS_FILE": str(folder / "triggers.json"), "SKETCH_WEBHOOK_SECRET": "s3cret", "SKETCH_MODE": "fancy"}
settings = RECEIVER_MODEL(**env)
try:
    RECEIVER_MODEL(SKETCH_MODE="loud")
    refused_mode = False
except ValidationError:
    refused_mode = True
job = {"repo": "o/r", "target": {"type": "pull_request", "number": 7}, "flow": "fix"}
print(json.dumps({
    "kind": "sketch" in FORGE_KINDS,
    "job_id": forge_delivery_job_id("sketch", "d1"),
    "dedup": semantic_dedup_id("sketch", job),
    "triggers": [p.subject for p in check_triggers({"triggers": [pr]})],
    "foreign": [p.subject for p in check_triggers({"triggers": [foreign]})],
    "reserved": reserved_secret_name("SKETCH_TOKEN"),
    "schema": sorted(v for v in json.loads(generated("receiver-env"))["properties"] if v.startswith("SKETCH")),
    "refused_mode": refused_mode,
    "registered": [forge.name for forge in registered()],
    "served": build_config(settings, env, "the environment").served,
}))
"""


def test_a_fifth_forge_is_its_package_and_its_entry_and_every_layer_knows_it(tmp_path: Path) -> None:
    """The closing note's sketch, run: a copy of the package gains `schema/forges/sketch.json` and
    `receiver/forges/sketch/`, nothing else, and its job ids, dedup ids, triggers, reserved token variable, receiver
    variables (schema and settings) and its serving all follow."""
    copy = tmp_path / "tree"
    shutil.copytree(Path(str(resources.files("pi_dispatch"))), copy / "pi_dispatch", ignore=_no_caches)
    (copy / "pi_dispatch" / "schema" / "forges" / "sketch.json").write_text(json.dumps(SKETCH_ENTRY))
    package = copy / "pi_dispatch" / "receiver" / "forges" / "sketch"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(SKETCH_PACKAGE))
    probe = subprocess.run(
        [sys.executable, "-c", SKETCH_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=copy,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["kind"] and seen["job_id"] == "sk-d1" and seen["dedup"] == "o/r!7:fix"
    assert seen["triggers"] == [] and seen["foreign"] == ["trigger 0 on.action[0]"]
    assert seen["reserved"] and seen["refused_mode"]
    assert seen["schema"] == ["SKETCH_MODE", "SKETCH_WEBHOOK_SECRET"]
    assert seen["registered"] == [*FORGES, "sketch"] and "sketch" in seen["served"]


def _no_caches(_folder: str, names: list[str]) -> list[str]:
    return [name for name in names if name == "__pycache__"]
