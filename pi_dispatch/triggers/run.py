"""The `run` half of a trigger: what a matched rule makes its job do, checked field by field. Pure.

The grammar is the reference's (its triggers loader), so a file one fleet loads the other loads too. Each check
refuses with the field it names and never the value: a triggers file can carry secret references, and its
refusals reach logs. `run_fields` returns only the fields it validated, so nothing unchecked reaches a job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pi_dispatch.core.forges import FORGES
from pi_dispatch.core.jobenv import reserved_secret_name
from pi_dispatch.core.jobs import LOCAL_KIND
from pi_dispatch.core.jscompat import is_integer, js_length, js_trim
from pi_dispatch.core.names import PROFILE_NAME_RE
from pi_dispatch.core.waits import WAIT_CONDITION_MAX, parse_after_instant
from pi_dispatch.triggers.terms import Checks, Refusal, is_text, model_fields, sweep_near_misses

REPLICAS_MAX: Final = 3  # the default concurrency: more replicas would queue rather than race
SECRETS_MAX: Final = 16
INSTRUCTIONS_MAX: Final = 2_000  # UTF-16 code units, as the reference counts them
BACKENDS: Final = frozenset({"local"})
EXCLUDABLE_TOOLS: Final = ("read", "bash", "powershell", "edit", "write", "grep", "find", "ls")
# The forges whose deliveries of some trigger types do not name the repository to clone, so the trigger must.
_NAMING: Final = {kind: words for kind, words in FORGES.items() if words.repository_named_on}
SKILL_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?")
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ID_CHARSET: Final = PROFILE_NAME_RE
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def _plain_text(run: Mapping[str, Any], key: str, what: str) -> str | None:
    value = run.get(key)
    if key not in run:
        return None
    if not is_text(value):
        raise Refusal(f"run.{key}", f"must be a non-empty {what}")
    assert isinstance(value, str)
    if value != js_trim(value):
        raise Refusal(f"run.{key}", "must not have leading or trailing whitespace")
    return value


def _command(run: Mapping[str, Any], on_type: str) -> str | None:
    if "flow" in run and "command" in run:
        raise Refusal("run.command", "exactly one of run.flow or run.command may be set")
    command = _plain_text(run, "command", "string: the command name and its arguments")
    if command is None:
        return None
    if command.startswith("/"):
        raise Refusal("run.command", 'must not start with "/": the runner adds it')
    if _CONTROL.search(command):
        raise Refusal("run.command", "must not contain control characters")
    if on_type == "cron" and "task" in run:
        raise Refusal("run.task", "cannot be combined with run.command: put the arguments in run.command")
    if on_type != "cron" and "instructions" in run:
        raise Refusal("run.instructions", "cannot be combined with run.command: a command job has no prompt envelope")
    if run.get("resume") is True:
        raise Refusal("run.resume", "true cannot be combined with run.command (not yet covered)")
    return command


def _flow(run: Mapping[str, Any], on_type: str, command: str | None) -> None:
    if command is not None:
        return
    if not is_text(run.get("flow")):
        what = "the default flow" if on_type == "comment" else "the flow"
        raise Refusal("run.flow", f"must be a non-empty string naming {what} (or use run.command)")
    if on_type != "cron" and not SKILL_NAME.fullmatch(str(run["flow"])):
        raise Refusal(
            "run.flow",
            "fails the skill-name charset (lowercase letters, digits, dash and underscore, 1-64 characters, "
            "starting and ending with a letter or digit)",
        )


def _boolean(run: Mapping[str, Any], key: str) -> bool | None:
    if key in run and not isinstance(run[key], bool):
        raise Refusal(f"run.{key}", "must be true or false when present")
    return run.get(key)


def _image(run: Mapping[str, Any]) -> str | None:
    image = _plain_text(run, "image", "image reference")
    if image is not None and (image.startswith("-") or re.search(r"[\s\x00-\x1f\x7f]", image)):
        raise Refusal("run.image", 'must not start with "-" or contain whitespace or control characters')
    return image


def _instructions(run: Mapping[str, Any], cron: bool) -> str | None:
    if "instructions" not in run:
        return None
    if cron:
        raise Refusal("run.instructions", "is not accepted on a cron trigger: put it at the top of run.task")
    text = run["instructions"]
    if not is_text(text):
        raise Refusal("run.instructions", "must be a non-empty string when present")
    if js_length(text) > INSTRUCTIONS_MAX:
        raise Refusal("run.instructions", f"is over the {INSTRUCTIONS_MAX}-character cap: move it into the flow")
    return str(text)


def _repository(run: Mapping[str, Any], on_type: str) -> str | None:
    kind = str(run.get("kind"))
    needed = kind in FORGES and on_type in FORGES[kind].repository_named_on
    if "repository" not in run:
        if needed:
            raise Refusal("run.repository", f"a {kind} {on_type} trigger must name the repository to clone")
        return None
    if not needed:
        where = ", ".join(f"{name} {'|'.join(sorted(words.repository_named_on))}" for name, words in _NAMING.items())
        raise Refusal("run.repository", f"is only meaningful where a delivery does not name it: {where} triggers")
    repository = _plain_text(run, "repository", "repository name")
    if repository is None or "/" in repository:
        raise Refusal("run.repository", "must be a repository name within the project, with no slashes")
    return repository


def _replicas(run: Mapping[str, Any]) -> int | None:
    if "replicas" not in run:
        return None
    if run.get("kind") == LOCAL_KIND:
        raise Refusal("run.replicas", "is not available on a cron trigger: its workspace is the operator's folder")
    replicas = run["replicas"]
    if not is_integer(replicas) or not 2 <= replicas <= REPLICAS_MAX:
        raise Refusal("run.replicas", f"must be a whole number from 2 to {REPLICAS_MAX} when present")
    if run.get("resume") is True:
        raise Refusal("run.replicas", "cannot be combined with run.resume: true")
    return int(replicas)


def _secrets(run: Mapping[str, Any]) -> dict[str, str] | None:
    if "secrets" not in run:
        return None
    secrets = run["secrets"]
    if not isinstance(secrets, Mapping):
        raise Refusal("run.secrets", "must map environment variable names to references")
    if not secrets:
        raise Refusal("run.secrets", "is empty: a map that binds nothing does nothing")
    if len(secrets) > SECRETS_MAX:
        raise Refusal("run.secrets", f"names more than {SECRETS_MAX} variables")
    for name, reference in secrets.items():
        if not ENV_NAME.fullmatch(name) or name == "__proto__":
            raise Refusal("run.secrets", "has a key that is not an environment variable name")
        if reserved_secret_name(name):
            raise Refusal(f"run.secrets.{name}", "is reserved: the job's runtime sets it")
        if not is_text(reference) or reference != js_trim(reference) or reference.startswith("-"):
            raise Refusal(
                f"run.secrets.{name}",
                'must be a non-empty reference with no surrounding whitespace, not starting with "-"',
            )
    if run.get("resume") is True:
        raise Refusal("run.secrets", "cannot be combined with run.resume: true")
    return {str(name): str(reference) for name, reference in secrets.items()}


def _profile_name(value: object, field: str, declares: str) -> str:
    if not is_text(value) or not ID_CHARSET.fullmatch(str(value)):
        raise Refusal(field, f"must name one of the {declares} profiles: letters, digits, dot, dash, underscore")
    return str(value)


def _secrets_profile(run: Mapping[str, Any]) -> str | None:
    if "secretsProfile" not in run:
        return None
    profile = _profile_name(run["secretsProfile"], "run.secretsProfile", "PI_SECRET_PROFILES")
    if "secrets" not in run:
        raise Refusal("run.secretsProfile", "is set but run.secrets names nothing")
    return profile


def _backend(run: Mapping[str, Any]) -> str | None:
    if "backend" not in run:
        return None
    backend = run["backend"]
    if not is_text(backend) or not ID_CHARSET.fullmatch(str(backend)):
        raise Refusal("run.backend", "must name a backend: letters, digits, dot, dash, underscore")
    if backend not in BACKENDS:
        raise Refusal("run.backend", f"is not a backend this build knows (known: {', '.join(sorted(BACKENDS))})")
    return str(backend)


def _condition(field: str, condition: object, seen: list[dict[str, str]]) -> dict[str, str]:
    if not isinstance(condition, Mapping) or len(condition) != 1:
        raise Refusal(field, "must be an object naming exactly one condition (after or profile)")
    ((key, value),) = condition.items()
    if key == "after":
        if any("after" in earlier for earlier in seen):
            raise Refusal(field, 'names a second "after"')
        if parse_after_instant(value).epoch_ms is None:
            raise Refusal(field, "after must be an ISO-8601 instant with its zone, like 2026-09-01T09:00:00Z")
        return {"after": str(value)}
    if key == "profile":
        profile = _profile_name(value, field, "PI_WAIT_PROFILES")
        if {"profile": profile} in seen:
            raise Refusal(field, "names a profile twice")
        return {"profile": profile}
    raise Refusal(field, "has an unsupported condition (expected after or profile)")


def wait_for(on: Mapping[str, Any], run: Mapping[str, Any], on_type: str) -> list[dict[str, str]] | None:
    """`run.waitFor`: one to four one-key conditions, at most one `after`, each profile once."""
    if "waitFor" not in run:
        return None
    if on_type == "cron":
        raise Refusal("run.waitFor", "is not yet covered on a cron trigger")
    if on.get("once") is True:
        raise Refusal("run.waitFor", "cannot be combined with on.once")
    if "replicas" in run:
        raise Refusal("run.waitFor", "cannot be combined with run.replicas")
    conditions = run["waitFor"]
    if not isinstance(conditions, list) or not conditions:
        raise Refusal("run.waitFor", "must be a non-empty array of conditions")
    if len(conditions) > WAIT_CONDITION_MAX:
        raise Refusal("run.waitFor", f"names more than {WAIT_CONDITION_MAX} conditions")
    normalized: list[dict[str, str]] = []
    for position, condition in enumerate(conditions):
        normalized.append(_condition(f"run.waitFor[{position}]", condition, normalized))
    return normalized


def _exclude_tools(run: Mapping[str, Any]) -> list[str] | None:
    if "excludeTools" not in run:
        return None
    tools = run["excludeTools"]
    if not isinstance(tools, list) or not tools:
        raise Refusal("run.excludeTools", "must be a non-empty array of tool names")
    for position, name in enumerate(tools):
        if name not in EXCLUDABLE_TOOLS:
            raise Refusal(f"run.excludeTools[{position}]", f"is not one of {', '.join(EXCLUDABLE_TOOLS)}")
        if name in tools[:position]:
            raise Refusal(f"run.excludeTools[{position}]", "names a tool twice")
    return [str(name) for name in tools]


def _portfolio(run: Mapping[str, Any], on_type: str, command: str | None) -> bool | None:
    if "portfolio" not in run:
        return None
    if on_type != "cron":
        raise Refusal("run.portfolio", "is only available on a cron trigger")
    portfolio = _boolean(run, "portfolio")
    if portfolio is True and command is not None:
        raise Refusal("run.portfolio", "cannot be true beside run.command")
    return portfolio


def _cron_fields(run: Mapping[str, Any], command: str | None) -> dict[str, Any]:
    """What only a cron trigger has: its folder and task, and whether its job may use GitHub."""
    if not is_text(run.get("folder")):
        raise Refusal("run.folder", "must be a non-empty string: the folder the job works in")
    if command is None and not is_text(run.get("task")):
        raise Refusal("run.task", "must be a non-empty string")
    if run.get("resume") is True:
        raise Refusal("run.resume", "is not yet covered for cron triggers")
    return {"folder": run["folder"], "task": run.get("task"), "github": _boolean(run, "github")}


def run_fields(on: Mapping[str, Any], run: Mapping[str, Any], on_type: str) -> dict[str, Any]:
    """The validated run of one trigger, in the reference's normalized order; absent fields stay absent."""
    cron, checks = on_type == "cron", Checks()
    sound, command = checks.passed(lambda: _command(run, on_type))
    local: dict[str, Any] = {}
    if sound:  # the flow, a cron trigger's task and the portfolio switch are read beside a sound command only
        checks.take(lambda: _flow(run, on_type, command))
        local = (checks.take(lambda: _cron_fields(run, command)) or {}) if cron else {}
    fields: dict[str, Any] = {
        "kind": run["kind"],
        "folder": local.get("folder"),
        "flow": run.get("flow"),
        "task": local.get("task"),
        "command": command,
        "github": local.get("github"),
        "packages": checks.take(lambda: _boolean(run, "packages")),
        "image": checks.take(lambda: _image(run)),
        "resume": checks.take(lambda: _boolean(run, "resume")),
        "replicas": checks.take(lambda: _replicas(run)),
        "skillsDir": checks.take(lambda: _plain_text(run, "skillsDir", "string")),
        "instructions": checks.take(lambda: _instructions(run, cron)),
        "repository": None if cron else checks.take(lambda: _repository(run, on_type)),
        "secrets": checks.take(lambda: _secrets(run)),
        "secretsProfile": checks.take(lambda: _secrets_profile(run)),
    }
    checks.take(lambda: sweep_near_misses(on, run))
    fields |= {
        "waitFor": checks.take(lambda: wait_for(on, run, on_type)),
        "backend": checks.take(lambda: _backend(run)),
        "excludeTools": checks.take(lambda: _exclude_tools(run)),
        **(checks.take(lambda: model_fields(run)) or {}),
        "portfolio": checks.take(lambda: _portfolio(run, on_type, command)) if sound else None,
    }
    checks.settle()
    return {key: value for key, value in fields.items() if value is not None}
