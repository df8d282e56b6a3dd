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


# What pi and the provider SDKs it builds read to configure a provider (where a request goes, which credential it
# carries), the reference's set at its newer pin plus the names its newest test pins: a trigger's secret may not
# bind one, or a job could send its calls elsewhere. Every `PI_` name is refused besides (`reserved_secret_name`).
AWS_STEERING: Final = (
    "AWS_ACCESS_KEY_ID AWS_BEARER_TOKEN_BEDROCK AWS_BEDROCK_FORCE_CACHE AWS_BEDROCK_FORCE_HTTP1 AWS_BEDROCK_SKIP_AUTH "
    "AWS_CONTAINER_CREDENTIALS_FULL_URI AWS_CONTAINER_CREDENTIALS_RELATIVE_URI AWS_DEFAULT_REGION AWS_PROFILE "
    "AWS_REGION AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_WEB_IDENTITY_TOKEN_FILE AWS_CONFIG_FILE AWS_ENDPOINT_URL "
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME AWS_SHARED_CREDENTIALS_FILE AWS_USE_FIPS_ENDPOINT"
)
STEERING_VARIABLES: Final = frozenset(
    (
        AWS_STEERING + " ANTHROPIC_AUTH_TOKEN ANTHROPIC_BASE_URL ANTHROPIC_LOG ANTHROPIC_CUSTOM_HEADERS "
        "AZURE_OPENAI_API_VERSION AZURE_OPENAI_BASE_URL AZURE_OPENAI_DEPLOYMENT_NAME_MAP AZURE_OPENAI_ENDPOINT "
        "AZURE_OPENAI_RESOURCE_NAME GCLOUD_PROJECT GEMINI_NEXT_GEN_API_BASE_URL GEMINI_NEXT_GEN_API_LOG GOOGLE_API_KEY "
        "GOOGLE_APPLICATION_CREDENTIALS GOOGLE_CLOUD_LOCATION GOOGLE_CLOUD_PROJECT GOOGLE_CLOUD_QUOTA_PROJECT "
        "GOOGLE_GEMINI_BASE_URL GOOGLE_GENAI_USE_ENTERPRISE GOOGLE_GENAI_USE_VERTEXAI GOOGLE_VERTEX_BASE_URL "
        "GOOGLE_GENAI_ACCESS_TOKEN google_application_credentials gcloud_project google_cloud_project "
        "OPENAI_API_VERSION OPENAI_BASE_URL OPENAI_LOG OPENAI_ORG_ID OPENAI_PROJECT_ID OPENAI_WEBHOOK_SECRET "
        "OPENAI_CUSTOM_HEADERS CLOUDFLARE_ACCOUNT_ID ALL_PROXY all_proxy http_proxy https_proxy no_proxy"
    ).split()
)
