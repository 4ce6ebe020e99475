"""Checks of the non-code deliverables: the diagram and the written answers.

Nothing here opens a file with a parser that could be exploited: formats are recognised by their
magic bytes and a few fixed-offset fields, and answers are matched with the rubric's regexes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.rubric import WrittenQuestion

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PDF_TAIL_BYTES = 2048  # readers look for %%EOF this close to the end


def find_deliverable(root: Path, candidates: Sequence[str]) -> Path | None:
    """The first candidate that is a regular file under ``root``."""
    return next((root / name for name in candidates if (root / name).is_file()), None)


def _either(candidates: Sequence[str]) -> str:
    return " or ".join(candidates)


def check_diagram(root: Path, candidates: Sequence[str]) -> tuple[bool, str]:
    """Whether a candidate exists and really is what its extension says (PDF or PNG), and why not."""
    path = find_deliverable(root, candidates)
    if path is None:
        return False, f"{_either(candidates)} missing"
    with path.open("rb") as f:
        head = f.read(32)
        f.seek(max(0, path.stat().st_size - _PDF_TAIL_BYTES))
        tail = f.read()
    name = path.name
    if name.lower().endswith(".pdf"):
        if not head.startswith(b"%PDF-"):
            return False, f"{name} is not a PDF (it does not start with %PDF-): export it again as PDF"
        if b"%%EOF" not in tail:
            return False, f"{name} looks truncated (no %%EOF at its end): export it again"
        return True, f"{name} is a PDF ({path.stat().st_size // 1024} KiB)"
    if not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return False, f"{name} is not a PNG image: export it again as PNG"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if width == 0 or height == 0:
        return False, f"{name} is an empty PNG ({width}x{height})"
    return True, f"{name} is a {width}x{height} PNG"


@dataclass(frozen=True)
class QuestionMark:
    id: str
    points: float
    max_points: float
    feedback: str


@dataclass(frozen=True)
class WrittenCheck:
    """The written answers as found: marked automatically (Markdown), pending (PDF) or missing."""

    file: str | None  # the candidate found, relative to the submission root
    pending: bool  # a PDF: an instructor marks it
    message: str
    questions: tuple[QuestionMark, ...]


#: A line that opens an answer: "Q1", "## Q1.", "**Question 2**", "> q3:" ...
_HEADING = re.compile(r"^[\s#>*_-]*(?:q|question)\s*(\d+)\b", re.IGNORECASE | re.MULTILINE)
_MARKDOWN_MARKS = re.compile(r"[*`_|]")


def normalize(text: str) -> str:
    """What answer regexes see: lowercase, markdown marks (* ` _ |) removed, whitespace collapsed."""
    return " ".join(_MARKDOWN_MARKS.sub(" ", text.lower()).split())


def answer_sections(text: str) -> dict[str, str]:
    """``{"Q1": text, ...}``: each answer runs from its heading to the next one (first one wins)."""
    headings = list(_HEADING.finditer(text))
    sections: dict[str, str] = {}
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        sections.setdefault(f"Q{int(heading.group(1))}", text[heading.end() : end])
    return sections


def check_written(root: Path, candidates: Sequence[str], key: Sequence[WrittenQuestion]) -> WrittenCheck:
    """Mark the answers against the rubric's key: each ``expect`` entry earns an equal share."""
    path = find_deliverable(root, candidates)
    if path is None:
        return _unmarked(None, False, f"{_either(candidates)} missing", key, "not answered")
    file = str(path.relative_to(root))
    if path.suffix.lower() != ".md":
        message = (
            f"{path.name} will be marked by an instructor (only Markdown answers are checked automatically)"
        )
        return _unmarked(file, True, message, key, "pending review")
    sections = answer_sections(path.read_text(encoding="utf-8", errors="replace"))
    marks = []
    for question in key:
        if question.id not in sections:
            hint = f"no answer found: start it with a heading line such as '## {question.id}'"
            marks.append(QuestionMark(question.id, 0.0, question.points, hint))
            continue
        answer = normalize(sections[question.id])
        missed = [c.describe for c in question.expect if not any(re.search(rx, answer) for rx in c.any_of)]
        share = (len(question.expect) - len(missed)) / len(question.expect)
        feedback = "correct" if not missed else "not found in your answer: " + "; ".join(missed)
        marks.append(QuestionMark(question.id, round(question.points * share, 2), question.points, feedback))
    return WrittenCheck(file, False, f"{path.name} checked automatically", tuple(marks))


def _unmarked(
    file: str | None, pending: bool, message: str, key: Sequence[WrittenQuestion], why: str
) -> WrittenCheck:
    return WrittenCheck(file, pending, message, tuple(QuestionMark(q.id, 0.0, q.points, why) for q in key))
