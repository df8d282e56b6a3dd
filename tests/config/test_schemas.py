"""Each schema and its Python model agree on every example of its corpus (tests/data/<schema>.examples.json)."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from pi_dispatch.config.console_settings import ConsoleSettings
from pi_dispatch.config.declaration import check_env
from pi_dispatch.config.hostvars import check_host_vars
from pi_dispatch.config.receiver_settings import RECEIVER_MODEL
from pi_dispatch.config.schemas import SCHEMA_NAMES, load_schema, problems
from pi_dispatch.config.worker_variables import check_worker_env, variables
from pi_dispatch.core.records import check_run_record
from pi_dispatch.fleet.registry import check_registry_row
from pi_dispatch.triggers.file import check_triggers

DATA = Path(__file__).parent.parent / "data"
MODELS: dict[str, Callable[[Any], list[Any]]] = {
    "worker-env": lambda env: check_worker_env({name: env[name] for name in variables() if name in env}),
    "host-vars": check_host_vars,
    "receiver-env": lambda env: check_env(
        RECEIVER_MODEL, {k: v for k, v in env.items() if k in load_schema("receiver-env")["properties"]}
    ),
    "console-env": lambda env: check_env(
        ConsoleSettings, {k: v for k, v in env.items() if k in load_schema("console-env")["properties"]}
    ),
    "triggers": check_triggers,
    "registry-row": check_registry_row,
    "run-record": check_run_record,
}


def corpus() -> list[tuple[str, bool, int, Any]]:
    cases = []
    for name in SCHEMA_NAMES:
        examples = json.loads((DATA / f"{name}.examples.json").read_text())
        for expected, key in ((True, "valid"), (False, "invalid")):
            cases += [(name, expected, index, example) for index, example in enumerate(examples[key])]
    return cases


@pytest.mark.parametrize(("schema", "expected", "index", "example"), corpus(), ids=lambda v: str(v)[:40])
def test_schema_and_model_agree(schema: str, expected: bool, index: int, example: Any) -> None:
    schema_verdict = problems(schema, example)
    model_verdict = MODELS[schema](example)
    assert (not schema_verdict) is expected, f"schema on {schema} example {index}: {schema_verdict}"
    assert (not model_verdict) is expected, f"model on {schema} example {index}: {model_verdict}"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schemas_are_valid_2020_12_and_shipped_in_the_package(name: str) -> None:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert resources.files("pi_dispatch").joinpath("schema", f"{name}.schema.json").is_file()
    assert (Path(__file__).parent.parent.parent / "schemas" / f"{name}.schema.json").is_file()


def test_every_worker_variable_has_a_fix_and_a_description() -> None:
    for variable, spec in load_schema("worker-env")["properties"].items():
        assert spec.get("description") and spec.get("x-fix"), variable


def test_secret_values_never_appear_in_problems() -> None:
    found = problems("worker-env", {"VALKEY_PASSWORD": "hunter2\nsecond line"})
    assert found and all("hunter2" not in str(problem) for problem in found)
