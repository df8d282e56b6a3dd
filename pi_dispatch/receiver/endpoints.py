"""Which endpoints the receiver serves and with what credentials, decided once at boot. Pure apart from reading
the triggers file and the App key.

Order, as the reference reports it: the settings; the triggers file; GitHub's auth block; whether GitHub is
served (a GitHub rule, or GITHUB_AUTH_SOURCE set explicitly); its webhook secret; then each other forge, armed
when any of its variables is set and then requiring all of them. Every refusal is a ConfigError (exit 2)
naming the variable and the fix; reloads of the triggers file never change these decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from pi_dispatch.config.handover import Revealable, secret_text, settled
from pi_dispatch.core.errors import ConfigError, Problem
from pi_dispatch.receiver.auth import AzureVerifier, GitLabVerifier
from pi_dispatch.receiver.rules import Rules
from pi_dispatch.triggers.file import read_triggers

if TYPE_CHECKING:
    from pi_dispatch.config.receiver_settings import ReceiverSettings

SCHEMA: Final = "receiver-env"
GITHUB_SOURCES: Final = ("pat", "gh", "app")


def _text(secret: Revealable | None) -> str:
    return secret_text(secret) or ""


def _root(url: str | None) -> str:
    return (url or "").strip().rstrip("/")


@dataclass(frozen=True)
class GitHubAuth:
    """Where GitHub tokens come from. `explicit`: GITHUB_AUTH_SOURCE was set (it then serves GitHub on its own)."""

    source: str
    explicit: bool
    api_url: str
    token: str = ""  # source pat: the value of the variable GITHUB_PAT_VAR names
    app_id: str = ""
    installation_id: str = ""
    private_key: str = ""


@dataclass(frozen=True)
class GitLabArm:
    verifier: GitLabVerifier
    token: str
    url: str


@dataclass(frozen=True)
class ForgejoArm:
    secret: bytes
    token: str
    url: str
    bot_id: int | None


@dataclass(frozen=True)
class AzureArm:
    verifier: AzureVerifier
    token: str
    org_url: str


@dataclass(frozen=True)
class ReceiverConfig:
    settings: ReceiverSettings
    source: str  # where the settings came from: the environment or the env file
    triggers_path: Path
    triggers_text: bytes
    rules: Rules
    github: GitHubAuth | None  # None: GitHub is not served
    webhook_secret: bytes
    gitlab: GitLabArm | None
    forgejo: ForgejoArm | None
    azure: AzureArm | None

    @property
    def serves_github(self) -> bool:
        return self.github is not None

    @property
    def served(self) -> list[str]:
        """The forges this receiver answers, in the reference's order."""
        armed = (("github", self.github), ("gitlab", self.gitlab), ("forgejo", self.forgejo), ("azure", self.azure))
        return [name for name, arm in armed if arm is not None]


def _private_key(settings: ReceiverSettings, problems: list[Problem], source: str) -> str:
    inline, path = _text(settings.github_app_private_key), settings.github_app_private_key_path
    if inline and path:
        problems.append(
            Problem(
                "GITHUB_APP_PRIVATE_KEY",
                "and GITHUB_APP_PRIVATE_KEY_PATH are both set",
                source,
                "keep one: the key file (preferred) or the key itself",
            )
        )
        return ""
    if path:
        try:
            return Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "is not text"
            problems.append(
                Problem("GITHUB_APP_PRIVATE_KEY_PATH", f"cannot be read ({reason})", source, "point it at the PEM")
            )
            return ""
    if inline:
        return inline if "\n" in inline else inline.replace("\\n", "\n")
    problems.append(
        Problem("GITHUB_APP_PRIVATE_KEY_PATH", "is required with GITHUB_AUTH_SOURCE=app", source, "the App's PEM file")
    )
    return ""


def _github(
    settings: ReceiverSettings, environment: Mapping[str, str], problems: list[Problem], source: str
) -> GitHubAuth:
    chosen = settings.github_auth_source
    auth = GitHubAuth(chosen or "gh", chosen is not None, _root(settings.github_api_url))
    if auth.source == "pat":
        token = environment.get(settings.github_pat_var, "").strip()
        if not token:
            problems.append(
                Problem(
                    settings.github_pat_var,
                    "is empty, and GITHUB_AUTH_SOURCE=pat reads the token from it",
                    source,
                    f"put the token in {settings.github_pat_var}, or name another variable in GITHUB_PAT_VAR",
                )
            )
        return GitHubAuth("pat", True, auth.api_url, token=token)
    if auth.source == "app":
        ids = {
            "GITHUB_APP_ID": settings.github_app_id,
            "GITHUB_APP_INSTALLATION_ID": settings.github_app_installation_id,
        }
        for variable, value in ids.items():
            if value is None:
                problems.append(Problem(variable, "is required with GITHUB_AUTH_SOURCE=app", source, "the App's id"))
        key = _private_key(settings, problems, source)
        return GitHubAuth(
            "app",
            True,
            auth.api_url,
            app_id=settings.github_app_id or "",
            installation_id=settings.github_app_installation_id or "",
            private_key=key,
        )
    return auth


def _required(values: Mapping[str, object], forge: str, source: str) -> list[Problem]:
    return [
        Problem(variable, f"is required once {forge} is configured", source, f"set it, or unset every {forge} variable")
        for variable, value in values.items()
        if value in (None, "")
    ]


def _gitlab(settings: ReceiverSettings, problems: list[Problem], source: str) -> GitLabArm | None:
    secret, token, mode = (
        _text(settings.gitlab_webhook_secret),
        _text(settings.gitlab_token),
        settings.gitlab_webhook_mode,
    )
    if not (mode or secret or token):
        return None
    missing = _required(
        {"GITLAB_WEBHOOK_MODE": mode, "GITLAB_WEBHOOK_SECRET": secret.strip(), "GITLAB_TOKEN": token.strip()},
        "GitLab",
        source,
    )
    if missing or mode is None:
        problems += missing
        return None
    try:
        verifier = GitLabVerifier.build(mode, secret)
    except ConfigError as error:
        problems += [Problem(p.subject, p.message, source, p.fix) for p in error.problems]
        return None
    return GitLabArm(verifier, token, _root(settings.gitlab_url))


def _forgejo(settings: ReceiverSettings, problems: list[Problem], source: str) -> ForgejoArm | None:
    secret, token, url = (
        _text(settings.forgejo_webhook_secret),
        _text(settings.forgejo_token),
        _root(settings.forgejo_url),
    )
    if not (secret or token or url):
        return None
    missing = _required(
        {"FORGEJO_URL": url, "FORGEJO_WEBHOOK_SECRET": secret.strip(), "FORGEJO_TOKEN": token.strip()},
        "Forgejo",
        source,
    )
    problems += missing
    bot = int(settings.forgejo_bot_id) if settings.forgejo_bot_id else None
    return None if missing else ForgejoArm(secret.encode(), token, url, bot)


def _azure(settings: ReceiverSettings, problems: list[Problem], source: str) -> AzureArm | None:
    mode, secret, token = settings.azure_webhook_mode, _text(settings.azure_webhook_secret), _text(settings.azure_token)
    org = _root(settings.azure_org_url)
    if not (mode or secret or token or org):
        return None
    header = (settings.azure_webhook_header or "").strip()
    required: dict[str, object] = {"AZURE_WEBHOOK_MODE": mode}
    if mode == "header":
        required["AZURE_WEBHOOK_HEADER"] = header
    required |= {"AZURE_WEBHOOK_SECRET": secret.strip(), "AZURE_ORG_URL": org, "AZURE_TOKEN": token.strip()}
    missing = _required(required, "Azure DevOps", source)
    problems += missing
    return None if missing or mode is None else AzureArm(AzureVerifier(mode, secret, header), token, org)


def build_config(
    settings: ReceiverSettings, environment: Mapping[str, str], source: str, cwd: Path | None = None
) -> ReceiverConfig:
    """The armed endpoints and their credentials from loaded settings. Raises ConfigError with every problem."""
    path = Path(settings.triggers_file)
    path = path if path.is_absolute() else (cwd or Path.cwd()) / path
    text, triggers = read_triggers(path, settings.triggers_file)  # a file that does not load refuses boot alone
    rules = Rules.from_triggers(triggers)
    problems: list[Problem] = []
    github = _github(settings, environment, problems, source)
    served = rules.of("github").any_rule or github.explicit
    secret = _text(settings.webhook_secret)
    if served and not secret.strip():
        problems.append(
            Problem(
                "WEBHOOK_SECRET",
                "WEBHOOK_SECRET is required when GitHub is served: without it the receiver cannot verify signatures",
                source,
                "set it to the secret of the GitHub webhook",
            )
        )
    arms = (
        _gitlab(settings, problems, source),
        _forgejo(settings, problems, source),
        _azure(settings, problems, source),
    )
    if problems:
        raise ConfigError(problems)
    return ReceiverConfig(
        settings,
        source,
        path,
        text,
        rules,
        github if served else None,
        secret.encode(),
        *arms,
    )


def load_receiver_config(
    env_file: Path | None = None, *, environment: Callable[[], Mapping[str, str]] | None = None, cwd: Path | None = None
) -> ReceiverConfig:
    """The receiver's configuration from the environment, or from env_file alone. Raises ConfigError (exit 2)."""
    from pi_dispatch.config.declaration import load_declared
    from pi_dispatch.config.receiver_settings import ReceiverSettings

    settings, raw = load_declared(ReceiverSettings, SCHEMA, env_file, environment=environment)
    return build_config(settings, raw.everything, raw.label, cwd)


def handed_over(config: ReceiverConfig) -> ReceiverConfig:
    """The configuration with its settings as plain values (`config/handover.py`), to cross from the child that
    checked them to a receiver that never loads the checking libraries."""
    return replace(config, settings=cast("ReceiverSettings", settled(config.settings)))
