"""IPython's syntax in a notebook cell or a pasted snippet, read as IPython's input transformer reads
it and never run.

IPython turns a logical line that starts with ``!`` or ``%`` (``!pip install x``, ``%matplotlib
inline``, ``files = !ls``) into an expression statement calling ``get_ipython()``, wherever the line
stands: at a cell's top level or inside a ``try:``, ``if`` or ``def`` body.  Here that statement is
``...`` at the line's own indentation (``files = None`` for an assignment, each target None), so the block around it
keeps a body and the definition holding it stays gradeable, and nothing of the magic runs.  A line
that calls ``get_ipython()`` itself (a notebook exported as ``.py`` holds them) becomes ``...`` too.
IPython's help syntax (``obj?``, ``torch.tensor_split??``, ``?obj``, ``??obj``) is its ``pinfo`` magic,
a line that does nothing here too (``x = obj?`` included: IPython drops the whole line for the help).

A cell that starts with a cell magic is, to IPython, one call with the cell as its argument:
:func:`read_cell` says what of it is Python.  ``%%time``, ``%%capture [var]``, ``%%prun`` and
``%%debug`` run their body in the notebook's namespace, so their body is read as a cell's (the magic's
line blank); ``%%timeit`` runs its body inside a timing function (IPython's ``inner``), so nothing it
defines outlives the cell; every other cell magic (``%%bash``, ``%%script``, ``%%writefile``, ``%%html``,
a library's ``%%sql``) hands the text to something other than Python.  Those cells are not read,
and :func:`read_cell` says why.

Only a logical line's start counts, as for IPython: a ``%`` that continues an expression (``x = (a\\n
% b)``) or a line inside a triple-quoted string is Python and left alone.  Every line keeps its
number, so a traceback or syntax error still points at the student's line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: The start of a logical line that is IPython's, not Python's: an escape, or an assignment from one.
_TARGETS = r"(?P<target>[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*)"
_ESCAPED = re.compile(rf"^(?P<indent>[ \t]*)(?:{_TARGETS}[ \t]*=[ \t]*)?[!%]")
_COLAB_LINE = re.compile(r"^(?P<indent>[ \t]*)#[ \t](?P<inner>[ \t]*)[%!]")
_GET_IPYTHON = re.compile(r"^(?P<indent>[ \t]*)get_ipython[ \t]*\(")
_STRING_START = re.compile(r"""[rRbBuUfF]{0,2}('''|\"\"\"|'|\")""")
#: IPython's help syntax on a line of its own: ``?obj``, ``??obj``, or a line ending ``name?``/``name??``
#: (IPython's ``_help_end_re``: a dotted name, ``x = obj?`` included), no comment or string on it.
_HELP = re.compile(r"^(?P<indent>[ \t]*)(?:\?\??[^\n]*|[^#'\"\n]*?%{0,2}(?!\d)[\w*]+(?:[.,][\w*]+)*\?\??)[ \t]*\r?\n?$")


#: IPython's own cell magics that run their body as Python in the notebook's namespace.
RUNS_PYTHON = frozenset({"time", "capture", "prun", "debug"})
#: Why a cell magic's body is not read, by magic; any other is a library's or a language's.
_NOT_READ = {
    "timeit": "IPython runs its body inside a timing function, so nothing it defines outlives the cell",
    **dict.fromkeys(
        ("bash", "sh", "script", "python", "python2", "python3", "pypy", "perl", "ruby", "shell", "system", "sx"),
        "IPython hands its text to another process, never to the notebook",
    ),
    **dict.fromkeys(("writefile", "file"), "IPython writes its text to a file and runs none of it"),
    **dict.fromkeys(
        ("html", "javascript", "js", "latex", "markdown", "svg"), "IPython displays its text and runs none of it"
    ),
}
_CELL_MAGIC = re.compile(r"\A(?:[ \t]*\r?\n)*[ \t]*%%(?P<name>[\w.]*)[^\n]*(?:\n|\Z)")
_RUN_CELL_MAGIC = re.compile(r"^get_ipython\(\)\.run_cell_magic\(.*$", re.MULTILINE)
#: Colab's "Download .py" comments a magic cell out whole, under this line.
COLAB_COMMENTED = "# Commented out IPython magic to ensure Python compatibility."
_COLAB_CELL_MAGIC = re.compile(
    rf"^{re.escape(COLAB_COMMENTED)}[ \t]*\r?\n# %%(?P<name>[\w.]*)[^\n]*\n(?P<body>(?:#[^\n]*(?:\n|\Z))*)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Cell:
    """What of a cell IPython runs as Python in the notebook's namespace, and the cell magics it skips."""

    python: str  # line numbers kept; "" where none of it is
    skipped: tuple[str, ...] = ()  # "%%bash: IPython hands its text to another process, ..."


def read_cell(source: str) -> Cell:
    """A notebook cell (or a cell of its ``.py`` export) as IPython runs it: the body of a cell magic
    that runs Python kept at its own lines, any other cell magic skipped, then :func:`as_python`.

    An export holds a cell magic as ``jupyter nbconvert --to script`` writes it (one
    ``get_ipython().run_cell_magic(name, line, body)`` line: the body takes that line's place) or as
    Colab's "Download .py" does (the cell commented out under :data:`COLAB_COMMENTED`: uncommented)."""
    skipped: list[str] = []
    source = _COLAB_CELL_MAGIC.sub(lambda m: _uncomment(m, skipped), source)
    source = _RUN_CELL_MAGIC.sub(lambda m: _run_cell_magic(m.group(0), skipped), source)
    while (magic := _CELL_MAGIC.match(source)) is not None:
        name = magic.group("name")
        if name not in RUNS_PYTHON:
            skipped.append(_why(name))
            return Cell("", tuple(skipped))
        source = "\n" * magic.group(0).count("\n") + source[magic.end() :]  # the magic's lines kept, blank
    return Cell(as_python(source, colab=COLAB_COMMENTED in source), tuple(skipped))


def _why(name: str) -> str:
    return f"%%{name}: " + _NOT_READ.get(name, "not one of IPython's magics that run Python, so none of it is read")


def _uncomment(match: re.Match[str], skipped: list[str]) -> str:
    """A Colab-commented cell magic: its body uncommented where the magic runs Python, lines kept."""
    name = match.group("name")
    if name not in RUNS_PYTHON:
        skipped.append(_why(name))
        return match.group(0)
    lines = match.group("body").splitlines(keepends=True)
    return "\n\n" + "".join(line[2:] if line.startswith("# ") else line[1:].lstrip(" \t") for line in lines)


def _run_cell_magic(line: str, skipped: list[str]) -> str:
    """nbconvert's ``get_ipython().run_cell_magic('time', '', 'body')``: the body where the magic runs
    Python (read in that line's place), else the line itself (a call :func:`as_python` reads as nothing)."""
    try:
        call = ast.parse(line.strip(), mode="eval").body
    except SyntaxError:
        return line
    args = call.args if isinstance(call, ast.Call) else []
    if len(args) != 3 or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
        return line
    name, _, body = (str(a.value) for a in args)  # type: ignore[attr-defined]
    if name not in RUNS_PYTHON:
        skipped.append(_why(name))
        return line
    return body.rstrip("\n")


def as_python(source: str, colab: bool = False) -> str:
    """``source`` with every IPython line replaced as the module says, line numbers kept.  In a
    Colab export (``colab``), a line magic Colab commented out (``# %env X``, at the magic's own
    indentation) is the magic: ``...``, so a ``try:`` or ``if`` whose body it was keeps one."""
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
            escaped = _ESCAPED.match(line) or _HELP.match(line) or (_COLAB_LINE.match(line) if colab else None)
            called = None if escaped else _GET_IPYTHON.match(line)
            if escaped or called:
                match = escaped or called
                assert match is not None
                target = escaped.groupdict().get("target") if escaped else None
                indent = match.group("indent") + (match.groupdict().get("inner") or "")
                out.append(f"{indent}{_nothing(target)}{end}")
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
