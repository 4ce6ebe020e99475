"""Text that came from a submission, made safe to show and to write.

A file name is any bytes but ``/`` and NUL.  Python hands undecodable bytes over as lone surrogates
(PEP 383: ``old\\xff`` arrives as ``"old\\udcff"``), which no UTF-8 writer accepts, and a name may
hold a newline or a terminal escape that would forge lines of a report.  :func:`shown` turns such a
name into one printable line before it enters a message; :func:`valid_utf8` is the last guard
before any text becomes bytes, so a message nobody escaped still cannot stop an output being written.
:func:`csv_rows` is the one way the grader writes a CSV: a spreadsheet runs a cell that starts like a
formula, and a roster name is the student's to choose.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass

_SURROGATES = range(0xD800, 0xE000)
_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # what ``surrogateescape`` makes of the bytes 0x80..0xff


def shown(text: str) -> str:
    """``text`` with every character that is not printable written as a Python escape.

    An undecodable byte reads as ``\\xff``, a newline as ``\\n``, ESC as ``\\x1b``, a right-to-left
    override as ``\\u202e``; printable text, any script, is left alone.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def valid_utf8(text: str) -> str:
    """``text`` unchanged when it encodes as UTF-8, else with its lone surrogates escaped."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_escape(ch) if ord(ch) in _SURROGATES else ch for ch in text)
    return text


def _escape(ch: str) -> str:
    code = ord(ch)
    if code in _ESCAPED_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    return repr(ch)[1:-1]


#: OWASP's CSV-injection rule: a cell starting with one of these is a formula (or becomes one after
#: a spreadsheet strips the tab or CR), so it is written with a leading ``'``, which shows as text.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(cell: str) -> str:
    """``cell`` as a spreadsheet shows it literally: a formula-leading cell gets a leading ``'``.  A
    plain number (``-2.5``) is data, not a formula, and stays a number."""
    if cell.startswith(_FORMULA_STARTS) and not _is_number(cell):
        return "'" + cell
    return cell


def csv_rows(rows: Iterable[Iterable[str]]) -> str:
    """The CSV text of ``rows``, every cell neutralised by :func:`csv_cell`.  Lines end in CRLF
    (RFC 4180), which also makes the writer quote a cell holding a lone CR, so no name splits a row."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerows([csv_cell(cell) for cell in row] for row in rows)
    return buf.getvalue()


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return cell.strip() == cell and cell.lower().lstrip("+-") not in ("inf", "infinity", "nan")


@dataclass
class Clipper:
    """Text quoted from a submission (messages, captured output), kept small whatever it printed:
    at most ``lines`` lines of ``line_chars`` characters and ``case_bytes`` bytes per text, and
    ``total_bytes`` over every text one clipper sees (a grading's).  What is cut is said in the text.
    Deterministic: the same texts in the same order are clipped the same way."""

    lines: int
    line_chars: int
    case_bytes: int
    total_bytes: int
    used: int = 0

    def __call__(self, text: str) -> str:
        if not text:
            return text
        notes = []
        kept = text.splitlines()
        if len(kept) > self.lines:
            notes.append(f"{len(kept) - self.lines} more lines left out")
            kept = kept[: self.lines]
        long = sum(len(line) > self.line_chars for line in kept)
        if long:
            notes.append(f"{long} line(s) cut at {self.line_chars} characters")
            kept = [line[: self.line_chars] + " [...]" if len(line) > self.line_chars else line for line in kept]
        out = "\n".join(kept)
        room = max(0, min(self.case_bytes, self.total_bytes - self.used))
        data = out.encode("utf-8", errors="surrogatepass")
        if len(data) > room:
            bounds = f"at most {self.case_bytes} per case, {self.total_bytes} in all"
            notes.append(f"{len(data) - room} more bytes left out ({bounds})")
            out = data[:room].decode("utf-8", errors="ignore")
        self.used += len(out.encode("utf-8", errors="surrogatepass"))
        return out + (f"\n[output limit: {'; '.join(notes)}]" if notes else "")
