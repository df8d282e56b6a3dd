"""Which allowlist entries cover a public suffix: a `.suffix` entry whose name is one under which anyone may register
a name of their own (`co.uk`, `github.io`, `s3.amazonaws.com`), so a job may send what it holds to a stranger's server.
By the Public Suffix List (both its ICANN and its private sections) as the publicsuffixlist package ships it; read
once per process, and only by the commands that report it (`config check`, `audit`), never by the running worker.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

    from pi_dispatch.core.egress import Allowlist


@lru_cache(maxsize=1)
def _suffixes() -> PublicSuffixList:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def public_suffix_wildcards(allowlist: Allowlist) -> list[str]:
    """The entries of `allowlist` that cover a public suffix, as written (`.github.io`)."""
    return [
        destination.written
        for destination in allowlist.destinations
        if destination.subdomains and bool(_suffixes().is_public(destination.host))
    ]


WILDCARD_FIX = (
    "list the names the jobs need (raw.githubusercontent.com), never a suffix anyone may register a name under"
)
