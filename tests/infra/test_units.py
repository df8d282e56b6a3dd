"""How a unit starts the worker and the receiver: only those forms skip the full command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_dispatch.infra.units import unit_invocation


@pytest.mark.parametrize("command", ["worker", "receiver"])
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ([], (None,)),
        (["--env-file", "/etc/pi-dispatch/unit.env"], (Path("/etc/pi-dispatch/unit.env"),)),
        (["--env-file=/etc/w.env"], (Path("/etc/w.env"),)),
        (["--help"], None),  # the full command line explains
        (["--env-file"], None),
        (["--env-file", "--help"], None),
        (["--env-file="], None),
        (["--envfile", "x"], None),
        (["check"], None),
        (["serve", "--env-file", "x"], None),
    ],
)
def test_only_the_ways_a_unit_starts_a_command_skip_the_command_line(
    command: str, arguments: list[str], expected: tuple[Path | None] | None
) -> None:
    assert unit_invocation([command, *arguments], command) == expected


@pytest.mark.parametrize("arguments", [[], ["hosts"], ["receiver"], ["worker", "x"], ["receiver", "--env-file", "x"]])
def test_another_command_is_not_the_one_asked_about(arguments: list[str]) -> None:
    assert unit_invocation(arguments, "worker") is None
