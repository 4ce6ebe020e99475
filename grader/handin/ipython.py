"""IPython's syntax in a notebook cell or a pasted snippet, read as IPython's input transformer reads
it and never run.

IPython turns a logical line that starts with ``!`` or ``%`` (``!pip install x``, ``%matplotlib
inline``, ``files = !ls``) into an expression statement calling ``get_ipython()``, wherever the line
stands: at a cell's top level or inside a ``try:``, ``if`` or ``def`` body.  Here that statement is
``...`` at the line's own indentation (``files = None`` for an assignment, each target None), so the block around it
keeps a body and the definition holding it stays gradeable, and nothing of the magic runs.  A line
that calls ``get_ipython()`` itself (a notebook exported as ``.py`` holds them) becomes ``...`` too.
A cell that starts with a cell magic (``%%bash``) is, to IPython, one such call with the cell as
its argument: :func:`is_cell_magic` says so, and its reader drops the cell.

Only a logical line's start counts, as for IPython: a ``%`` that continues an expression (``x = (a\\n
% b)``) or a line inside a triple-quoted string is Python and left alone.  Every line keeps its
number, so a traceback or syntax error still points at the student's line.
"""

from __future__ import annotations

import re

#: The start of a logical line that is IPython's, not Python's: an escape, or an assignment from one.
_TARGETS = r"(?P<target>[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*)"
_ESCAPED = re.compile(rf"^(?P<indent>[ \t]*)(?:{_TARGETS}[ \t]*=[ \t]*)?[!%]")
_GET_IPYTHON = re.compile(r"^(?P<indent>[ \t]*)get_ipython[ \t]*\(")
_STRING_START = re.compile(r"""[rRbBuUfF]{0,2}('''|\"\"\"|'|\")""")


def is_cell_magic(source: str) -> bool:
    """Whether a cell is a cell magic (``%%bash``, ``%%time``): IPython hands its text to the magic."""
    return source.lstrip().startswith("%%")


def as_python(source: str) -> str:
    """``source`` with every IPython line replaced as the module says, line numbers kept."""
    out: list[str] = []
    scanner = _Scanner()
    blanking = False  # inside a replaced logical line: its continuation lines are blank
    for line in source.splitlines(keepends=True):
        end = "\n" if line.endswith(("\n", "\r")) else ""
        if blanking:
            blanking = scanner.continues(line, python=not scanner.magic)
            out.append(end)
            continue
        if scanner.at_start:
            escaped = _ESCAPED.match(line)
            called = None if escaped else _GET_IPYTHON.match(line)
            if escaped or called:
                match = escaped or called
                assert match is not None
                target = escaped.group("target") if escaped else None
                out.append(f"{match.group('indent')}{_nothing(target)}{end}")
                scanner.magic = escaped is not None  # a magic's text is not Python: not scanned
                blanking = scanner.continues(line, python=not scanner.magic)
                continue
        scanner.continues(line, python=True)
        out.append(line)
    return "".join(out)


def _nothing(target: str | None) -> str:
    """The statement that stands for a magic: ``...``, or its targets bound to None each."""
    if target is None:
        return "..."
    names = [name.strip() for name in target.split(",")]
    return f"{', '.join(names)} = {', '.join(['None'] * len(names))}"


class _Scanner:
    """Where a line starts: inside a string, brackets or a backslash continuation, or at a logical
    line's start.  Strings and comments are skipped as Python's tokenizer would."""

    def __init__(self) -> None:
        self.quote = ""  # the open triple quote a line starts inside, or ""
        self.depth = 0  # open brackets
        self.backslash = False  # the previous line ended with a backslash
        self.magic = False  # the logical line being blanked is a magic (not Python)

    @property
    def at_start(self) -> bool:
        return not self.quote and self.depth == 0 and not self.backslash

    def continues(self, line: str, python: bool) -> bool:
        """Read ``line``; whether the logical line it belongs to goes on to the next."""
        text = line.rstrip("\r\n")
        if not python:  # a magic goes on only through a trailing backslash
            self.backslash = text.endswith("\\")
            return self.backslash
        i = 0
        while i < len(text):
            if self.quote:
                close = text.find(self.quote, i)
                while close > 0 and _escaped(text, close):
                    close = text.find(self.quote, close + 1)
                if close < 0:
                    i = len(text)
                    break
                i, self.quote = close + len(self.quote), ""
                continue
            char = text[i]
            if char == "#":
                break
            opened = _STRING_START.match(text, i) if char.isalpha() or char in "'\"" else None
            if opened is not None and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                quote = opened.group(1)
                start = opened.end()
                if len(quote) == 3:
                    self.quote = quote
                    i = start
                    continue
                close = start
                while close < len(text) and text[close] != quote:
                    close += 2 if text[close] == "\\" else 1
                i = close + 1
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        self.backslash = not self.quote and text.endswith("\\") and not text.rstrip().startswith("#")
        return not self.at_start


def _escaped(text: str, at: int) -> bool:
    """Whether the quote at ``at`` is escaped by an odd number of backslashes."""
    count = 0
    while at - count - 1 >= 0 and text[at - count - 1] == "\\":
        count += 1
    return count % 2 == 1
