"""Static HTML reports: one per student and one for the class.

Renderers of :class:`~grader.results.GradeResult` only: every number shown is read from a result
(or from a gradebook row, itself read from one), never recomputed.  Each file stands alone: inline
CSS and SVG, no script, no external fetch, so it opens from a file system, an archive or an LMS.
Numbers carry ``data-*`` attributes (``data-field``, ``data-task``, ``data-item``, ``data-value``)
so tests and tools can read them without scraping text.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from grader import render
from grader.results import GradeResult, ItemResult, ItemStatus, Lateness, Verdict

if TYPE_CHECKING:
    from grader.batch import GradebookRow

#: The trace case whose events the student report draws (the handout's world-size-4 diagram).
ALL_TO_ALL_CASE = "test_trace_all_to_all[ws4]"
SEND_OPS = frozenset({"send", "isend"})
RECV_OPS = frozenset({"recv", "irecv"})
RANK_COLOURS = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d")
HISTOGRAM_BINS = 10
TOP_MESSAGES = 15

CSS = """
:root{--ok:#15803d;--bad:#b91c1c;--muted:#6b7280;--line:#e5e7eb;--bg:#f1f5f9}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:#111827;font:15px/1.45 system-ui,"Segoe UI","DejaVu Sans",sans-serif}
main{max-width:1200px;margin:0 auto;padding:24px}
header h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:0 0 12px}h3{font-size:16px;margin:18px 0 8px}
section{background:#fff;border:1px solid var(--line);border-radius:10px;padding:16px 20px;margin:16px 0}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:#374151;background:#f9fafb}
.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:var(--muted)}.small{font-size:13px}
.badge{display:inline-block;padding:1px 8px;border-radius:999px;font-size:12px;font-weight:600}
.badge,.num{white-space:nowrap}
.ok{background:#dcfce7;color:#166534}.mid{background:#fef3c7;color:#92400e}
.bad{background:#fee2e2;color:#991b1b}.info{background:#e0e7ff;color:#3730a3}
.man{background:#f3e8ff;color:#6b21a8}.off{background:#e5e7eb;color:#374151}
.bar{height:8px;background:#e5e7eb;border-radius:4px;overflow:hidden;min-width:80px}
.bar>span{display:block;height:100%;background:var(--ok)}
code,pre{font-family:"DejaVu Sans Mono",ui-monospace,monospace;font-size:13px}
pre{background:#f3f4f6;padding:8px 10px;border-radius:6px;white-space:pre-wrap;margin:4px 0}
.cards{display:flex;gap:16px;flex-wrap:wrap}
.card{flex:1 1 160px;border:1px solid var(--line);border-radius:8px;padding:10px 14px;background:#f9fafb}
.card .big{font-size:28px;font-weight:700}
.score{font-size:44px;font-weight:700}
.failures{margin:6px 0 0;padding-left:18px}.failures li{margin:2px 0}
.feedback{color:#374151;margin-top:2px;white-space:pre-line}
.panel{border:2px dashed #cbd5e1;border-radius:10px;padding:28px;text-align:center;color:var(--muted)}
.error{border-color:#fecaca;background:#fef2f2;color:#991b1b}
.grid{display:flex;flex-wrap:wrap;gap:12px}
svg[data-diagram]{max-width:100%;height:auto}
svg text{font-family:"DejaVu Sans",system-ui,sans-serif}
svg .halo{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
"""

_STATUS_CLASS = {
    "on": "ok",
    ItemStatus.PASSED.value: "ok",
    "graded": "ok",
    Verdict.PASS.value: "ok",
    ItemStatus.PARTIAL.value: "mid",
    ItemStatus.AUTO_CHECKED.value: "mid",
    ItemStatus.PENDING_REVIEW.value: "info",
    ItemStatus.MANUAL.value: "man",
    "no_submission": "off",
    "off": "mid",
    Verdict.MISSING.value: "off",
    Verdict.NOT_RUN.value: "off",
}


# ----------------------------------------------------------------------------------------------
# Small pieces


def fmt_points(value: float | None) -> str:
    """Points as every renderer prints them (``grader.render.fmt_points``); blank for no value."""
    return "" if value is None else render.fmt_points(value)


def report_href(student: str) -> str:
    """A student report's address relative to the class report."""
    return f"students/{quote(student)}/report.html"


def _badge(status: str) -> str:
    return f'<span class="badge {_STATUS_CLASS.get(status, "bad")}">{escape(status.replace("_", " "))}</span>'


def _points(value: float | None, **data: str) -> str:
    """A number with its machine-readable twin: ``<span data-field=total data-value=87.5>87.5</span>``."""
    attrs = "".join(f' data-{k.replace("_", "-")}="{escape(v)}"' for k, v in data.items())
    return f'<span{attrs} data-value="{fmt_points(value)}">{fmt_points(value)}</span>'


def _bar(fraction: float) -> str:
    width = max(0.0, min(1.0, fraction)) * 100
    return f'<div class="bar"><span style="width:{width:.1f}%"></span></div>'


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n"
        f"<body><main>\n{body}\n</main></body></html>\n"
    )


def _section(section_id: str, title: str, content: str) -> str:
    return f'<section id="{section_id}"><h2>{escape(title)}</h2>\n{content}\n</section>'


def _table(head: Sequence[str], rows: Iterable[str], numeric: Sequence[int] = ()) -> str:
    cells = "".join(
        f'<th class="num">{escape(h)}</th>' if i in numeric else f"<th>{escape(h)}</th>" for i, h in enumerate(head)
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>"


def _empty(text: str) -> str:
    return f'<p class="muted">{escape(text)}</p>'


# ----------------------------------------------------------------------------------------------
# Student report


def render_student_report(result: GradeResult, *, student: str | None = None) -> str:
    """The student's report: score, rubric, failing cases, findings, isolation, all-to-all diagram."""
    who = student or result.submission.source
    parts = [
        f"<header><h1>{escape(result.assignment)} — {escape(who)}</h1>{_provenance(result)}</header>",
        _summary(result),
        _section(
            "rubric",
            "Rubric",
            "\n".join(_task_table(t.id, t.title, t.score, t.max_score, t.items) for t in result.tasks),
        ),
        _section(
            "diagram",
            "Your my_all_to_all at world size 4: time vs rank",
            render_all_to_all_diagram(result.trace),
        ),
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


# ----------------------------------------------------------------------------------------------
# The all-to-all time-vs-rank diagram


@dataclass
class _Event:
    rank: int
    op: str
    peer: int
    t: float
    shape: list[int]
    dtype: str
    nbytes: int


@dataclass
class _Message:
    src: int
    dst: int
    k: int  # the k-th message src -> dst
    send: _Event
    recv: _Event | None


def _events(raw: Any) -> list[_Event]:
    """Well-formed events only, sorted by time: the trace crossed the trust boundary as JSON."""
    events = []
    for e in raw if isinstance(raw, list) else []:
        try:
            event = _Event(
                int(e["rank"]),
                str(e["op"]),
                int(e["peer"]),
                float(e["t"]),
                [int(d) for d in e.get("shape") or []],
                str(e.get("dtype", "")),
                int(e.get("bytes", 0)),
            )
        except (KeyError, TypeError, ValueError):
            continue
        if event.op in SEND_OPS | RECV_OPS and math.isfinite(event.t) and 0 <= event.rank < 64 and 0 <= event.peer < 64:
            events.append(event)
    return sorted(events, key=lambda e: (e.t, e.rank))


def match_messages(events: list[_Event]) -> tuple[list[_Message], list[_Event]]:
    """Pair the k-th send r->p with the k-th receive at p from r; also return receives nobody sent to."""
    sends: dict[tuple[int, int], list[_Event]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[_Event]] = defaultdict(list)
    for e in events:
        if e.op in SEND_OPS:
            sends[(e.rank, e.peer)].append(e)
        else:
            recvs[(e.peer, e.rank)].append(e)
    messages = [
        _Message(src, dst, k, send, recvs[(src, dst)][k] if k < len(recvs[(src, dst)]) else None)
        for (src, dst), sent in sends.items()
        for k, send in enumerate(sent)
    ]
    orphans = [r for key, got in recvs.items() for r in got[len(sends.get(key, [])) :]]
    return sorted(messages, key=lambda m: (m.send.t, m.src)), orphans


def _all_to_all_events(trace: Mapping[str, Any]) -> Any:
    """The trace case's events; with hidden case ids (keys "hidden case N"), the case whose events
    all come from ``my_all_to_all`` at world size 4."""
    case = trace.get(ALL_TO_ALL_CASE)
    if isinstance(case, Mapping):
        return case.get("events")
    for summary in trace.values():
        events = summary.get("events") if isinstance(summary, Mapping) else None
        if (
            isinstance(events, list)
            and events
            and all(isinstance(e, Mapping) and e.get("function") == "my_all_to_all" for e in events)
            and {e.get("rank") for e in events} == {0, 1, 2, 3}
        ):
            return events
    return None


def render_all_to_all_diagram(trace: Mapping[str, Any]) -> str:
    """Ranks as lanes, time (event order) on the x axis, one labelled arrow per message."""
    events = _events(_all_to_all_events(trace))
    if not events:
        return (
            '<div class="panel" data-diagram="none"><strong>No trace available.</strong><br>'
            "The all-to-all trace case did not run or recorded no send/recv (a stub, an import error "
            "or a crash before the first message).</div>"
        )
    messages, orphans = match_messages(events)
    ranks = list(range(max(max(e.rank, e.peer) for e in events) + 1))
    times = sorted({e.t for e in events})
    slot = {t: i for i, t in enumerate(times)}
    step = max(34.0, min(80.0, 900.0 / max(1, len(times) - 1)))
    left, top, lane_h = 84.0, 44.0, 92.0
    width = left + step * (len(times) - 1) + 170
    height = top + lane_h * (len(ranks) - 1) + 70

    def x(e: _Event) -> float:
        return left + step * slot[e.t]

    def y(rank: int) -> float:
        return top + lane_h * rank

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" data-diagram="all_to_all" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">',
        "<title>Time-vs-rank diagram of my_all_to_all at world size 4</title><defs>",
        *(
            f'<marker id="head{r}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="{_colour(r)}"/></marker>'
            for r in ranks
        ),
        "</defs>",
    ]
    for r in ranks:
        svg.append(
            f'<line x1="{left - 14}" y1="{y(r)}" x2="{width - 24}" y2="{y(r)}" stroke="#cbd5e1" '
            f'stroke-width="2"/><text x="12" y="{y(r) + 5}" font-size="14" font-weight="700" '
            f'fill="{_colour(r)}">rank {r}</text>'
        )
    ticks = sorted({0, len(times) - 1, *range(0, len(times), max(1, len(times) // 6))})
    axis_y = y(ranks[-1]) + 40
    svg.append(f'<line x1="{left}" y1="{axis_y - 12}" x2="{width - 24}" y2="{axis_y - 12}" stroke="#94a3b8"/>')
    for i in ticks:
        svg.append(
            f'<text x="{left + step * i}" y="{axis_y + 4}" font-size="11" fill="#6b7280" '
            f'text-anchor="middle">{times[i] * 1000:.2f}</text>'
        )
    svg.append(
        f'<text x="{width - 24}" y="{axis_y + 20}" font-size="11" fill="#6b7280" text-anchor="end">'
        "time since case start, ms (events spaced in order) →</text>"
    )
    for n, m in enumerate(messages):
        svg.append(_arrow(m, n, x, y, step, lane_h))
    for e in orphans:
        svg.append(
            f'<text x="{x(e)}" y="{y(e.rank) + 5}" font-size="16" font-weight="700" fill="#b91c1c" '
            f'text-anchor="middle" data-orphan="1">✕<title>{escape(_describe(e))}: nothing was sent'
            "</title></text>"
        )
    svg.append("</svg>")
    return "\n".join(svg) + _message_table(messages, orphans)


def _colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)]


def _describe(e: _Event) -> str:
    return f"rank {e.rank} {e.op}({'dst' if e.op in SEND_OPS else 'src'}={e.peer}) at {e.t * 1000:.3f} ms"


def _arrow(m: _Message, n: int, x: Any, y: Any, step: float, lane_h: float) -> str:
    colour = _colour(m.src)
    x1, y1 = x(m.send), y(m.src)
    y2 = y(m.dst)
    # A receive posted before the send (irecv) cannot complete before it: the arrow lands just after
    # the send, and a dotted segment shows the receive waiting since it was posted.
    x2 = max(x(m.recv), x1 + step * 0.6) if m.recv else x1 + step * 0.6
    label = f"r{m.src}→r{m.dst} [{','.join(map(str, m.send.shape))}]"
    title = escape(
        f"chunk {m.dst} of r{m.src}: {_describe(m.send)} → " + (_describe(m.recv) if m.recv else "never received")
    )
    parts = [f'<g data-message="{n}" data-src="{m.src}" data-dst="{m.dst}"><title>{title}</title>']
    if m.recv and x(m.recv) < x2:
        wait_y = y2 + 3 * (m.src - m.dst) / max(1, abs(m.src - m.dst))  # senders above/below the lane
        parts.append(
            f'<line x1="{x(m.recv)}" y1="{wait_y}" x2="{x2}" y2="{wait_y}" stroke="{colour}" stroke-width="1.5" '
            'stroke-dasharray="2 3" opacity="0.8"/>'
        )
    dash = "" if m.recv else ' stroke-dasharray="6 4"'
    # Stop short of the lane so the arrow head does not hide the receive's marker.
    shrink = 7 if y2 > y1 else -7
    parts.append(
        f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2 - shrink}" stroke="{colour}" stroke-width="1.8"'
        f'{dash} marker-end="url(#head{m.src})"/>'
    )
    parts.append(f'<circle cx="{x1}" cy="{y1}" r="5" fill="{colour}"/>')
    if m.recv:
        parts.append(f'<circle cx="{x(m.recv)}" cy="{y2}" r="4.5" fill="#fff" stroke="{colour}" stroke-width="2"/>')
    else:
        parts.append(f'<text x="{x2 + 6}" y="{y2 - shrink}" font-size="11" fill="#b91c1c">never received</text>')
    # Between the sender's lane and the next one (never on a lane), alternating height so the labels
    # of neighbouring arrows do not overlap.
    frac = (0.3 if n % 2 == 0 else 0.62) * lane_h / abs(y2 - shrink - y1)
    lx, ly = x1 + (x2 - x1) * frac, y1 + (y2 - shrink - y1) * frac + 4
    parts.append(
        f'<text class="halo" x="{lx + 4:.1f}" y="{ly:.1f}" font-size="10.5" fill="{colour}">{escape(label)}</text>'
    )
    return "".join(parts) + "</g>"


def _message_table(messages: list[_Message], orphans: list[_Event]) -> str:
    rows = [
        f"<tr><td class='num'>{n + 1}</td><td>r{m.src} → r{m.dst}</td><td>chunk {m.dst} of r{m.src}</td>"
        f"<td><code>[{', '.join(map(str, m.send.shape))}] {escape(m.send.dtype)}</code></td>"
        f"<td class='num'>{m.send.nbytes}</td><td>{escape(m.send.op)} @ {m.send.t * 1000:.3f} ms</td>"
        + (f"<td>{escape(m.recv.op)} @ {m.recv.t * 1000:.3f} ms</td>" if m.recv else "<td>never received</td>")
        + "</tr>"
        for n, m in enumerate(messages)
    ]
    note = (
        f"<p class='small'>{len(messages)} messages, {sum(m.recv is None for m in messages)} never received, "
        f"{len(orphans)} receives nothing was sent to. Filled dots are sends, hollow dots receives; "
        "the k-th send r→p is paired with the k-th receive at p from r. Dotted: a receive posted "
        "before its message was sent. The chunk named is the one all-to-all should send to that peer.</p>"
    )
    table = _table(["#", "Message", "Expected chunk", "Shape, dtype", "Bytes", "Send", "Receive"], rows, numeric=(0, 4))
    return note + f"<details><summary>All messages</summary>{table}</details>"


# ----------------------------------------------------------------------------------------------
# Class report


def render_class_report(
    results: Mapping[str, GradeResult | None],
    rows: Sequence[GradebookRow],
    *,
    case_verdicts: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """The class report: roster, score histograms, item and case pass rates, common failures,
    policy violations and timeouts.

    ``case_verdicts`` (student -> case id -> verdict, read from each student's ``junit.xml``) gives
    per-case pass rates; a result only keeps its most informative failures, too few for rates.
    """
    graded = {r.student: results[r.student] for r in rows if r.status == "graded" and results.get(r.student)}
    assignment = next((res.assignment for res in graded.values() if res), "assignment")
    parts = [
        f"<header><h1>{escape(assignment)} — class report</h1>"
        f'<p class="muted">{len(rows)} students · generated by <code>grader batch</code></p></header>',
        _section("overview", "Overview", _overview(rows)),
        _section("roster", "Students", _roster(rows, results)),
        _section("histograms", "Score distribution", _histograms(graded)),
        _section("items", "Pass rate per rubric item", _item_rates(graded)),
        _section("cases", "Pass rate per matrix case", _case_rates(case_verdicts or {}, set(graded))),
        _section("messages", "Most common failure messages", _common_failures(graded)),
        _section("violations", "Policy violations", _violations(results, rows)),
        _section("timeouts", "Timeouts, hangs and grader errors", _timeouts(rows, case_verdicts or {})),
    ]
    return _page(f"{assignment} — class report", "\n".join(parts))


def _student_link(student: str, results: Mapping[str, GradeResult | None]) -> str:
    if results.get(student) is None:
        return escape(student)
    return f'<a href="{escape(report_href(student))}">{escape(student)}</a>'


def _overview(rows: Sequence[GradebookRow]) -> str:
    totals = [r.total for r in rows if r.status == "graded" and r.total is not None]
    counts = Counter(r.status for r in rows)
    cards = [("students", str(len(rows)), "students")]
    cards += [(status.replace("_", " "), str(n), f"count-{status}") for status, n in sorted(counts.items())]
    if totals:
        cards += [
            ("mean total", fmt_points(statistics.fmean(totals)), "mean"),
            ("median total", fmt_points(statistics.median(totals)), "median"),
        ]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="muted">{escape(label)}</div>'
            f'<div class="big" data-field="{key}" data-value="{escape(value)}">{escape(value)}</div></div>'
            for label, value, key in cards
        )
        + "</div>"
    )


def _roster(rows: Sequence[GradebookRow], results: Mapping[str, GradeResult | None]) -> str:
    tasks: list[str] = []
    for row in rows:
        tasks += [t for t in row.tasks if t not in tasks]
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{_points(row.tasks.get(t), student=row.student, task=t)}</td>' for t in tasks)
        fixed = "".join(
            f'<td class="num">{_points(value, student=row.student, field=name)}</td>'
            for name, value in (
                ("bonus", row.bonus),
                ("late_penalty", row.late_penalty),
                ("total", row.total),
            )
        )
        body.append(
            f'<tr data-student="{escape(row.student)}" data-status="{escape(row.status)}">'
            f"<td>{_student_link(row.student, results)}</td>{cells}{fixed}<td>{_badge(row.status)}</td>"
            f'<td class="small">{escape(" ".join(row.flags))}</td></tr>'
        )
    # "Task 1 — collectives with send/recv only" heads its column as "Task 1".
    titles = {t.id: t.title.split(" — ")[0] for res in results.values() if res for t in res.tasks}
    head = ["Student", *(titles.get(t, t) for t in tasks), "Bonus", "Late", "Total", "Status", "Flags"]
    return _table(head, body, numeric=tuple(range(1, len(tasks) + 4)))


def _histograms(graded: Mapping[str, GradeResult | None]) -> str:
    results = [r for r in graded.values() if r is not None]
    if not results:
        return _empty("No graded submission yet.")
    series: dict[str, tuple[str, float, list[float]]] = {}
    for res in results:
        for task in res.tasks:
            series.setdefault(task.id, (task.title, task.max_score, []))[2].append(task.score)
        series.setdefault("total", ("Total", res.max_score, []))[2].append(res.score)
    return '<div class="grid">' + "".join(_histogram(key, *value) for key, value in series.items()) + "</div>"


def _histogram(key: str, title: str, max_score: float, scores: list[float]) -> str:
    """Ten equal bins over 0..max; a score equal to max falls in the last bin."""
    if max_score <= 0:
        return ""
    counts = [0] * HISTOGRAM_BINS
    for s in scores:
        counts[min(HISTOGRAM_BINS - 1, max(0, int(s / max_score * HISTOGRAM_BINS)))] += 1
    w, h, pad, base = 360, 200, 30, 165
    bw = (w - 2 * pad) / HISTOGRAM_BINS
    peak = max(counts) or 1
    bars = []
    for i, c in enumerate(counts):
        bh = (base - 52) * c / peak
        lo, hi = max_score * i / HISTOGRAM_BINS, max_score * (i + 1) / HISTOGRAM_BINS
        bars.append(
            f'<rect x="{pad + i * bw + 2:.1f}" y="{base - bh:.1f}" width="{bw - 4:.1f}" height="{bh:.1f}" '
            f'fill="#3b82f6" data-bin="{fmt_points(lo)}-{fmt_points(hi)}" data-count="{c}">'
            f"<title>{fmt_points(lo)}–{fmt_points(hi)}: {c}</title></rect>"
            + (
                f'<text x="{pad + (i + 0.5) * bw:.1f}" y="{base - bh - 4:.1f}" font-size="11" '
                f'text-anchor="middle">{c}</text>'
                if c
                else ""
            )
        )
    labels = "".join(
        f'<text x="{pad + i * bw:.1f}" y="{base + 16}" font-size="10" fill="#6b7280" text-anchor="middle">'
        f"{fmt_points(max_score * i / HISTOGRAM_BINS)}</text>"
        for i in range(0, HISTOGRAM_BINS + 1, 2)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        f'data-histogram="{escape(key)}" role="img"><title>{escape(title)}</title>'
        f'<text x="{pad}" y="14" font-size="13" font-weight="700">{escape(title)}</text>'
        f'<text x="{pad}" y="30" font-size="11" fill="#6b7280">{len(scores)} students, '
        f"out of {fmt_points(max_score)}</text>"
        f'<line x1="{pad}" y1="{base}" x2="{w - pad}" y2="{base}" stroke="#94a3b8"/>'
        f"{''.join(bars)}{labels}</svg>"
    )


def _item_rates(graded: Mapping[str, GradeResult | None]) -> str:
    items: dict[str, list[ItemResult]] = {}
    for res in graded.values():
        for item in res.items() if res else []:
            items.setdefault(item.id, []).append(item)
    if not items:
        return _empty("No graded submission yet.")
    rows = []
    for item_id, seen in items.items():
        full = sum(render.earned_full(i) for i in seen) / len(seen)
        passed, total = sum(i.cases.passed for i in seen), sum(i.cases.total for i in seen)
        rows.append(
            f'<tr data-item="{escape(item_id)}"><td>{escape(seen[0].title)} <span class="muted small">'
            f'{escape(item_id)}</span></td><td class="num">'
            f"{fmt_points(statistics.fmean(i.score for i in seen))} / {fmt_points(seen[0].max_score)}</td>"
            f'<td class="num" data-field="full_marks_rate" data-value="{full:.4f}">{full * 100:.0f}%</td>'
            f"<td>{_bar(full)}</td>"
            f'<td class="num">{f"{passed}/{total} ({passed / total * 100:.0f}%)" if total else ""}</td></tr>'
        )
    return _table(["Item", "Mean points", "Full marks", "", "Cases passed (all students)"], rows, numeric=(1, 2, 4))


def _case_rates(case_verdicts: Mapping[str, Mapping[str, str]], students: set[str]) -> str:
    per_case: dict[str, Counter[str]] = defaultdict(Counter)
    for student, verdicts in case_verdicts.items():
        if student in students:
            for case, verdict in verdicts.items():
                per_case[case][verdict] += 1
    if not per_case:
        return _empty("No per-case verdicts: they are read from each student's junit.xml.")
    families: dict[str, Counter[str]] = defaultdict(Counter)
    for case, tally in per_case.items():
        families[case.split("[", 1)[0]].update(tally)

    def row(name: str, tally: Counter[str], attr: str) -> str:
        n = sum(tally.values())
        rate = tally[Verdict.PASS.value] / n
        worst = ", ".join(f"{v} ×{c}" for v, c in tally.most_common() if v != Verdict.PASS.value)
        return (
            f'<tr {attr}="{escape(name)}"><td><code>{escape(name)}</code></td>'
            f'<td class="num" data-field="pass_rate" data-value="{rate:.4f}">{rate * 100:.0f}%</td>'
            f"<td>{_bar(rate)}</td><td class='small'>{escape(worst)}</td></tr>"
        )

    head = ["Case", "Pass rate", "", "Other verdicts (student runs)"]
    by_rate = sorted(per_case.items(), key=lambda kv: (kv[1][Verdict.PASS.value] / sum(kv[1].values()), kv[0]))
    return (
        _table(
            ["Test", "Pass rate", "", "Other verdicts (student runs)"],
            [row(name, tally, "data-family") for name, tally in sorted(families.items())],
            numeric=(1,),
        )
        + f"<details><summary>All {len(per_case)} cases, lowest pass rate first</summary>"
        + _table(head, [row(name, tally, "data-case") for name, tally in by_rate], numeric=(1,))
        + "</details>"
    )


def _common_failures(graded: Mapping[str, GradeResult | None]) -> str:
    students: dict[tuple[str, str], set[str]] = defaultdict(set)
    examples: dict[tuple[str, str], set[str]] = defaultdict(set)
    for name, res in graded.items():
        for item in res.items() if res else []:
            for failure in item.failures:
                key = (failure.verdict.value, failure.message.strip() or "(no message)")
                students[key].add(name)
                examples[key].add(failure.id)
    if not students:
        return _empty("No failing case in any graded submission.")
    top = sorted(students.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:TOP_MESSAGES]
    rows = [
        f"<tr><td class='num'>{len(who)}</td><td>{_badge(verdict)}</td><td>{escape(message)}"
        f"<div class='muted small'>e.g. {escape(', '.join(sorted(examples[(verdict, message)])[:3]))}</div>"
        "</td></tr>"
        for (verdict, message), who in top
    ]
    return _table(["Students", "Verdict", "Message"], rows, numeric=(0,))


def _violations(results: Mapping[str, GradeResult | None], rows: Sequence[GradebookRow]) -> str:
    body = []
    for row in rows:
        result = results.get(row.student)
        for f in result.findings if result else []:
            body.append(
                f"<tr><td>{_student_link(row.student, results)}</td><td>{escape(f.rule)}</td>"
                f"<td><code>{escape(f.file)}:{f.line}</code> {escape(f.function or '')}</td>"
                f"<td>{escape(f.message)}" + (f"<pre>{escape(f.source)}</pre>" if f.source else "") + "</td></tr>"
            )
    if not body:
        return _empty("No policy violation in any submission.")
    return _table(["Student", "Rule", "Where", "What"], body)


def _timeouts(rows: Sequence[GradebookRow], case_verdicts: Mapping[str, Mapping[str, str]]) -> str:
    body = []
    for row in rows:
        hangs = sorted(c for c, v in case_verdicts.get(row.student, {}).items() if v == Verdict.HANG.value)
        if row.status in ("timeout", "grader_error"):
            body.append(
                f'<tr data-student="{escape(row.student)}"><td>{escape(row.student)}</td>'
                f"<td>{_badge(row.status)}</td><td><pre>{escape(row.message[-800:])}</pre></td></tr>"
            )
        elif hangs:
            shown = ", ".join(hangs[:6]) + (f" and {len(hangs) - 6} more" if len(hangs) > 6 else "")
            body.append(
                f'<tr data-student="{escape(row.student)}"><td>{escape(row.student)}</td>'
                f"<td>{_badge('hang')}</td><td>{len(hangs)} case(s) hung: {escape(shown)}</td></tr>"
            )
    if not body:
        return _empty("No submission timed out, hung or broke the grader.")
    return _table(["Student", "What", "Detail"], body)
