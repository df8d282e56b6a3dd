"""Where the store is, declared once for every process that reaches it: the worker's, the receiver's and the
console's settings each start from these five (`infra/store.py` turns them into an address)."""

from __future__ import annotations

from typing import Final

from pi_dispatch.config.declaration import DeclaredSettings, setting
from pi_dispatch.config.kinds import (
    PRIMARY_NAME_HELP,
    SENTINEL_PASSWORD_HELP,
    SENTINELS_HELP,
    Password,
    PrimaryName,
    Sentinels,
    ValkeyUrl,
)
from pi_dispatch.infra.store import DEFAULT_PRIMARY_NAME
from pi_dispatch.infra.valkey import DEFAULT_VALKEY_URL

SECRET_FIX: Final = "one line with no control characters; keep it in a vault and the env file 0600"  # noqa: S105


class StoreSettings(DeclaredSettings):
    """The store a process talks to: a plain Valkey at a URL, or a replicated one found through its Sentinels."""

    valkey_url: ValkeyUrl = setting(
        "VALKEY_URL",
        DEFAULT_VALKEY_URL,
        "The shared Valkey: redis:// (plain), rediss:// (TLS) or unix:// (socket); /N selects the database; a store "
        "user is named before the host (redis://pi-worker@store.lan:6379/0).",
        "a URL such as redis://store.lan:6379/0, rediss://store.lan:6380 or unix:///run/valkey/valkey.sock",
    )
    valkey_password: Password = setting(
        "VALKEY_PASSWORD", None, "Valkey password, kept out of the URL. A password inside the URL wins.", SECRET_FIX
    )
    valkey_sentinels: Sentinels = setting("VALKEY_SENTINELS", "", *SENTINELS_HELP)
    valkey_primary_name: PrimaryName = setting("VALKEY_PRIMARY_NAME", DEFAULT_PRIMARY_NAME, *PRIMARY_NAME_HELP)
    valkey_sentinel_password: Password = setting("VALKEY_SENTINEL_PASSWORD", None, *SENTINEL_PASSWORD_HELP)
