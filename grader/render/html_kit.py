"""What every static HTML report shares: the page, its CSS, tables, badges and number format.

The reports are renderers of :class:`~grader.results.GradeResult` only: every number shown is read
from a result (or from a gradebook row, itself read from one), never recomputed.  Each file stands
alone: inline CSS and SVG, no script, no external fetch, so it opens from a file system, an archive
or an LMS.  Numbers carry ``data-*`` attributes (``data-field``, ``data-task``, ``data-item``,
``data-value``) so tests and tools can read them without scraping text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from urllib.parse import quote

from grader import render
from grader.results import ItemStatus, Verdict

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
.bar{display:block;width:100%;height:8px;border-radius:4px;min-width:80px}
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
.sides{display:grid;grid-template-columns:1fr 1fr;gap:12px}.sides>div{min-width:0}
mark{background:#fde68a;color:inherit}
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
    """A filled share as SVG attributes, not a ``style`` attribute: the service's pages run under a
    Content-Security-Policy without inline styles, and draw the same bars."""
    width = max(0.0, min(1.0, fraction)) * 100
    return (
        '<svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true">'
        f'<rect width="100" height="8" fill="#e5e7eb"/><rect width="{width:.1f}" height="8" fill="#15803d"/></svg>'
    )


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
