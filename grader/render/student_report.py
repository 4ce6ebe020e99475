"""The student's HTML report: score, rubric, failing cases, findings, isolation, and the pack's diagram."""

from __future__ import annotations

from html import escape

from grader import render
from grader.pack import Diagram
from grader.render.html_kit import _badge, _bar, _empty, _page, _points, _section, _table, fmt_points
from grader.render.trace_svg import render_diagram
from grader.results import GradeResult, ItemResult, Lateness


def render_student_report(result: GradeResult, *, student: str | None = None, diagram: Diagram | None = None) -> str:
    """The student's report: score, rubric, failing cases, findings, isolation, and the time-vs-rank
    diagram the assignment's pack asks for (none without one)."""
    who = student or result.submission.source
    parts = [
        f"<header><h1>{escape(result.assignment)} — {escape(who)}</h1>{_provenance(result)}</header>",
        _summary(result),
        _section(
            "rubric",
            "Rubric",
            "\n".join(_task_table(t.id, t.title, t.score, t.max_score, t.items) for t in result.tasks),
        ),
    ]
    if diagram is not None:
        parts.append(_section("diagram", diagram.title, render_diagram(result.trace, diagram.case, diagram.function)))
    parts += [
        _section("findings", "Static and runtime policy findings", _findings(result)),
        _section("isolation", "Isolation layers", _isolation(result)),
    ]
    return _page(f"{result.assignment} — {who}", "\n".join(parts))


def _provenance(result: GradeResult) -> str:
    sub = result.submission
    facts = [f"submission <code>{escape(sub.digest[:19])}</code>"]
    if sub.commit:
        facts.append(f"commit <code>{escape(sub.commit[:12])}</code>")
    submitted = render.submitted_text(sub)
    if submitted:
        facts.append(escape(submitted))
    facts.append(f"grader {escape(result.grader_version)}")
    facts.append(f"rubric <code>{escape(result.rubric_digest[:19])}</code>")
    problems = "".join(f"<li>{escape(p)}</li>" for p in sub.problems)
    problems += "".join(f"<li><strong>{escape(render.chosen_text(c))}</strong></li>" for c in sub.chosen)
    problems += "".join(f"<li>{escape(n)} <span class=muted>(not scored)</span></li>" for n in result.notes)
    return f'<p class="muted small">{" · ".join(facts)}</p>' + (f"<ul class=small>{problems}</ul>" if problems else "")


def _summary(result: GradeResult) -> str:
    late = result.late
    in_question = result.lateness in (Lateness.LATE, Lateness.UNKNOWN)
    late_text = (render.late_text(result) if in_question else None) or "on time"
    error = (
        f'<div class="panel error"><strong>The grader could not finish:</strong> {escape(result.error or "")}</div>'
        if result.status != "graded"
        else ""
    )
    tasks = "".join(
        f'<div class="card"><div>{escape(t.title)}</div><div class="big">'
        f"{_points(t.score, task=t.id)}<span class=muted> / {fmt_points(t.max_score)}</span></div>"
        f"{_bar(t.score / t.max_score if t.max_score else 0)}</div>"
        for t in result.tasks
    )
    return _section(
        "summary",
        "Score",
        f'{error}<div class="score">{_points(result.score, field="total")}'
        f'<span class="muted"> / {_points(result.max_score, field="max_score")}</span></div>'
        f"<p>bonus +{_points(result.bonus_score, field='bonus')} · late penalty "
        f"−{_points(late.points if late else 0.0, field='late_penalty')} ({escape(late_text)}) · "
        f"status {_badge(result.status)}</p>"
        f'<div class="cards">{tasks}</div>',
    )


def _task_table(task_id: str, title: str, score: float, max_score: float, items: list[ItemResult]) -> str:
    rows = []
    for item in items:
        feedback = f'<div class="feedback">{escape(item.feedback)}</div>' if item.feedback else ""
        failures = "".join(
            f"<li><code>{escape(f.id)}</code> {_badge(f.verdict.value)} {escape(f.message)}</li>" for f in item.failures
        )
        cases = f"{item.cases.passed}/{item.cases.total}" if item.cases.total else ""
        rows.append(
            f'<tr data-item="{escape(item.id)}"><td><strong>{escape(item.title)}</strong> '
            f'<span class="muted small">{escape(item.id)}</span>{feedback}'
            + (f'<ul class="failures small">{failures}</ul>' if failures else "")
            + f'</td><td class="num">{cases}</td><td>{_badge(item.status.value)}</td>'
            f'<td class="num">{_points(item.score, field="item_score", item=item.id)} / '
            f"{fmt_points(item.max_score)}</td></tr>"
        )
    head = f"<h3>{escape(title)} — {fmt_points(score)} / {fmt_points(max_score)}</h3>"
    return head + _table(["Item", "Cases passed", "Status", "Points"], rows, numeric=(1, 3))


def _findings(result: GradeResult) -> str:
    if not result.findings:
        return _empty("No use of a forbidden API was found.")
    rows = [
        f"<tr><td><code>{escape(f.file)}:{f.line}</code></td><td>{escape(f.function or '')}</td>"
        f"<td>{escape(f.rule)} <span class='muted small'>({escape(f.origin)})</span></td>"
        f"<td>{escape(f.message)}" + (f"<pre>{escape(f.source)}</pre>" if f.source else "") + "</td></tr>"
        for f in result.findings
    ]
    return _table(["Where", "Function", "Rule", "What"], rows)


def _isolation(result: GradeResult) -> str:
    if not result.isolation:
        return _empty("The grader recorded no isolation layers.")
    off = render.isolation_off(result)
    rows = [
        f"<tr><td>{escape(layer)}</td><td>{_badge('off' if layer in off else 'on')}</td>"
        f"<td class='muted'>{escape(off.get(layer, ''))}</td></tr>"
        for layer in result.isolation
    ]
    return _table(["Layer", "State", "Why off"], rows)
