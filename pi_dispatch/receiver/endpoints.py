"""Which endpoints the receiver serves and with what credentials, decided once at boot. Pure apart from reading
the triggers file (and what a forge's arm reads, the GitHub App's key).

Order, as the reference reports it: the settings; the triggers file; then each forge in the reference's order
(`forges.registered`), each armed by its own package (`Forge.arm`): GitHub's auth block, whether it is served and
its webhook secret; each other forge armed when any of its variables is set and then requiring all of them. Every
refusal is a ConfigError (exit 2) naming the variable and the fix; reloads of the triggers file never change these
decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from pi_dispatch.config.handover import settled
from pi_dispatch.core.errors import ConfigError
from pi_dispatch.receiver.forges import registered
from pi_dispatch.receiver.forges.spec import Arming
from pi_dispatch.receiver.rules import Rules
from pi_dispatch.triggers.file import read_triggers

if TYPE_CHECKING:
    from pi_dispatch.config.receiver_settings import ReceiverSettings

SCHEMA: Final = "receiver-env"


@dataclass(frozen=True)
class ReceiverConfig:
    """The settings, the triggers, and each served forge's arm by the forge's name. `config.<forge>` reads a forge's
    arm, None when it is not served."""

    settings: ReceiverSettings
    source: str  # where the settings came from: the environment or the env file
    triggers_path: Path
    triggers_text: bytes
    rules: Rules
    arms: Mapping[str, object]

    def __getattr__(self, name: str) -> Any:
        if name in {forge.name for forge in registered()}:
            return self.arms.get(name)
        raise AttributeError(name)

    @property
    def served(self) -> list[str]:
        """The forges this receiver answers, in the reference's order."""
        return [forge.name for forge in registered() if forge.name in self.arms]


def build_config(
    settings: ReceiverSettings, environment: Mapping[str, str], source: str, cwd: Path | None = None
) -> ReceiverConfig:
    """The armed endpoints and their credentials from loaded settings. Raises ConfigError with every problem."""
    path = Path(settings.triggers_file)
    path = path if path.is_absolute() else (cwd or Path.cwd()) / path
    text, triggers = read_triggers(path, settings.triggers_file)  # a file that does not load refuses boot alone
    rules = Rules.from_triggers(triggers)
    arming = Arming(settings, environment, rules, source)
    arms = {forge.name: arm for forge in registered() if (arm := forge.arm(arming)) is not None}
    if arming.problems:
        raise ConfigError(arming.problems)
    return ReceiverConfig(settings, source, path, text, rules, arms)


def load_receiver_config(
    env_file: Path | None = None, *, environment: Callable[[], Mapping[str, str]] | None = None, cwd: Path | None = None
) -> ReceiverConfig:
    """The receiver's configuration from the environment, or from env_file alone. Raises ConfigError (exit 2)."""
    from pi_dispatch.config.declaration import load_declared
    from pi_dispatch.config.receiver_settings import RECEIVER_MODEL

    settings, raw = load_declared(RECEIVER_MODEL, SCHEMA, env_file, environment=environment)
    return build_config(settings, raw.everything, raw.label, cwd)


def handed_over(config: ReceiverConfig) -> ReceiverConfig:
    """The configuration with its settings as plain values (`config/handover.py`), to cross from the child that
    checked them to a receiver that never loads the checking libraries."""
    return replace(config, settings=cast("ReceiverSettings", settled(config.settings)))
