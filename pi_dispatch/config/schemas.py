"""The packaged JSON Schemas (draft 2020-12): load them, validate against them, explain every error.

The schemas are the contract the worker, the Ansible role and the audit share. Errors come back as
`Problem`s naming the variable or path, what is wrong and how to fix it (from each property's
`x-fix`), never the rejected value of a `writeOnly` (secret) property.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from pi_dispatch.core.errors import Problem
from pi_dispatch.core.profiles import parse_profiles

SCHEMA_NAMES: Final = (
    "worker-env",
    "host-vars",
    "receiver-env",
    "console-env",
    "triggers",
    "registry-row",
    "run-record",
)

format_checker = FormatChecker()


@format_checker.checks("pi-profile-table", raises=ValueError)
def _profile_table(value: object) -> bool:
    """The part of the profile grammar a pattern cannot say: each name once, at most MAX_PROFILES."""
    if not isinstance(value, str):
        return True
    parsed = parse_profiles(value, "secret")
    if parsed.problems:
        raise ValueError(parsed.problems[0].message)
    return True


@cache
def load_schema(name: str) -> dict[str, Any]:
    """One packaged schema by name, e.g. `worker-env`."""
    text = resources.files("pi_dispatch").joinpath("schema", f"{name}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def validator(name: str) -> Draft202012Validator:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=format_checker)


def _unknown_name(error: ValidationError) -> bool:
    return "propertyNames" in error.schema_path


def _property_schema(schema: Mapping[str, Any], path: list[str | int]) -> Mapping[str, Any]:
    """The schema of the top-level property an error sits under, for its `x-fix` and `writeOnly`."""
    if not path:
        return {}
    properties = schema.get("properties", {})
    found = properties.get(path[0]) if isinstance(path[0], str) else None
    return found if isinstance(found, Mapping) else {}


def _message(error: ValidationError, schema: Mapping[str, Any], secret: bool) -> str:
    if _unknown_name(error) and error.absolute_path:
        return f"the name {error.instance!r} is not valid"
    if _unknown_name(error):
        close = difflib.get_close_matches(str(error.instance), list(schema.get("properties", {})), n=1)
        return "is not a variable pi-dispatch knows" + (f"; did you mean {close[0]}?" if close else "")
    if secret:
        return f"is not valid ({error.validator})"
    if error.validator == "format":
        return f"{error.instance!r}: {error.cause or error.message}"
    if error.validator in ("pattern", "anyOf", "enum", "not", "const"):
        return f"{error.instance!r} is not valid"
    return str(error.message)


def problems(name: str, instance: object, source: str = "") -> list[Problem]:
    """Every way instance breaks the named schema, one Problem each, in path order."""
    schema = load_schema(name)
    found = []
    for error in sorted(validator(name).iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        path = list(error.absolute_path)
        property_schema = _property_schema(schema, path)
        secret = bool(property_schema.get("writeOnly"))
        subject = "/".join(map(str, path)) or "(top level)"
        fix = str(property_schema.get("x-fix", ""))
        if _unknown_name(error) and not path:
            subject, fix = str(error.instance), f"remove it, or spell it as a name the {name} schema lists"
        found.append(Problem(subject, _message(error, schema, secret), source, fix))
    return found


def explained(schema_problems: list[Problem], own_problems: list[Problem]) -> list[Problem]:
    """The schema's verdict, each subject worded by a model's own check where it has a more specific message."""

    def variable(problem: Problem) -> str:
        return problem.subject.split(" ", 1)[0]

    specific: dict[str, list[Problem]] = {}
    for problem in own_problems:
        specific.setdefault(variable(problem), []).append(problem)
    merged: list[Problem] = []
    for name in dict.fromkeys(map(variable, schema_problems)):
        if name in specific:
            merged += specific.pop(name)
        else:
            merged += [problem for problem in schema_problems if variable(problem) == name]
    return merged + [problem for rest in specific.values() for problem in rest]
