"""`.pi/` materialisation decided from the listing (upstream-jobrun.md §3.4, §9.6)."""

from __future__ import annotations

import pytest

from pi_dispatch.core.piskills import TreeFile, UnreadableListing, classify, parse_listing, plan
from pi_dispatch.core.reasons import Reason

ACCEPTED = [
    ".pi/APPEND_SYSTEM.md",
    ".pi/skills/bug-fix/SKILL.md",
    ".pi/skills/bug_fix2/SKILL.md",
    ".pi/skills/bug-fix/notes.md",
    ".pi/skills/bug-fix/references/api.md",
    ".pi/skills/bug-fix/scripts/run.sh",
    ".pi/skills/bug-fix/nested/deeper/x.md",
    ".pi/skills/bug-fix/references/api.v2.md",
    ".pi/skills/bug-fix/console.md",
    ".pi/skills/bug-fix/nullable.md",
]
REFUSED = [
    ".pi/settings.json",
    ".pi/APPEND_SYSTEM.md.evil",
    ".pi/skills/bug-fix",
    ".pi/extensions/evil.ts",
    ".pi/skills/../SKILL.md",
    ".pi/skills/a.b/SKILL.md",
    ".pi/skills/good/./x.md",
    ".pi/skills/good/a//b.md",
    ".pi/skills/good/a\\b.md",
    ".pi/skills/good/a\0b.md",
    ".pi/skills/good/a\nb.md",
    ".pi/skills/good/.hidden",
    ".pi/skills/good/x.",
    ".pi/skills/good/CON",
    ".pi/skills/good/nul.md",
    ".pi/skills/good/COM1",
    ".pi/skills/good/lpt9.txt",
    ".pi/skills/good/a/b/c/d/e.md",
    ".pi/skills/good/" + "a" * 64 + "/" + "b" * 64 + "/" + "c" * 60 + ".md",
]


@pytest.mark.parametrize("path", ACCEPTED)
def test_accepted_paths(path: str) -> None:
    assert classify(path) is not None


@pytest.mark.parametrize("path", REFUSED)
def test_refused_paths(path: str) -> None:
    assert classify(path) is None


def test_classified_places() -> None:
    assert classify(".pi/skills/bug-fix/SKILL.md") == ("pi/skills/bug-fix/SKILL.md", "bug-fix")
    assert classify(".pi/APPEND_SYSTEM.md") == ("pi/APPEND_SYSTEM.md", None)


def listing(*entries: tuple[str, str, str]) -> bytes:
    return b"".join(f"{mode} blob {'a' * 40} {size}\t{path}".encode() + b"\0" for mode, size, path in entries)


def test_only_plain_files_are_kept() -> None:
    raw = listing(
        ("100644", "10", ".pi/skills/s/SKILL.md"),
        ("120000", "5", ".pi/skills/s/link.md"),
        ("100755", "5", ".pi/skills/s/run.md"),
        ("160000", "-", ".pi/skills/s/sub"),
    )
    placed = plan(parse_listing(raw))
    assert not isinstance(placed, Reason)
    assert [item.out for item in placed] == ["pi/skills/s/SKILL.md"]


def test_a_record_without_a_size_is_unreadable_and_names_no_path() -> None:
    with pytest.raises(UnreadableListing) as error:
        parse_listing(b"100644 blob " + b"a" * 40 + b"\t.pi/secret/path\0")
    assert "secret" not in str(error.value)


def test_a_skill_without_skill_md_is_dropped_and_a_nested_one_kept() -> None:
    files = [
        TreeFile("100644", "1", 3, ".pi/skills/lonely/notes.md"),
        TreeFile("100644", "2", 3, ".pi/skills/group/sub/SKILL.md"),
        TreeFile("100644", "3", 3, ".pi/skills/group/sub/x.md"),
    ]
    placed = plan(files)
    assert not isinstance(placed, Reason)
    assert {item.out for item in placed} == {"pi/skills/group/sub/SKILL.md", "pi/skills/group/sub/x.md"}


def files(*paths: str) -> list[TreeFile]:
    return [TreeFile("100644", "x", 1, f".pi/skills/s/{path}") for path in paths]


def skill(count: int, size: int = 1, name: str = "s") -> list[TreeFile]:
    files = [TreeFile("100644", "x", size, f".pi/skills/{name}/SKILL.md")]
    return files + [TreeFile("100644", "x", size, f".pi/skills/{name}/f{index}.md") for index in range(count - 1)]


def test_caps() -> None:
    assert plan(skill(64)) != Reason.PI_TOO_MANY_FILES
    assert plan(skill(65)) == Reason.PI_TOO_MANY_FILES
    many = [file for index in range(5) for file in skill(52, name=f"s{index}")]
    assert plan(many) == Reason.PI_TOO_MANY_FILES
    assert plan([TreeFile("100644", "x", 1048577, ".pi/APPEND_SYSTEM.md")]) == Reason.PI_FILE_TOO_LARGE
    assert plan(skill(9, size=1048576)) == Reason.PI_TOO_LARGE
    case = [
        *skill(1),
        TreeFile("100644", "x", 1, ".pi/skills/s/README.md"),
        TreeFile("100644", "x", 1, ".pi/skills/s/readme.md"),
    ]
    assert plan(case) == Reason.PI_PATH_COLLISION
    folder = [
        *skill(1),
        TreeFile("100644", "x", 1, ".pi/skills/s/Bar"),
        TreeFile("100644", "x", 1, ".pi/skills/s/bar/x.md"),
    ]
    assert plan(folder) == Reason.PI_PATH_COLLISION
    fine = [
        *skill(1),
        TreeFile("100644", "x", 1, ".pi/skills/s/bar.md"),
        TreeFile("100644", "x", 1, ".pi/skills/s/baz/x.md"),
    ]
    assert isinstance(plan(fine), list)
