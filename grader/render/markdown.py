"""``summary.md``: the readable report (also the GitHub step summary and Gradescope's output).

Text that may come from student code (case messages, finding messages, quoted lines) is escaped
or fenced so that it cannot turn into links, HTML or table columns.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

from grader.render import (
    STATUS_LABELS,
    append_github_file,
    chosen_text,
    earned_full,
    fmt_points,
    is_bonus,
    isolation_off,
    late_text,
    score_line,
    submitted_text,
    task_items,
)
from grader.results import CaseOutcome, Finding, GradeResult, ItemResult, ItemStatus
from grader.text import valid_utf8

#: GitHub refuses a step summary over 1 MiB.
STEP_SUMMARY_LIMIT = 1024 * 1024

_INLINE_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
#: ``:`` too: a line starting ``::`` would be a workflow command where this text reaches a CI log
_LINE_START_SPECIAL = re.compile(r"^(\s*)([#>+\-=:]|\d+[.)])", re.MULTILINE)


def render_markdown(result: GradeResult, *, details: bool = True) -> str:
    """The whole report; ``details=False`` leaves out the item table and per-item sections
    (Gradescope shows those as its own tests)."""
    blocks = [f"# Grading report: {escape(result.assignment)}", f"**{score_line(result)}**"]
    if result.status == "error":
        blocks.append(
            f"**The grader could not finish:** {escape(result.error or 'unknown error')}. "
            "This is a problem with the grader, not with your submission."
        )
    blocks.append(_submission_line(result))
    late = late_text(result)
    if late:
        blocks.append(f"**Late:** {escape(late)}")
    if result.submission.problems:
        blocks += ["## Submission problems", _bullets(escape(p) for p in result.submission.problems)]
    if result.submission.chosen:
        blocks += ["## Graded file", _bullets(escape(chosen_text(c)) for c in result.submission.chosen)]
    if result.notes:
        blocks += ["## Notes (not scored)", _bullets(escape(n) for n in result.notes)]
    if details:
        blocks += ["## Results", _table(result)]
        for task, item in task_items(result):
            if not earned_full(item) or item.findings:
                blocks += [_item_heading(item), item_markdown(item, bonus=is_bonus(task, item))]
    attached = {finding for item in result.items() for finding in item.findings}
    loose = [finding for finding in result.findings if finding not in attached]
    if loose:
        blocks += ["## Other policy findings", "\n".join(_finding(f) for f in loose)]
    off = isolation_off(result)
    if off:
        blocks += [
            "## Isolation",
            "These isolation layers were off during this run:",
            _bullets(f"{code_span(layer)}: {escape(why)}" for layer, why in sorted(off.items())),
        ]
    return "\n\n".join(blocks) + "\n"


def item_markdown(item: ItemResult, *, bonus: bool = False) -> str:
    """What one item's score rests on: feedback, failing cases, findings with the quoted line."""
    blocks = []
    if item.status is ItemStatus.PENDING_REVIEW:
        blocks.append("Pending instructor review: not scored yet.")
    if bonus:
        blocks.append(f"Bonus item: up to {fmt_points(item.max_score)} extra points.")
    if item.feedback:
        blocks.append(escape(item.feedback, multiline=True))
    if item.failures:
        failed = item.cases.total - item.cases.passed
        tally = f" ({failed} of {item.cases.total} cases failed)" if item.cases.total else ""
        lines = [f"- {code_span(case.id)}: {_verdict(case)}" for case in item.failures]
        if failed > len(item.failures):
            lines.append(f"- and {failed - len(item.failures)} more")
        blocks += [f"Failing cases{tally}:", "\n".join(lines)]
    if item.findings:
        blocks += ["Policy findings:", "\n".join(_finding(f) for f in item.findings)]
    return "\n\n".join(blocks)


def append_step_summary(md: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append ``md`` to ``$GITHUB_STEP_SUMMARY`` (cut to GitHub's limit); None outside Actions."""
    md = valid_utf8(md)
    data = md.encode("utf-8")
    if len(data) > STEP_SUMMARY_LIMIT:
        note = "\n\n*Report cut short: GitHub step summaries are limited to 1 MiB; see summary.md.*\n"
        keep = STEP_SUMMARY_LIMIT - len(note.encode("utf-8")) - 1
        md = data[:keep].decode("utf-8", errors="ignore") + note
    return append_github_file("GITHUB_STEP_SUMMARY", md, environ)


def escape(text: str, *, multiline: bool = False) -> str:
    """``text`` as literal Markdown: one line (or hard-broken lines), no markup, no HTML."""
    text = _INLINE_SPECIAL.sub(r"\\\1", text)
    if not multiline:
        return re.sub(r"\s+", " ", text).strip()
    lines = _LINE_START_SPECIAL.sub(r"\1\\\2", text.strip()).splitlines()
    return "  \n".join(line.rstrip() for line in lines)


def code_span(text: str) -> str:
    text = re.sub(r"\s+", " ", text)
    ticks = "`" * (_longest_backtick_run(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fence(text: str, lang: str) -> str:
    ticks = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _bullets(lines: Iterable[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def _item_heading(item: ItemResult) -> str:
    points = f"{fmt_points(item.score)}/{fmt_points(item.max_score)}, {STATUS_LABELS[item.status]}"
    return f"### {code_span(item.id)}: {escape(item.title)} ({points})"


def _verdict(case: CaseOutcome) -> str:
    return f"{case.verdict.value}: {escape(case.message)}" if case.message else case.verdict.value


def _finding(finding: Finding) -> str:
    where = f"{finding.file}:{finding.line}" + (f":{finding.col}" if finding.col else "")
    in_function = f" in {code_span(finding.function)}" if finding.function else ""
    line = f"- {code_span(where)}{in_function} ({finding.origin}) {escape(finding.rule)}: {escape(finding.message)}"
    if finding.source:
        line += "\n\n" + textwrap.indent(_fence(finding.source, "python"), "  ")
    return line


def _submission_line(result: GradeResult) -> str:
    sub = result.submission
    parts = [f"Submission {code_span(sub.digest[:19])}"]
    if sub.commit:
        parts.append(f"commit {code_span(sub.commit[:12])}")
    submitted = submitted_text(sub)
    if submitted:
        parts.append(escape(submitted))
    parts.append(f"grader {escape(result.grader_version)}")
    return " · ".join(parts)


def _table(result: GradeResult) -> str:
    rows = ["| Item | Title | Cases | Points | Status |", "|---|---|---:|---:|---|"]
    for task in result.tasks:
        title = escape(task.title) + (" (bonus)" if task.bonus else "")
        points = f"{fmt_points(task.score)}/{fmt_points(task.max_score)}"
        rows.append(f"| **{code_span(task.id)}** | **{title}** | | **{points}** | |")
        for item in task.items:
            bonus = " (bonus)" if item.bonus and not task.bonus else ""
            cases = f"{item.cases.passed}/{item.cases.total}" if item.cases.total else ""
            rows.append(
                f"| {code_span(item.id)} | {escape(item.title)}{bonus} | {cases} "
                f"| {fmt_points(item.score)}/{fmt_points(item.max_score)} | {STATUS_LABELS[item.status]} |"
            )
    return "\n".join(rows)
