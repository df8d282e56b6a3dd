"""The receiver's view of a triggers file: each forge's rules, grouped by the route that reads them. Pure.

Every forge gets a group even when no trigger names it. A `pull_request` rule whose actions hold the forge's
close word is a close rule (`pr_close`); `on.type: issue` rules are issue-close rules. Cron and spent entries
group nowhere but keep their index. `known_flows` is every webhook flow in the file, whatever its forge: the
words a comment may name to pick a flow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pi_dispatch.core.jobs import FORGE_KINDS, PR_CLOSE_ACTION
from pi_dispatch.triggers.file import Trigger

# The execution fields a matched rule hands its job, in the order the job literal lists them.
EXECUTION_FIELDS: Final = (
    "packages",
    "image",
    "backend",
    "excludeTools",
    "provider",
    "model",
    "maxTurns",
    "models",
    "maxCostUsd",
    "skillsDir",
    "secrets",
    "secretsProfile",
    "waitFor",
    "instructions",
    "resume",
    "replicas",
)


def label_names(labels: object) -> list[str]:
    """The names in a projected label list; entries without a string name are ignored."""
    if not isinstance(labels, list):
        return []
    return [item["name"] for item in labels if isinstance(item, Mapping) and isinstance(item.get("name"), str)]


@dataclass(frozen=True)
class Rule:
    """One webhook trigger as a route reads it."""

    index: int
    on_type: str
    run: Mapping[str, Any]
    any: tuple[str, ...] = ()
    all: tuple[str, ...] = ()
    none: tuple[str, ...] = ()
    phrase: str | None = None
    actions: frozenset[str] = frozenset()
    review_states: frozenset[str] | None = None
    number: int | None = None
    once: bool = False

    @property
    def positive(self) -> bool:
        return bool(self.any or self.all)

    def matches(self, labels: Sequence[str]) -> bool:
        present = set(labels)
        return (
            (not self.any or any(name in present for name in self.any))
            and all(name in present for name in self.all)
            and not any(name in present for name in self.none)
        )

    def matched_label(self, labels: Sequence[str]) -> str | None:
        present = set(labels)
        return next((name for name in self.any if name in present), self.all[0] if self.all else None)

    def execution(self) -> dict[str, Any]:
        """The rule's flow or command, then the execution fields it set, in the job literal's order."""
        run = self.run
        head = {"command": run["command"]} if "command" in run else {"flow": run.get("flow")}
        return head | {key: run[key] for key in EXECUTION_FIELDS if key in run}

    @property
    def repository(self) -> str | None:
        value = self.run.get("repository")
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class ForgeRules:
    label: tuple[Rule, ...] = ()
    comment: Rule | None = None
    pull_request: tuple[Rule, ...] = ()
    issue: tuple[Rule, ...] = ()
    pr_close: tuple[Rule, ...] = ()

    @property
    def any_rule(self) -> bool:
        return bool(self.label or self.comment or self.pull_request or self.issue or self.pr_close)

    @property
    def has_close(self) -> bool:
        return bool(self.issue or self.pr_close)


def _rule(trigger: Trigger) -> Rule:
    on = trigger.on
    return Rule(
        index=trigger.index,
        on_type=trigger.on_type,
        run=trigger.run,
        any=tuple(on.get("any") or ()),
        all=tuple(on.get("all") or ()),
        none=tuple(on.get("none") or ()),
        phrase=on.get("phrase"),
        actions=frozenset(on.get("action") or ()),
        review_states=frozenset(on["reviewState"]) if "reviewState" in on else None,
        number=on.get("number"),
        once=on.get("once") is True,
    )


@dataclass(frozen=True)
class Rules:
    """Each forge's rules and the flows a comment may name."""

    forges: Mapping[str, ForgeRules] = field(default_factory=lambda: {kind: ForgeRules() for kind in FORGE_KINDS})
    known_flows: frozenset[str] = frozenset()

    def of(self, kind: str) -> ForgeRules:
        return self.forges.get(kind) or ForgeRules()

    @classmethod
    def from_triggers(cls, triggers: Iterable[Trigger]) -> Rules:
        grouped: dict[str, dict[str, list[Rule]]] = {
            kind: {"label": [], "comment": [], "pull_request": [], "issue": [], "pr_close": []} for kind in FORGE_KINDS
        }
        flows: set[str] = set()
        for trigger in triggers:
            kind = trigger.run.get("kind")
            if kind not in grouped or trigger.on_type not in ("label", "comment", "pull_request", "issue"):
                continue  # cron entries are the worker's; a spent one-shot groups nowhere
            rule = _rule(trigger)
            if isinstance(trigger.run.get("flow"), str):
                flows.add(trigger.run["flow"])
            group = trigger.on_type
            if group == "pull_request" and PR_CLOSE_ACTION.get(str(kind)) in rule.actions:
                group = "pr_close"
            grouped[str(kind)][group].append(rule)
        forges = {
            kind: ForgeRules(
                label=tuple(groups["label"]),
                comment=groups["comment"][0] if groups["comment"] else None,
                pull_request=tuple(groups["pull_request"]),
                issue=tuple(groups["issue"]),
                pr_close=tuple(groups["pr_close"]),
            )
            for kind, groups in grouped.items()
        }
        return cls(forges, frozenset(flows))
