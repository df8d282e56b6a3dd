"""A job's output as the worker keeps it: masked in every form, split anywhere, capped with a marker, by attempt."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from pi_dispatch.worker.run.output import (
    MASK,
    AttemptOutput,
    Capped,
    Masker,
    read_attempt_output,
    secret_forms,
)

SECRET = "s3cr3t/value+with=odd?chars"


def masked(secrets: tuple[str, ...], *chunks: bytes) -> bytes:
    masker = Masker(secrets)
    return b"".join(masker.feed(chunk) for chunk in chunks) + masker.flush()


def test_every_form_of_a_secret_is_masked() -> None:
    raw = SECRET.encode()
    forms = [raw, base64.b64encode(raw), base64.urlsafe_b64encode(raw), base64.b64encode(raw).rstrip(b"=")]
    forms.append(quote(SECRET, safe="").encode())
    text = b"".join(b"2026-12-01T00:00:00Z form " + form + b" end\n" for form in forms)
    out = masked((SECRET,), text)
    assert out.count(MASK) == len(forms)
    assert not any(form in out for form in forms)


def test_a_secret_of_many_lines_is_masked_line_by_line() -> None:
    out = masked(("first-line\nsecond-line\nab",), b"t first-line\nt second-line\nt ab\n")
    assert out == b"t ***\nt ***\nt ab\n"  # a two-letter line is a word, not a secret


def test_text_without_secrets_passes_unchanged_and_nothing_is_held_back() -> None:
    masker = Masker(())
    assert masker.feed(b"partial line without end") == b"partial line without end"
    assert masker.flush() == b""


def test_a_whole_line_is_shown_at_once_while_an_unfinished_one_waits_for_its_end() -> None:
    masker = Masker((SECRET,))
    assert masker.feed(b"tick 1\n") == b"tick 1\n"  # a follower sees the line now
    assert masker.feed(b"half of " + SECRET[:5].encode()) == b""
    assert masker.feed(SECRET[5:].encode() + b" done\n") == b"half of *** done\n"


@given(
    before=st.binary(max_size=200).filter(lambda data: SECRET.encode() not in data),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_a_secret_split_across_chunks_anywhere_is_still_masked(before: bytes, cuts: list[int]) -> None:
    text = before + b" " + SECRET.encode() + b" and " + base64.b64encode(SECRET.encode()) + b"\n" + before
    points = sorted({min(cut, len(text)) for cut in cuts})
    chunks = [text[start:end] for start, end in zip([0, *points], [*points, len(text)], strict=True)]
    out = masked((SECRET,), *chunks)
    assert SECRET.encode() not in out and base64.b64encode(SECRET.encode()) not in out
    assert out == masked((SECRET,), text)


def test_empty_secrets_mask_nothing() -> None:
    assert secret_forms(["", ""]) == set()


def sink(path: Path, file_cap: int, store_cap: int | None, secrets: tuple[str, ...] = ()) -> AttemptOutput:
    kept = AttemptOutput(path, "attempt=1 host=mini1", Masker(secrets), Capped(file_cap),
                         None if store_cap is None else Capped(store_cap), clock=lambda: "T")  # fmt: skip
    kept.open()
    return kept


def test_each_line_is_stamped_with_when_it_arrived_however_the_chunks_fall(tmp_path: Path) -> None:
    out = sink(tmp_path / "job.log", 1 << 20, 1 << 20)
    for chunk in (b"one\ntw", b"o\n", b"\nthree"):
        out.write(chunk)
    out.close()
    assert out.pending() == b"T one\nT two\nT \nT three"


def test_past_a_cap_output_is_counted_and_a_marker_says_how_much(tmp_path: Path) -> None:
    out = sink(tmp_path / "job.log", 10, 4)
    out.write(b"0123456789abcdef\n")  # 19 bytes once stamped
    stored = out.pending()
    out.close()
    assert stored == b"T 01"
    text = (tmp_path / "job.log").read_bytes()
    assert text.startswith(b"#pi-dispatch attempt=1 host=mini1\nT 01234567#pi-dispatch dropped=9 bytes")
    assert b"PI_JOB_LOG_MB" in text
    marker = out.pending()  # the store's copy ends with its own marker
    assert b"dropped=15 bytes" in marker and b"PI_JOB_LOG_STORE_KB" in marker


def test_each_attempt_is_read_back_from_its_own_part_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gh-1.log"
    for attempt, line in ((1, b"first run\n"), (2, b"second run\n")):
        kept = AttemptOutput(
            path, f"attempt={attempt} host=mini1", Masker(()), Capped(1 << 20), None, clock=lambda: "T"
        )
        kept.open()
        kept.write(line)
        kept.close()
    assert read_attempt_output(path, 1) == b"T first run\n"
    assert read_attempt_output(path, 2) == b"T second run\n"
    assert read_attempt_output(path, None) == b"T second run\n"
    assert read_attempt_output(path, 3) is None
    assert read_attempt_output(tmp_path / "none.log", None) is None
    assert path.stat().st_mode & 0o777 == 0o600
