"""A Markdown code block read as Python: which blocks are Python, and the source each one is.

One reader for everything that reads a report's code: the A5 pack grades what :func:`python_source`
returns (``grader.packs.a5.snippets`` parses it), and the similarity check fingerprints the same text
(``grader.similarity.extract``), so no fence tag or prompt style is graded and left uncompared.

- A block is Python unless its info string's first word says it is not (:data:`NOT_PYTHON`):
  untagged, ``python``, ``py3``, ``python3.11``, ``ipython``, ``pycon``, MyST's ``{python}`` and
  ``{code-cell} ipython3`` all are.
- Its text is dedented and read as a console session when its first line is a prompt (``>>> `` or
  IPython's ``In [1]: ``): the prompted lines (``>>> ``, ``... ``, ``In [n]: ``, ``   ...: ``) are
  the code, without their prompts, and the others are output, dropped, as doctest reads a session.
  Outside a session, a line's ``>>> `` is still stripped.
- IPython's own syntax (``%magic``, ``!cmd``) is read as IPython reads it (:func:`grader.handin.ipython.as_python`).

Every line keeps its number, so a syntax error or a traceback still points at the report's line.
"""

from __future__ import annotations

import re
import textwrap

from grader.handin.ipython import as_python

#: info strings that say a block is not Python (output, shell, data); a shape written as text is still tried
NOT_PYTHON = frozenset(
    {
        "answers",
        "bash",
        "sh",
        "shell",
        "console",
        "output",
        "text",
        "txt",
        "plain",
        "log",
        "json",
        "yaml",
        "markdown",
    }
)
#: a session's first line: the classic ``>>>`` prompt or IPython's ``In [n]:``
_SESSION = re.compile(r"^(>>>|In \[\d*\]:)( |$)")
#: a prompt of a session's line, first or continued (IPython's classic and ipython prompt strippers)
_PROMPT = re.compile(r"^(>>>|\.\.\.|In \[\d*\]:|[ \t]*\.\.\.:)( |$)")


def is_python(info: str) -> bool:
    """Whether a block with this info string is read as Python (its first word, MyST's braces kept)."""
    words = info.split()
    return not words or words[0].lower() not in NOT_PYTHON


def python_source(text: str) -> str:
    """The block's text as the Python it holds, each line at its own number (see the module)."""
    lines = textwrap.dedent(text.replace("\t", "    ")).splitlines()
    first = next((line for line in lines if line.strip()), "")
    if _SESSION.match(first):
        lines = [line[match.end() :] if (match := _PROMPT.match(line)) else "" for line in lines]
    else:
        lines = [line[4:] if line.startswith(">>> ") else line for line in lines]
    return as_python("\n".join(lines))
