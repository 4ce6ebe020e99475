"""A Markdown report read as its reader sees it rendered: per question, its code blocks and prose.

A report hand-in (A5: "a single markdown file (.md) with the answers to Q1 and Q7, along with code
snippets for the remaining questions") is parsed as CommonMark (markdown-it-py), so that what is a
heading, a code block or a comment is what the instructor sees: a ``## Q4`` inside a fenced block or
an HTML comment is neither a heading nor an answer.  A question starts at any of the forms students
write: a heading (``## Q5: ...``, ``### Question 5``, ``# 5.`` is not one), or a paragraph opening with
``**Q5:**``, ``Q5.``, ``Q5)``, ``Question 5:`` or ``Exercise 5``.  Everything up to the next question
is its answer.  A question answered twice is reported, and neither answer is chosen.

This module only reads: it never runs or parses the code it finds (see the packs' splicers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt

#: a question's opening words, after emphasis marks: "Q5", "Q 5", "Question 5", "Exercise 5", "Task 5"
_OPENING = re.compile(r"^(?:q|question|exercise|task)\s*(\d+)(?![0-9A-Za-z])", re.IGNORECASE)  # "Q5__" too
#: in a paragraph (not a heading) the number must be followed by a mark that ends a label: ``Q5:``,
#: ``Q5.``, ``Q5)``, ``Q5 -``, or the label is bold on its own (``**Q5**``); "Q5 asks..." is prose
_LABEL_END = re.compile(r"^\s*(?:[:.)\-–—]|\*\*|__|$)")
_EMPHASIS = "*_` \t"


@dataclass(frozen=True)
class CodeBlock:
    """One fenced or indented code block: its info string ("python", "" ...) and text."""

    info: str
    text: str
    line: int  # 1-based line of the report where the block starts


@dataclass
class Answer:
    """What the report says under one question's heading."""

    question: str  # "Q5"
    line: int  # 1-based line of its heading
    title: str  # the heading's text after the label ("Layer Distribution ...")
    code: list[CodeBlock] = field(default_factory=list)
    prose: str = ""  # its text outside code blocks and comments


@dataclass
class Report:
    """A report read: answers by question, code blocks under no question, and what went wrong."""

    answers: dict[str, Answer]
    unheaded: list[CodeBlock]  # code blocks before the first question's heading
    problems: list[str]  # each a sentence for the student: duplicates, empty report
    duplicated: list[str] = field(default_factory=list)  # questions answered more than once (none graded)

    def answer(self, question: str) -> Answer | None:
        return self.answers.get(question)


def _question(text: str, heading: bool) -> tuple[str, str] | None:
    """(``Q5``, title) when ``text`` opens a question, else None."""
    stripped = text.lstrip(_EMPHASIS + ">#")
    opening = _OPENING.match(stripped)
    if opening is None:
        return None
    rest = stripped[opening.end() :]
    if not heading and not _LABEL_END.match(rest):
        return None
    title = rest.lstrip(_EMPHASIS + ":.)-–—").split("\n", 1)[0].strip(_EMPHASIS)
    return f"Q{int(opening.group(1))}", title


def read_report(text: str) -> Report:
    """Read a report: every question's code blocks and prose, and the problems a student must hear of."""
    tokens = MarkdownIt("commonmark").parse(text)
    found: list[Answer] = []
    unheaded: list[CodeBlock] = []
    current: Answer | None = None
    prose: dict[int, list[str]] = {}
    for i, token in enumerate(tokens):
        line = (token.map[0] + 1) if token.map else 0
        if token.type == "inline":
            parent = tokens[i - 1].type if i else ""
            opened = _question(token.content, heading=parent == "heading_open")
            if opened is not None and parent in ("heading_open", "paragraph_open"):
                current = Answer(opened[0], line, opened[1])
                found.append(current)
                rest = token.content.split("\n", 1)[1] if "\n" in token.content else ""
                if parent == "paragraph_open":  # "**Q5:** the answer starts on the label's line"
                    label_line = token.content.split("\n", 1)[0]
                    after = _OPENING.split(label_line.lstrip(_EMPHASIS + ">"), maxsplit=1)[-1]
                    rest = (after.lstrip(_EMPHASIS + ":.)-–—") + "\n" + rest).strip()
                prose.setdefault(id(current), []).append(rest)
            elif current is not None:
                prose.setdefault(id(current), []).append(token.content)
        elif token.type in ("fence", "code_block"):
            block = CodeBlock(token.info.strip(), token.content, line)
            (current.code if current is not None else unheaded).append(block)
    answers: dict[str, Answer] = {}
    problems: list[str] = []
    duplicated: list[str] = []
    by_question: dict[str, list[Answer]] = {}
    for answer in found:
        answer.prose = "\n".join(p for p in prose.get(id(answer), []) if p).strip()
        by_question.setdefault(answer.question, []).append(answer)
    for question, same in sorted(by_question.items(), key=lambda kv: kv[1][0].line):
        if len(same) == 1:
            answers[question] = same[0]
            continue
        duplicated.append(question)
        lines = ", ".join(str(a.line) for a in same)
        problems.append(
            f"{question} is answered {len(same)} times (lines {lines}): none of them is graded; "
            "keep one answer per question"
        )
    if not found:
        problems.append("no question headings found (write each answer under a heading such as '## Q5')")
    return Report(answers, unheaded, problems, duplicated)
