"""Each forge's words, declared once as data: `schema/forges/<kind>.json` (described by `schema/forge.schema.json`).

Every layer reads a forge's words from here: its job-id prefix and delivery header (`core/jobs.py`), its trigger
actions and what its rules may carry (`triggers/`), the variables its job token goes under, and its receiver
variables (`config/receiver_settings.py`). What the receiver does with a delivery lives in the forge's package,
`receiver/forges/<kind>/`. A fifth forge is that package, its entry here and its tests.

Pure: the entries are package data, read once at import like the rest of the module's constants.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final


@dataclass(frozen=True)
class ForgeVariable:
    """One receiver variable of a forge: its name, form (a form's name, or the words it may be), default, help."""

    name: str
    form: str | tuple[str, ...]
    default: str | None
    help: str
    fix: str | None = None
    names_the_variable_of: str | None = None  # an inventory variable written under the variable this one names
    worker: bool = False  # the worker reads it too (its jobs' tokens, clones and comments)


@dataclass(frozen=True)
class ForgeWords:
    """A forge as every layer below its receiver package knows it."""

    kind: str
    title: str
    order: int
    job_id_prefix: str
    delivery_id: str  # what names a delivery, for the refusal of one that has none
    pull_request_separator: str
    pr_actions: tuple[str, ...]
    pr_close: str | None  # the action that closes a pull request; None: its payload cannot show one
    pr_label: str | None  # the action that is a label applied
    review_verdicts: bool
    pr_label_predicates: bool
    issue_actions: tuple[str, ...] | None  # None: issue triggers are not covered for it
    repository_named_on: frozenset[str]  # trigger types that must name the repository to clone
    token_variables: tuple[str, ...]
    variables: tuple[ForgeVariable, ...]

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> ForgeWords:
        pull, issue = entry["pullRequest"], entry["issue"]
        return cls(
            kind=entry["kind"],
            title=entry["title"],
            order=entry["order"],
            job_id_prefix=entry["jobIdPrefix"],
            delivery_id=entry["deliveryId"],
            pull_request_separator=entry["pullRequestSeparator"],
            pr_actions=tuple(pull["actions"]),
            pr_close=pull["close"],
            pr_label=pull["label"],
            review_verdicts=pull["reviewVerdicts"],
            pr_label_predicates=pull["labelPredicates"],
            issue_actions=None if issue is None else tuple(issue["actions"]),
            repository_named_on=frozenset(entry["repositoryNamedOn"]),
            token_variables=tuple(entry["tokenVariables"]),
            variables=tuple(
                ForgeVariable(
                    name=raw["name"],
                    form=raw["form"] if isinstance(raw["form"], str) else tuple(raw["form"]["oneOf"]),
                    default=raw["default"],
                    help=raw["help"],
                    fix=raw.get("fix"),
                    names_the_variable_of=raw.get("namesTheVariableOf"),
                    worker=raw.get("worker", False),
                )
                for raw in entry["variables"]
            ),
        )


def entries() -> dict[str, dict[str, Any]]:
    """Each forge's entry as written, by the file's name."""
    folder = resources.files("pi_dispatch").joinpath("schema", "forges")
    return {
        path.name.removesuffix(".json"): json.loads(path.read_text(encoding="utf-8"))
        for path in folder.iterdir()
        if path.name.endswith(".json")
    }


def _read() -> dict[str, ForgeWords]:
    read = [ForgeWords.of(entry) for entry in entries().values()]
    return {words.kind: words for words in sorted(read, key=lambda words: words.order)}


FORGES: Final[Mapping[str, ForgeWords]] = _read()  # in the reference's order
