"""systemd EnvironmentFile grammar: reading, every problem with its line, rendering that reads back exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_dispatch.config.envfile import parse_env_text, read_env_file, render_env, render_value


def test_grammar() -> None:
    text = (
        "# comment\n; also a comment\n\n"
        "PLAIN=a b  \n"
        "  INDENTED = value\n"
        'DOUBLE="x \\"y\\" \\\\ \\$HOME"\n'
        "SINGLE='no $expansion \\n here'\n"
        'MIXED=pre"quoted part"post\n'
        "CONTINUED=one\\\n two\n"
        "EMPTY=\n"
    )
    env = parse_env_text(text, "f")
    assert env.problems == []
    assert env.values == {
        "PLAIN": "a b",
        "INDENTED": "value",
        "DOUBLE": 'x "y" \\ $HOME',
        "SINGLE": "no $expansion \\n here",
        "MIXED": "prequoted partpost",
        "CONTINUED": "one two",
        "EMPTY": "",
    }


def test_every_problem_has_its_line() -> None:
    env = parse_env_text('A=1\nnot an assignment\n1BAD=x\nA=2\nQ="open\n', "/etc/pi/worker.env")
    messages = [str(problem) for problem in env.problems]
    assert any("line 2 is not KEY=VALUE" in m for m in messages)
    assert any("line 3 is not KEY=VALUE" in m for m in messages)
    assert any("A: is set twice (lines 1 and 4)" in m for m in messages)
    assert any("line 5: the quote is never closed" in m for m in messages)
    assert all("/etc/pi/worker.env" in m for m in messages)
    assert env.values["A"] == "2"  # systemd's last-wins, while still reported


def test_non_utf8_nul_and_missing_files(tmp_path: Path) -> None:
    latin = tmp_path / "latin.env"
    latin.write_bytes(b"PI_WORKER_NAME=mini1\nTZ=Europe/Z\xfcrich\n")
    assert "line 2 is not UTF-8 (byte 0xfc)" in str(read_env_file(latin).problems[0])
    nul = tmp_path / "nul.env"
    nul.write_bytes(b"A=1\x00\n")
    assert "NUL" in str(read_env_file(nul).problems[0])
    assert "cannot be read" in str(read_env_file(tmp_path / "missing.env").problems[0])


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "\x1b[31m"])
def test_render_refuses_control_characters(value: str) -> None:
    with pytest.raises(ValueError, match="control characters"):
        render_value(value)


def test_render_quotes_only_when_needed() -> None:
    assert render_value("prod:/opt/pi/r.sh,ci:/opt/pi/c.sh") == "prod:/opt/pi/r.sh,ci:/opt/pi/c.sh"
    assert render_value("a b") == '"a b"'
    assert render_value('$x"\\`') == '"\\$x\\"\\\\\\`"'


keys = st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True)
values = st.text(st.characters(min_codepoint=0x20, exclude_characters="\x7f"), max_size=40)


@given(st.dictionaries(keys, values, max_size=8))
def test_render_then_read_round_trips(env: dict[str, str]) -> None:
    parsed = parse_env_text(render_env(env, "header\nsecond line"), "rendered")
    assert parsed.problems == []
    assert parsed.values == env
