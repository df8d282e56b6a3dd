"""A forge-qualified scope, `<forge>:<owner>/<name>` (the scoped limits' version 2 rows, the pause windows): one
forge's repository, where a bare `owner/name` names it on every forge. Pure."""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from pi_dispatch.core.forges import FORGES

QUALIFIED_RE: Final = re.compile(r"([^/\\:]+):(.*)", re.DOTALL)
REPO_SEGMENT: Final = r"[^/\s#:\x00-\x1f\x7f](?:[^/#:\x00-\x1f\x7f]*[^/\s#:\x00-\x1f\x7f])?"
QUALIFIED_REPO_RE: Final = re.compile(rf"{REPO_SEGMENT}(?:/{REPO_SEGMENT})+")


def qualified_prefix(scope: str) -> str | None:
    """The `<word>` of a `<word>:…` scope (no slash before the colon), or None for a scope without one."""
    found = QUALIFIED_RE.fullmatch(unicodedata.normalize("NFC", scope))
    return found[1] if found is not None else None


def qualified_scope(scope: str) -> str:
    """`<forge>:<repo>` as written, its repo trimmed; ValueError saying what is wrong (unknown forge, no repo)."""
    found = QUALIFIED_RE.fullmatch(unicodedata.normalize("NFC", scope))
    if found is None:
        raise ValueError("write <forge>:owner/name")
    kind, repo = found[1], found[2].strip()
    if kind not in FORGES:
        raise ValueError(f"unknown forge {kind!r} (use one of {', '.join(FORGES)})")
    if QUALIFIED_REPO_RE.fullmatch(repo) is None:
        raise ValueError(f"write {kind}:owner/name, so it can match a repository")
    return f"{kind}:{repo}"


def job_qualified_scope(kind: object, repo: object) -> str | None:
    """How a forge job is named by a qualified row: `<forge>:<repo>`, NFC-normalised."""
    if not isinstance(kind, str) or not kind.strip() or not isinstance(repo, str) or not repo.strip():
        return None
    return unicodedata.normalize("NFC", f"{kind}:{repo}")
