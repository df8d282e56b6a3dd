"""What of a repository's `.pi/` reaches a job (`/job/pi/`), as the reference decides it: the persona
(`.pi/APPEND_SYSTEM.md`) and whole skills (`.pi/skills/<name>/...` holding a `SKILL.md`), plain files only.

Decided from the tree's listing (`git ls-tree -r -l -z <sha> .pi/`) before a byte is read: every path checked
segment by segment and rebuilt from the checked segments, every cap applied, so a refusal writes nothing. Symlinks,
submodules and executables are skipped. Pure.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Final

from pi_dispatch.core.reasons import Reason

MAX_FILES: Final = 256
MAX_FILES_PER_SKILL: Final = 64
MAX_FILE_BYTES: Final = 1024 * 1024
MAX_TOTAL_BYTES: Final = 8 * 1024 * 1024
MAX_TAIL_SEGMENTS: Final = 4
MAX_OUT_CHARS: Final = 200
LISTING_BYTES: Final = 1024 * 1024  # a listing longer than this: too many files

PERSONA: Final = ".pi/APPEND_SYSTEM.md"
SKILLS: Final = ".pi/skills/"
SKILL_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?", re.IGNORECASE | re.ASCII)
TAIL_SEGMENT: Final = re.compile(r"[a-z0-9](?:[a-z0-9_.-]{0,62}[a-z0-9])?", re.IGNORECASE | re.ASCII)
DEVICE_STEM: Final = re.compile(r"con|prn|aux|nul|com[1-9]|lpt[1-9]", re.IGNORECASE)
PLAIN_FILE: Final = "100644"


class UnreadableListing(ValueError):
    """A listing git would never write (its message never carries a path)."""


@dataclass(frozen=True)
class TreeFile:
    """One entry of the listing: its mode, object id, size (None for a submodule) and path."""

    mode: str
    oid: str
    size: int | None
    path: str


@dataclass(frozen=True)
class Placed:
    """A file to write: its object id and its place under the job's folder."""

    oid: str
    out: str
    skill: str | None
    size: int


def classify(path: str) -> tuple[str, str | None] | None:
    """The place (under the job folder) and skill of an accepted `.pi/` path; None for one that is not."""
    if path == PERSONA:
        return "pi/APPEND_SYSTEM.md", None
    if not path.startswith(SKILLS):
        return None
    name, *tail = path[len(SKILLS) :].split("/")
    if not SKILL_NAME.fullmatch(name) or not 1 <= len(tail) <= MAX_TAIL_SEGMENTS:
        return None
    for segment in tail:
        if not TAIL_SEGMENT.fullmatch(segment) or DEVICE_STEM.fullmatch(segment.split(".", 1)[0]):
            return None
    out = "/".join(["pi", "skills", name, *tail])
    return (out, name) if len(out) <= MAX_OUT_CHARS else None


def parse_listing(raw: bytes) -> list[TreeFile]:
    """`git ls-tree -r -l -z` records: `<mode> <type> <oid> <size>\\t<path>`, NUL-terminated."""
    files = []
    for record in raw.split(b"\0"):
        if not record:
            continue
        head, tab, path = record.partition(b"\t")
        fields = head.split()
        if not tab or len(fields) != 4:
            raise UnreadableListing("unreadable object size")
        mode, _kind, oid, size = (field.decode("ascii", "replace") for field in fields)
        if size != "-" and not size.isdigit():
            raise UnreadableListing("unreadable object size")
        files.append(TreeFile(mode, oid, None if size == "-" else int(size), path.decode("utf-8", "replace")))
    return files


def plan(files: list[TreeFile]) -> list[Placed] | Reason:
    """The files to write, or the cap that refuses them all."""
    candidates = []
    for entry in files:
        if entry.mode != PLAIN_FILE or entry.size is None:
            continue
        if (placed := classify(entry.path)) is not None:
            candidates.append(Placed(entry.oid, placed[0], placed[1], entry.size))
    with_skill = {item.skill for item in candidates if item.skill and item.out.endswith("/SKILL.md")}
    kept = [item for item in candidates if item.skill is None or item.skill in with_skill]
    per_skill = Counter(item.skill for item in kept if item.skill is not None)
    if len(kept) > MAX_FILES or any(count > MAX_FILES_PER_SKILL for count in per_skill.values()):
        return Reason.PI_TOO_MANY_FILES
    if any(item.size > MAX_FILE_BYTES for item in kept):
        return Reason.PI_FILE_TOO_LARGE
    if sum(item.size for item in kept) > MAX_TOTAL_BYTES:
        return Reason.PI_TOO_LARGE
    if _collides([item.out for item in kept]):
        return Reason.PI_PATH_COLLISION
    return kept


def _collides(outs: list[str]) -> bool:
    """Two outputs equal but for case, or a file where another's folder is."""
    folded = [out.casefold() for out in outs]
    if len(set(folded)) != len(folded):
        return True
    files = set(folded)
    return any("/".join(out.split("/")[:depth]) in files for out in folded for depth in range(1, out.count("/") + 1))
