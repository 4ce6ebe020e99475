"""Checks of the non-code deliverables: the diagram and the written answers.

Nothing here opens a file with a parser that could be exploited: formats are recognised by their
magic bytes and a few fixed-offset fields, and answers are read from a fixed form, field by field.
No point is ever earned by a pattern found in prose: "not 20", "20 or 10" and "maybe 20" are not
the number 20.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.filenames import entries_named
from grader.rubric import WrittenQuestion

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PDF_TAIL_BYTES = 2048  # readers look for %%EOF this close to the end


def find_deliverable(root: Path, candidates: Sequence[str]) -> Path | None:
    """The first candidate that is a regular file under ``root``; a candidate with ``*`` is a pattern
    (intake keeps the file it matched under its own name)."""
    for name in candidates:
        for path in entries_named(root, name):
            if path.is_file():
                return path
    return None


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
    points: float  # fields earned plus the explanation's provisional points
    max_points: float
    feedback: str
    provisional: float = 0.0  # of ``points``: the explanation's, until an instructor reviews it


@dataclass(frozen=True)
class WrittenCheck:
    """The written answers as found: read from the answer form, waiting for a person, or missing."""

    file: str | None  # the candidate found, relative to the submission root
    pending: bool  # no form to read (a PDF, or prose only): an instructor marks it
    message: str
    questions: tuple[QuestionMark, ...]


#: A line that opens an answer: "Q1", "## Q1.", "**Question 2**", "> q3:" ...
_HEADING = re.compile(r"^[\s#>*_-]*(?:q|question)\s*(\d+)\b", re.IGNORECASE | re.MULTILINE)
#: The answer form: a fenced block whose info string is ``answers``, one ``field: value`` per line.
_FORM = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*answers[ \t]*\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_SCALAR = re.compile(rf"^{_NUMBER}$")
#: ``[0, 10, 1]``, ``(6,)``, ``tensor([20.])``, ``torch.Size([6])``: numbers only, nothing else
_LIST = re.compile(rf"^(?:(?:torch\.)?(?:tensor|Size)\()?[\[(]\s*({_NUMBER}(?:\s*,\s*{_NUMBER})*)?\s*,?\s*[\])]\)?$")
MIN_EXPLANATION_WORDS = 5  # the template's label ("Why:") is one


def answer_sections(text: str) -> dict[str, str]:
    """``{"Q1": text, ...}``: each answer runs from its heading to the next one (first one wins).  The
    heading's own question labelled again right under it (``## Q3`` then ``> **Q3:** ...``, the question
    pasted) opens nothing: the answer runs on (issue 57)."""
    headings: list[re.Match[str]] = []
    for heading in _HEADING.finditer(text):
        if headings and int(heading.group(1)) == int(headings[-1].group(1)):
            line_end = text.find("\n", headings[-1].end())
            if line_end < 0 or not text[line_end : heading.start()].strip():
                continue
        headings.append(heading)
    sections: dict[str, str] = {}
    for i, heading in enumerate(headings):
        start = text.find("\n", heading.end())  # the heading's own line is the question's title
        end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        sections.setdefault(f"Q{int(heading.group(1))}", text[start:end] if 0 <= start < end else "")
    return sections


def read_form(section: str) -> tuple[dict[str, str] | None, str]:
    """(fields of the section's ``answers`` block, or None without one; the prose around it)."""
    form = _FORM.search(section)
    prose = _COMMENT.sub(" ", section if form is None else section[: form.start()] + section[form.end() :])
    if form is None:
        return None, prose
    fields: dict[str, str] = {}
    for line in form.group(2).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            fields.setdefault(key.strip().lower(), value.strip())
    return fields, prose


def parse_value(text: str) -> tuple[float, ...] | None:
    """The numbers a field's value states, or None when it states anything else: a word, a second
    option, a negation or a hedge makes the field unreadable, so it earns nothing."""
    text = text.strip().rstrip(".").strip()
    if _SCALAR.match(text):
        return (float(text),)
    listed = _LIST.match(text)
    if listed is None:
        return None
    return tuple(float(x) for x in re.findall(_NUMBER, listed.group(1) or ""))


def field_right(answer: str, expected: float | tuple[float, ...]) -> bool:
    """A number equals a number, or a one-element list of it; a list equals a list element-wise."""
    got = parse_value(answer)
    want = expected if isinstance(expected, tuple) else (expected,)
    return got is not None and len(got) == len(want) and all(abs(g - w) <= 1e-9 for g, w in zip(got, want, strict=True))


def check_advice(root: Path, candidates: Sequence[str], title: str, expect: Sequence[str]) -> str:
    """One line for an advisory check of a deliverable: what it confirms, or what it lacks."""
    path = find_deliverable(root, candidates)
    if path is None:
        return f"{title}: not checked, {_either(candidates)} not handed in"
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    missing = [regex for regex in expect if not any(re.search(regex, line) for line in lines)]
    if not missing:
        return f"{title}: yes ({path.name})"
    return f"{title}: not shown in {path.name} (no line matches {', '.join(repr(m) for m in missing)})"


def check_written(root: Path, candidates: Sequence[str], key: Sequence[WrittenQuestion]) -> WrittenCheck:
    """Mark the answers from their answer form: the fields share what ``explain`` leaves, and an
    explanation of a few words earns ``explain`` provisionally.  Without any form nothing is read
    from prose: the file waits for an instructor."""
    path = find_deliverable(root, candidates)
    if path is None:
        return _unmarked(None, False, f"{_either(candidates)} missing", key, "not answered")
    file = str(path.relative_to(root))
    if path.suffix.lower() != ".md":
        message = f"{path.name} will be marked by an instructor (only Markdown answer forms are read automatically)"
        return _unmarked(file, True, message, key, "pending review")
    sections = answer_sections(path.read_text(encoding="utf-8", errors="replace"))
    forms = {qid: read_form(text) for qid, text in sections.items()}
    if not any(fields is not None for fields, _ in forms.values()):
        if not any(sections.get(question.id, "").split() for question in key):  # silence waits for nobody
            headings = ", ".join(f"'## {question.id}'" for question in key)
            return _unmarked(file, False, f"{path.name}: no answer found under {headings}", key, "no answer found")
        message = (
            f"{path.name} has no answer form (a fenced block opened with ```answers under each question's "
            "heading, as in the template): an instructor will mark it"
        )
        return _unmarked(file, True, message, key, "pending review")
    marks = []
    for question in key:
        fields, prose = forms.get(question.id, (None, ""))
        marks.append(_mark(question, fields, prose))
    return WrittenCheck(file, False, f"{path.name}: answer form read", tuple(marks))


def _mark(question: WrittenQuestion, fields: dict[str, str] | None, prose: str) -> QuestionMark:
    if fields is None:
        hint = f"no answer form found under a '## {question.id}' heading (see the template)"
        return QuestionMark(question.id, 0.0, question.points, hint)
    share = (question.points - question.explain) / len(question.fields)
    wrong, unreadable, missing = [], [], []
    for name, expected in question.fields:
        answer = fields.get(name.lower())
        if answer is None or not answer:
            missing.append(name)
        elif parse_value(answer) is None:
            unreadable.append(f"{name} ({answer[:40]!r} is not a number or a list of numbers)")
        elif not field_right(answer, expected):
            wrong.append(name)
    right = len(question.fields) - len(wrong) - len(unreadable) - len(missing)
    notes = [f"{right}/{len(question.fields)} fields right"]
    notes += [f"wrong: {', '.join(wrong)}"] if wrong else []
    notes += [f"unreadable: {'; '.join(unreadable)}"] if unreadable else []
    notes += [f"missing: {', '.join(missing)}"] if missing else []
    provisional = 0.0
    if question.explain:
        if len(prose.split()) >= MIN_EXPLANATION_WORDS:
            provisional = question.explain
            notes.append(f"explanation: {question.explain:g} point(s) provisional until an instructor reads it")
        else:
            notes.append("explanation: none found (write it under the answers block)")
    points = round(right * share + provisional, 2)
    return QuestionMark(question.id, points, question.points, "; ".join(notes), provisional)


def _unmarked(file: str | None, pending: bool, message: str, key: Sequence[WrittenQuestion], why: str) -> WrittenCheck:
    return WrittenCheck(file, pending, message, tuple(QuestionMark(q.id, 0.0, q.points, why) for q in key))
