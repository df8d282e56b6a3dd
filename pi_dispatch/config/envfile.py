"""Env files in systemd's `EnvironmentFile=` grammar: read them exactly, render them byte-stably.

python-dotenv (what pydantic-settings reads .env files with) is a different language: it expands
`${VAR}`, accepts `export`, and reads quotes differently, so a file it accepts can mean something else
to systemd. This reader follows systemd: `KEY=VALUE` lines, `#` and `;` comments, single quotes literal,
double quotes with backslash escapes, a trailing backslash continuing the line, no expansion. Every
problem is reported with its line, never the value of a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pi_dispatch.core.errors import Problem

KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNQUOTED_SAFE: Final = re.compile(r"[A-Za-z0-9_@%+=:,./-]*")
_DOUBLE_ESCAPES: Final = {'"': '"', "\\": "\\", "$": "$", "`": "`", "n": "\n", "t": "\t"}


@dataclass
class EnvFile:
    """The variables a file sets (last assignment wins, as in systemd) and what was wrong with it."""

    source: str
    values: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def _unquote(text: str, line_number: int, key: str, env: EnvFile) -> str:
    """A value as systemd reads it: quoted parts concatenate, unquoted runs are taken as written."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "'\"":
            end = index + 1
            chunk: list[str] = []
            while end < len(text) and text[end] != char:
                if char == '"' and text[end] == "\\" and end + 1 < len(text):
                    end += 1
                    chunk.append(_DOUBLE_ESCAPES.get(text[end], "\\" + text[end]))
                else:
                    chunk.append(text[end])
                end += 1
            if end >= len(text):
                env.problems.append(
                    Problem(key, f"line {line_number}: the quote is never closed", env.source, "close the quote")
                )
                return "".join(out)
            out.append("".join(chunk))
            index = end + 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


def parse_env_text(text: str, source: str) -> EnvFile:
    env = EnvFile(source)
    lines = text.split("\n")
    seen_at: dict[str, int] = {}
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number].lstrip()
        number += 1
        while line.endswith("\\") and number < len(lines):
            line = line[:-1] + lines[number]
            number += 1
        if line.strip() == "" or line.startswith(("#", ";")):
            continue
        key, equals, raw = line.partition("=")
        key = key.strip()
        if not equals or not KEY.fullmatch(key):
            shown = key if KEY.fullmatch(key) else "a line"
            env.problems.append(
                Problem(
                    shown,
                    f"line {start} is not KEY=VALUE",
                    source,
                    "write NAME=value, or start the line with # to comment it",
                )
            )
            continue
        if key in seen_at:
            env.problems.append(
                Problem(
                    key,
                    f"is set twice (lines {seen_at[key]} and {start}); systemd would use the last",
                    source,
                    "keep one",
                )
            )
        seen_at[key] = start
        env.values[key] = _unquote(raw.strip(), start, key, env)
    return env


def read_env_file(path: Path) -> EnvFile:
    """Read and parse a file; unreadable or non-UTF-8 content is a problem, not an exception."""
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        return EnvFile(
            source,
            problems=[
                Problem(source, f"cannot be read ({error.strerror})", source, "check the path and its permissions")
            ],
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return EnvFile(
            source,
            problems=[
                Problem(
                    source,
                    f"line {line} is not UTF-8 (byte 0x{data[error.start]:02x})",
                    source,
                    "save the file as UTF-8",
                )
            ],
        )
    if "\x00" in text:
        return EnvFile(source, problems=[Problem(source, "contains a NUL byte", source, "save it as a text file")])
    return parse_env_text(text, source)


def render_value(value: str) -> str:
    """One value as systemd will read it back: bare when safe, otherwise double-quoted and escaped."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise ValueError("a value may not hold control characters (a newline would start a new variable)")
    if _UNQUOTED_SAFE.fullmatch(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return f'"{escaped}"'


def render_env(values: Mapping[str, str], header: str = "") -> str:
    """A whole file, in the order given, each value rendered so `parse_env_text` reads it back exactly."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for key, value in values.items():
        if not KEY.fullmatch(key):
            raise ValueError(f"{key!r} is not an environment variable name")
        lines.append(f"{key}={render_value(value)}")
    return "\n".join(lines) + "\n"
