"""The `name:/absolute/path,...` grammar of PI_SECRET_PROFILES, PI_WAIT_PROFILES and PI_EGRESS_PROFILES.

Used alike by the settings loader, the schema's format check, the inventory renderer and the audit, so an
env file the role writes is read back exactly as the worker reads it. Every problem in a value is reported,
not just the first. A value is parsed once however many checks read it (the grammar does not depend on
which variable holds it). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Final, Literal

from pi_dispatch.core.errors import Problem
from pi_dispatch.core.names import PROFILE_NAME_RE

ProfileKind = Literal["secret", "wait", "egress"]
VARIABLE: Final[dict[ProfileKind, str]] = {
    "secret": "PI_SECRET_PROFILES",
    "wait": "PI_WAIT_PROFILES",
    "egress": "PI_EGRESS_PROFILES",
}
SCRIPT_ROLE: Final[dict[ProfileKind, str]] = {"secret": "resolver", "wait": "check", "egress": "allowlist"}
# A job that binds secrets without naming a profile is resolved through this one (the reference's rule).
DEFAULT_SECRET_PROFILE: Final = "default"  # noqa: S105 - a profile name, not a secret
# More would make every beat's `caps` field and every routing decision needlessly large.
MAX_PROFILES: Final = 256

# An absolute script path as the reference accepts it: POSIX, a Windows drive root, or a UNC path.
ABSOLUTE_SCRIPT: Final = r"(?:/|[A-Za-z]:[/\\]|\\\\)[^,\x00-\x1f\x7f]*"
_ENTRY: Final = rf"[ \t]*|[ \t]*{PROFILE_NAME_RE.pattern}[ \t]*:[ \t]*{ABSOLUTE_SCRIPT}"
# The whole value, as far as a regular expression can say it (names once and the count are checked by parsing).
TABLE_PATTERN: Final = rf"(?:{_ENTRY})(?:,(?:{_ENTRY}))*"
_WINDOWS_ABSOLUTE: Final = re.compile(r"[A-Za-z]:[/\\]|\\\\")
# A newline would start a new variable in an env file; no other control character belongs in a path either.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

Issue = Literal["shape", "name", "twice", "relative"]


def is_absolute_path(path: str) -> bool:
    """Absolute on POSIX, or a Windows drive root or UNC path, as the reference accepts both."""
    return path.startswith("/") or _WINDOWS_ABSOLUTE.match(path) is not None


@dataclass(frozen=True)
class ParsedProfiles:
    """A parsed profile table and everything that was wrong with the raw value."""

    table: Mapping[str, str]
    problems: list[Problem]


@lru_cache(maxsize=64)
def _parse(raw: str) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, Issue], ...]]:
    """The entries of a value in order, and each refused entry with its name and what is wrong with it."""
    table: dict[str, str] = {}
    issues: list[tuple[str, str, Issue]] = []
    for entry in (part.strip() for part in raw.split(",")):
        if entry == "":
            continue
        name, colon, path = entry.partition(":")
        name, path = name.strip(), path.strip()
        if not colon or name == "":
            issues.append((entry, name, "shape"))
        elif PROFILE_NAME_RE.fullmatch(name) is None:
            issues.append((entry, name, "name"))
        elif name in table:
            issues.append((entry, name, "twice"))
        elif path == "" or not is_absolute_path(path):
            issues.append((entry, name, "relative"))
        else:
            table[name] = path
    return tuple(table.items()), tuple(issues)


def _problem(kind: ProfileKind, source: str, entry: str, name: str, issue: Issue) -> Problem:
    role = SCRIPT_ROLE[kind]
    subject = f"{VARIABLE[kind]} entry {entry!r}"
    if issue == "shape":
        return Problem(
            subject, "entries must be name:/absolute/path", source, f"write it as <name>:/absolute/path/to/{role}"
        )
    if issue == "name":
        return Problem(
            subject,
            f"the name {name!r} may use letters, digits, dot, dash and underscore only",
            source,
            "rename the profile",
        )
    if issue == "twice":
        return Problem(subject, f"declares {name!r} twice", source, "keep one entry per profile name")
    return Problem(
        subject,
        f"the {role} needs an ABSOLUTE path",
        source,
        f"give the full path of the {role} {'file' if kind == 'egress' else 'script'}, starting with /",
    )


def parse_profiles(raw: str | None, kind: ProfileKind, source: str = "environment") -> ParsedProfiles:
    """Parse one profile variable. Unset or blank is an empty table; entries split on the first colon."""
    if raw is None or raw.strip() == "":
        return ParsedProfiles(MappingProxyType({}), [])
    if _CONTROL.search(raw):
        return ParsedProfiles(
            MappingProxyType({}),
            [Problem(VARIABLE[kind], "holds a control character", source, "keep the value on one line")],
        )
    entries, issues = _parse(raw)
    found = [_problem(kind, source, entry, name, issue) for entry, name, issue in issues]
    if len(entries) > MAX_PROFILES:
        found.append(
            Problem(
                VARIABLE[kind], f"declares {len(entries)} profiles; at most {MAX_PROFILES}", source, "declare fewer"
            )
        )
    return ParsedProfiles(MappingProxyType(dict(entries)), found)


def render_profiles(table: Mapping[str, str]) -> str:
    """The env-file value for a profile table, in declaration order (the inverse of parse_profiles)."""
    return ",".join(f"{name}:{path}" for name, path in table.items())
