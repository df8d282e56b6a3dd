"""The variables pi reads a provider's key from, in pi's order, per provider; the worker hands a job every one of
them its host holds (`ANTHROPIC_AUTH_TOKEN` and `ANTHROPIC_OAUTH_TOKEN` ride along with `ANTHROPIC_API_KEY`).

A provider pi knows that takes no key from a variable (Bedrock's AWS chain, a login) has an empty tuple; one pi does
not know has none at all. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

PROVIDER_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "anthropic": ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"),
    "openai": ("OPENAI_API_KEY",),
    "google": ("GEMINI_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "huggingface": ("HF_TOKEN",),
    "radius": ("RADIUS_API_KEY",),
    "amazon-bedrock": (),
    "openai-codex": (),
    "google-vertex": (),
}
EVERY_KEY: Final = frozenset(name for names in PROVIDER_KEYS.values() for name in names)


def key_candidates(provider: str) -> tuple[str, ...]:
    """pi's key variables for a provider, in its order; none for one pi does not know."""
    return PROVIDER_KEYS.get(provider, ()) if isinstance(provider, str) else ()
