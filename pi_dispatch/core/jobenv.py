"""A job container's environment under the reference's contract: a closed map, built in the reference's order so
that nothing a job brings (a forwarded variable, a resolved secret) can override what the worker writes, and the
forge token last of all, under its own forge's names only.

This port adds `PI_JOB_ATTEMPT`, `PI_JOB_KIND` and `PI_HOST` (reserved names a job cannot bind). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pi_dispatch.core.forges import FORGES
from pi_dispatch.core.jobs import CONTAINER_VARIABLES, LOCAL_KIND
from pi_dispatch.core.providers import STEERING_VARIABLES

PLAYWRIGHT: Final = {
    "PLAYWRIGHT_BROWSERS_PATH": "/ms-playwright",
    "PLAYWRIGHT_MCP_BROWSER": "chromium",
    "PLAYWRIGHT_MCP_SANDBOX": "false",
}
# Each forge's instance variable in a job (its token variables are its entry's `tokenVariables`)
INSTANCE_VARIABLE: Final = {"gitlab": "GITLAB_HOST", "forgejo": "FORGEJO_HOST", "azure": "AZURE_DEVOPS_ORG_URL"}
RUNNER_OWN: Final = ("PI_DISPATCH_CHILD_LEDGER", "PI_DISPATCH_RUNNER_PID")
UNSAFE_NAME: Final = re.compile(r"[^A-Za-z0-9._-]")


# What no trigger's secret may bind (the reference's names, refused when the triggers file loads and again before a
# job's secrets resolve): what the worker writes, the forges' tokens and hosts, what only the worker holds, the way
# out, and what steers a provider; every `PI_` name besides.
RESERVED_NAMES: Final = frozenset(
    {*CONTAINER_VARIABLES, *PLAYWRIGHT, *INSTANCE_VARIABLE.values(), *RUNNER_OWN, *STEERING_VARIABLES}
    | {variable for words in FORGES.values() for variable in words.token_variables}
    | {"GITHUB_APP_PRIVATE_KEY", "VALKEY_PASSWORD", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "NODE_USE_ENV_PROXY"}
)


def reserved_secret_name(name: str) -> bool:
    """Whether a trigger's secret may not bind `name`."""
    return name in RESERVED_NAMES or name.startswith("PI_")


def container_name(job_id: str) -> str:
    """`pi-job-<id>`, every character outside `[A-Za-z0-9._-]` replaced (a cron id's colons): the reference's
    `PI_JOB_ID`."""
    return "pi-job-" + UNSAFE_NAME.sub("_", job_id)


def token_kind(kind: object, github: object) -> str | None:
    """The forge whose token a job gets: its own, GitHub's for a local job with `run.github`, else none."""
    if kind == LOCAL_KIND:
        return "github" if github is True else None
    return kind if isinstance(kind, str) and kind in FORGES else None


@dataclass(frozen=True)
class AgentRun:
    """What the runner is told: the provider, model and budgets, and what the job asks of pi."""

    provider: str
    model: str
    max_turns: int
    job_id: str
    attempt: int
    kind: str
    host: str
    max_tokens: int | None = None
    flow: str | None = None
    command: str | None = None
    exclude_tools: Sequence[str] = ()
    packages: Sequence[str] = ()


@dataclass(frozen=True)
class JobEnvironment:
    """Every source of a job's environment, each applied in its turn."""

    run: AgentRun
    provider_keys: Mapping[str, str]  # pi's variables for the provider that this host holds, in pi's order
    forwarded: Mapping[str, str] = field(default_factory=dict)  # PI_FORWARD_ENV names this host holds
    secrets: Mapping[str, str] = field(default_factory=dict)
    egress: Mapping[str, str] = field(default_factory=dict)
    home: str | None = None  # beside --user
    spend: Mapping[str, str] = field(default_factory=dict)  # the cost cap, the exit line's channel (`spend.py`)
    token: str | None = field(default=None, repr=False)
    token_kind: str | None = None
    instance_url: str | None = None

    def build(self) -> dict[str, str]:
        run = self.run
        env: dict[str, str] = {
            "PI_PROVIDER": run.provider,
            "PI_MODEL": run.model,
            "PI_MAX_TURNS": str(run.max_turns),
        }
        if run.max_tokens is not None:
            env["PI_MAX_TOKENS"] = str(run.max_tokens)
        env["PI_JOB_ID"] = container_name(run.job_id)
        env |= {"PI_JOB_ATTEMPT": str(run.attempt), "PI_JOB_KIND": run.kind, "PI_HOST": run.host}
        env |= PLAYWRIGHT
        if run.packages:
            env["PI_PACKAGES"] = ":".join(run.packages)
        for name, value in (("PI_FLOW", run.flow), ("PI_COMMAND", run.command)):
            if value:
                env[name] = value
        if run.exclude_tools:
            env["PI_EXCLUDE_TOOLS"] = ",".join(run.exclude_tools)
        env["PI_OFFLINE"] = "1"
        env |= dict(self.provider_keys)
        env |= {name: value for name, value in self.forwarded.items() if value}
        env |= {name: value for name, value in self.secrets.items() if value}
        env |= dict(self.egress)
        if self.home is not None:
            env["HOME"] = self.home
        for name in ("PI_MAX_COST_MICROS", "PI_EXIT_AUTH", *RUNNER_OWN):
            env.pop(name, None)
        env |= dict(self.spend)
        if self.token and self.token_kind is not None:
            for name in FORGES[self.token_kind].token_variables:
                env[name] = self.token
            if self.instance_url and (instance := INSTANCE_VARIABLE.get(self.token_kind)):
                env[instance] = self.instance_url
        return env
