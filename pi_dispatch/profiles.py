"""The `name:/absolute/path,...` grammar of PI_SECRET_PROFILES and PI_WAIT_PROFILES.

Used alike by the settings loader, the inventory renderer and the audit, so an env file the role
writes is read back exactly as the worker reads it. Every problem in a value is reported, not just the
first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from pi_dispatch.errors import Problem
from pi_dispatch.names import PROFILE_NAME_RE

ProfileKind = Literal["secret", "wait"]
VARIABLE: Final[dict[ProfileKind, str]] = {"secret": "PI_SECRET_PROFILES", "wait": "PI_WAIT_PROFILES"}
SCRIPT_ROLE: Final[dict[ProfileKind, str]] = {"secret": "resolver", "wait": "check"}

_WINDOWS_ABSOLUTE: Final = re.compile(r"[A-Za-z]:[/\\]|\\\\")


def is_absolute_path(path: str) -> bool:
    """Absolute on POSIX, or a Windows drive root or UNC path, as the reference accepts both."""
    return path.startswith("/") or _WINDOWS_ABSOLUTE.match(path) is not None


@dataclass(frozen=True)
class ParsedProfiles:
    """A parsed profile table and everything that was wrong with the raw value."""

    table: dict[str, str]
    problems: list[Problem]


def parse_profiles(raw: str | None, kind: ProfileKind, source: str = "environment") -> ParsedProfiles:
    """Parse one profile variable. Unset or blank is an empty table; entries split on the first colon."""
    variable = VARIABLE[kind]
    role = SCRIPT_ROLE[kind]
    table: dict[str, str] = {}
    problems: list[Problem] = []
    if raw is None or raw.strip() == "":
        return ParsedProfiles(table, problems)

    def refuse(entry: str, message: str, fix: str) -> None:
        problems.append(Problem(f"{variable} entry {entry!r}", message, source, fix))

    for entry in (part.strip() for part in raw.split(",")):
        if entry == "":
            continue
        name, colon, path = entry.partition(":")
        name, path = name.strip(), path.strip()
        if not colon or name == "":
            refuse(entry, "entries must be name:/absolute/path", f"write it as <name>:/absolute/path/to/{role}")
            continue
        if PROFILE_NAME_RE.fullmatch(name) is None:
            refuse(
                entry, f"the name {name!r} may use letters, digits, dot, dash and underscore only", "rename the profile"
            )
            continue
        if name in table:
            refuse(entry, f"declares {name!r} twice", "keep one entry per profile name")
            continue
        if path == "" or not is_absolute_path(path):
            refuse(
                entry, f"the {role} needs an ABSOLUTE path", f"give the full path of the {role} script, starting with /"
            )
            continue
        table[name] = path
    return ParsedProfiles(table, problems)


def render_profiles(table: Mapping[str, str]) -> str:
    """The env-file value for a profile table, in declaration order (the inverse of parse_profiles)."""
    return ",".join(f"{name}:{path}" for name, path in table.items())
