"""A Markdown report read as its reader sees it rendered: per question, its code blocks and prose.

A report hand-in (A5: "a single markdown file (.md) with the answers to Q1 and Q7, along with code
snippets for the remaining questions") is parsed as CommonMark (markdown-it-py), so that what is a
heading, a code block or a comment is what the instructor sees: a ``## Q4`` inside a fenced block or
an HTML comment is neither a heading nor an answer.  A question starts at any of the forms students
write: a heading (``## Q5: ...``, ``### Question 5``, ``# 5.`` is not one), or a paragraph opening with
``**Q5:**``, ``Q5.``, ``Q5)``, ``Question 5:`` or ``Exercise 5``.  Everything up to the next question
is its answer.  A question answered twice (two answers, each with code or words of its own) is
reported, and neither answer is chosen.

Students paste the question under its heading (``## Q5`` then ``> **Q5:** Carefully examine...``).
A label of the heading's own question before anything of the answer continues that answer, and text
that repeats the question (given the handout's ``questions``), before any code or answer, is the
question's text: kept apart (``Answer.quoted``), never the answer's words (issue 57).

This module only reads: it never runs or parses the code it finds (see the packs' splicers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise

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
    prose: str = ""  # its text outside code blocks and comments, the question's own text aside
    quoted: str = ""  # the question's text, pasted under its heading

    def empty(self) -> bool:
        """Whether it holds no code and no words of its own (the question's pasted text is not)."""
        return not self.code and not self.prose.strip()


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


#: a word of a question's text, for telling its pasted text from an answer
_WORD = re.compile(r"[a-z0-9_]+")
#: the share of a paragraph's word pairs found in the question's text that makes it the question's text
REPEATS = 0.8


def repeats(text: str, asked: str) -> bool:
    """Whether ``text`` (two words or more) is the question ``asked``, or a part of it, pasted: most of
    its word pairs are the question's.  An answer reuses a few of the question's words, not its pairs."""
    words = _WORD.findall(text.lower())
    if len(words) < 2:
        return False
    pairs = list(pairwise(words))
    theirs = set(pairwise(_WORD.findall(asked.lower())))
    return sum(pair in theirs for pair in pairs) >= REPEATS * len(pairs)


@dataclass
class _Reading:
    """One answer being read: its words so far, and where the question's pasted text goes."""

    answer: Answer
    words: list[str] = field(default_factory=list)
    quoted: list[str] = field(default_factory=list)

    def started(self) -> bool:
        return bool(self.answer.code) or any(w.strip() for w in self.words)

    def take(self, text: str, asked: str | None) -> None:
        """Text under the question: the question's own before anything of the answer, else words."""
        if asked is not None and not self.started() and repeats(text, asked):
            self.quoted.append(text)
        else:
            self.words.append(text)


def read_report(text: str, questions: Mapping[str, str] | None = None) -> Report:
    """Read a report: every question's code blocks and prose, and the problems a student must hear of.
    ``questions`` (question -> the handout's text of it) tells a pasted question from an answer."""
    tokens = MarkdownIt("commonmark").parse(text)
    asked = dict(questions or {})
    found: list[_Reading] = []
    unheaded: list[CodeBlock] = []
    current: _Reading | None = None
    for i, token in enumerate(tokens):
        line = (token.map[0] + 1) if token.map else 0
        if token.type == "inline":
            parent = tokens[i - 1].type if i else ""
            opened = _question(token.content, heading=parent == "heading_open")
            if opened is not None and parent in ("heading_open", "paragraph_open"):
                if current is None or current.answer.question != opened[0] or current.started():
                    current = _Reading(Answer(opened[0], line, opened[1]))
                    found.append(current)
                # else: the heading's own question labelled again before its answer (a pasted question)
                rest = token.content.split("\n", 1)[1] if "\n" in token.content else ""
                if parent == "paragraph_open":  # "**Q5:** the answer starts on the label's line"
                    label_line = token.content.split("\n", 1)[0]
                    after = _OPENING.split(label_line.lstrip(_EMPHASIS + ">"), maxsplit=1)[-1]
                    rest = (after.lstrip(_EMPHASIS + ":.)-–—") + "\n" + rest).strip()
                current.take(rest, asked.get(current.answer.question))
            elif current is not None:
                current.take(token.content, asked.get(current.answer.question))
        elif token.type in ("fence", "code_block"):
            block = CodeBlock(token.info.strip(), token.content, line)
            (current.answer.code if current is not None else unheaded).append(block)
    answers: dict[str, Answer] = {}
    problems: list[str] = []
    duplicated: list[str] = []
    by_question: dict[str, list[Answer]] = {}
    for reading in found:
        answer = reading.answer
        answer.prose = "\n".join(p for p in reading.words if p).strip()
        answer.quoted = "\n".join(p for p in reading.quoted if p).strip()
        by_question.setdefault(answer.question, []).append(answer)
    for question, same in sorted(by_question.items(), key=lambda kv: kv[1][0].line):
        held = [answer for answer in same if not answer.empty()]  # a label or paste alone answers nothing
        if len(held) <= 1:
            answers[question] = held[0] if held else same[0]
            continue
        same = held
        duplicated.append(question)
        lines = ", ".join(str(a.line) for a in same)
        problems.append(
            f"{question} is answered {len(same)} times (lines {lines}): none of them is graded; "
            "keep one answer per question"
        )
    if not found:
        problems.append("no question headings found (write each answer under a heading such as '## Q5')")
    return Report(answers, unheaded, problems, duplicated)
