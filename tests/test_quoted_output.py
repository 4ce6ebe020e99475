"""What a submission prints stays small in every output (issue 24): the text quoted from it
(messages, captured output) is clipped per case and per grading, and the cut is said in the text."""

from __future__ import annotations

from grader.limits import Limits


def test_lines_line_length_and_bytes_are_bounded_and_the_cut_is_said() -> None:
    clip = Limits(quoted_lines=3, quoted_line_chars=10, quoted_case_kb=1, quoted_total_kb=4).clipper()
    text = clip("a" * 25 + "\nb\nc\nd\ne")
    kept, note = text.rsplit("\n", 1)
    assert kept.splitlines() == ["a" * 10 + " [...]", "b", "c"]
    assert note == "[output limit: 2 more lines left out; 1 line(s) cut at 10 characters]"
    big = clip("x\n" * 3000)  # three short lines: the line count binds first
    assert big.startswith("x\nx\nx\n[output limit: 2997 more lines left out]")


def test_a_grading_quotes_at_most_its_total_however_many_cases_fail() -> None:
    clip = Limits(quoted_lines=1000, quoted_line_chars=100, quoted_case_kb=1, quoted_total_kb=4).clipper()
    texts = [clip(("y" * 99 + "\n") * 40) for _ in range(10)]  # 4 KB each asked for, 1 KB kept each
    sizes = [len(t.rsplit("\n[output limit", 1)[0].encode()) for t in texts]
    assert sizes[:4] == [1024] * 4 and sizes[4:] == [0] * 6
    assert all("more bytes left out (at most 1024 per case, 4096 in all)" in t for t in texts)
    assert clip("") == ""  # nothing to quote costs nothing and says nothing


def test_the_same_texts_are_clipped_the_same_way() -> None:
    texts = [("z" * 3000 + "\n") * 5, "short", "é" * 2000]
    clippers = [Limits(quoted_case_kb=1, quoted_total_kb=2).clipper() for _ in range(2)]
    runs = [[clip(t) for t in texts] for clip in clippers]
    assert runs[0] == runs[1]
    assert all(t.encode("utf-8") for t in runs[0])  # a multi-byte character cut in half is dropped whole
