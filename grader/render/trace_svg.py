"""A time-vs-rank diagram of the messages one student function sent in a trace probe (inline SVG).

Ranks are lanes, time (event order) runs along the x axis, one labelled arrow per message, from the
events a probe keeps (``keep_events``); which probe and function is the pack's choice
(``grader.pack.Diagram``).  Nothing here knows an assignment.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

from grader.render.html_kit import _table

SEND_OPS = frozenset({"send", "isend"})
RECV_OPS = frozenset({"recv", "irecv"})
RANK_COLOURS = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d")


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


def _probe_events(trace: Mapping[str, Any], case: str, function: str) -> Any:
    """The probe's events; with hidden case ids (keys "hidden case N"), the one probe whose events
    all come from ``function``."""
    summary = trace.get(case)
    if isinstance(summary, Mapping):
        return summary.get("events")
    candidates = [
        events
        for summary in trace.values()
        if isinstance(summary, Mapping)
        and isinstance(events := summary.get("events"), list)
        and events
        and all(isinstance(e, Mapping) and e.get("function") == function for e in events)
    ]
    return candidates[0] if len(candidates) == 1 else None


def render_diagram(trace: Mapping[str, Any], case: str, function: str) -> str:
    """The messages ``function`` sent in the probe ``case``: ranks as lanes, time (event order) on the
    x axis, one labelled arrow per message."""
    events = _events(_probe_events(trace, case, function))
    if not events:
        return (
            '<div class="panel" data-diagram="none"><strong>No trace available.</strong><br>'
            f"The trace case did not run or recorded no send/recv of {escape(function)} (a stub, an import "
            "error or a crash before the first message).</div>"
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
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" data-diagram="{escape(function)}" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">',
        f"<title>Time-vs-rank diagram of {escape(function)}</title><defs>",
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
        f"message {m.k + 1} r{m.src}→r{m.dst}: {_describe(m.send)} → "
        + (_describe(m.recv) if m.recv else "never received")
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
        f"<tr><td class='num'>{n + 1}</td><td>r{m.src} → r{m.dst}</td><td class='num'>{m.k + 1}</td>"
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
        "before its message was sent.</p>"
    )
    head = ["#", "Message", "k-th on this pair", "Shape, dtype", "Bytes", "Send", "Receive"]
    table = _table(head, rows, numeric=(0, 2, 4))
    return note + f"<details><summary>All messages</summary>{table}</details>"
