"""Hand-in readers: the definitions a handout names, taken out of whatever the student hands in.

A pack chooses a reader for its hand-in: a tree of modules it imports (no reader: the rank imports
them), a script whose module level must never run (``script``), a notebook (``notebook``), or the
snippets of a report (A5's ``report``).  Every reader turns its file into :class:`Chunk` s of
Python source in document order; :func:`extract` is the one piece that takes the named
definitions out of them by AST, so a missing, duplicated, renamed or unparsable definition reads
the same in every pack's feedback.  Readers and extraction run where student code runs (a rank):
parsing is the first thing a submission's bytes go through.

The shared API, for a new reader: produce ``list[Chunk]``; call ``extract(chunks, file)``; ask
the :class:`Extraction` for ``named(name)`` (the winning definition, or a NotImplementedError
that says why not) and ``execute(namespace, ...)`` (compile the kept statements with the student's
own line numbers, in document order).
"""

from __future__ import annotations

import ast
import difflib
import linecache
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

#: Statements a definition is: what :func:`extract` keeps of a chunk's top level.
DEFINITION = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
IMPORT = (ast.Import, ast.ImportFrom)


#: Between a hand-in's path and the part of it a chunk is, in a chunk's file name ("hw12.ipynb, cell 7").
PART = ", "


def hand_in_file(filename: str) -> str:
    """The hand-in a chunk's file name belongs to: ``hw12.ipynb, cell 7`` -> ``hw12.ipynb`` (the policy's key)."""
    return filename.split(PART, 1)[0]


@dataclass(frozen=True)
class Chunk:
    """One piece of Python source in a hand-in: a script, a notebook cell, a report's code block."""

    source: str
    label: str  # how feedback names it: "assignment4.py", "hw12.ipynb, cell 7"
    filename: str  # its code objects' file name: the sandbox path, then PART and the part for a piece of it


@dataclass(frozen=True)
class Statement:
    """A top-level definition or import, with the chunk it came from."""

    node: ast.stmt
    chunk: Chunk

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "")


@dataclass
class Extraction:
    """What a hand-in defines: each named definition once (the last in document order), its imports,
    and what feedback should say about the rest."""

    file: str  # the hand-in's name, for messages
    statements: list[Statement] = field(default_factory=list)  # kept, in document order
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # name -> labels of every definition
    unparsable: list[str] = field(default_factory=list)  # "cell 5 line 3: invalid syntax\n    x = (\n      ^"
    skipped: list[str] = field(default_factory=list)  # "cell 4 is %%bash: IPython hands its text to ..."
    #: each statement's code, compiled at its first :meth:`execute`: a rank reuses one extraction for
    #: every case (``notebook.read``), and compiling a notebook's definitions was a millisecond of each
    _code: dict[int, CodeType] = field(default_factory=dict, init=False, repr=False, compare=False)

    def definition(self, name: str) -> Statement | None:
        found = [s for s in self.statements if isinstance(s.node, DEFINITION) and s.name == name]
        return found[-1] if found else None

    def named(self, name: str, given: Collection[str] = ()) -> Statement:
        """The definition of ``name`` or a NotImplementedError saying it is missing (renamed? in a
        chunk that did not parse?).  ``given`` are the handout's own names: never a rename's candidates."""
        found = self.definition(name)
        if found is not None:
            return found
        defined = sorted({s.name for s in self.statements if isinstance(s.node, DEFINITION)} - set(given))
        close = difflib.get_close_matches(name, defined, n=1)
        hint = f"; did you rename it to {close[0]}?" if close else ""
        if self.unparsable:
            hint += "; these parts could not be read: " + "; ".join(self.unparsable)
        if self.skipped:
            hint += "; these cells are not read as Python: " + "; ".join(self.skipped)
        raise NotImplementedError(f"{self.file} defines no {name}, the name the handout gives it{hint}")

    def notes(self, names: tuple[str, ...] = ()) -> list[str]:
        """Feedback about duplicated definitions (of ``names``, or of any name)."""
        return [
            f"{name} is defined {len(labels)} times ({', '.join(labels)}): the last one, in {labels[-1]}, is graded, "
            "as a fresh 'Restart and run all' would leave it"
            for name, labels in sorted(self.duplicates.items())
            if not names or name in names
        ]

    def execute(
        self, namespace: dict[str, Any], *, imports: bool = True, skip: frozenset[str] = frozenset(), keep: Any = None
    ) -> None:
        """Run the winning definitions (and the imports unless ``imports`` is False) in document order
        in ``namespace``, with the student's own file names and line numbers.  Names in ``skip`` are not
        defined from the hand-in (the grader's own copies stand there); ``keep(node)`` may refuse more."""
        winners = {id(self.definition(s.name)) for s in self.statements if isinstance(s.node, DEFINITION)}
        for index, statement in enumerate(self.statements):
            node = statement.node
            if isinstance(node, DEFINITION) and (id(statement) not in winners or statement.name in skip):
                continue
            if isinstance(node, IMPORT) and not imports:
                continue
            if keep is not None and not keep(node):
                continue
            code = self._code.get(index)
            if code is None:
                code = compile(ast.Module(body=[node], type_ignores=[]), statement.chunk.filename, "exec")
                self._code[index] = code
            exec(code, namespace)


class LastRead:
    """A reader's last hand-in, kept while the file's bytes are the same: a rank reads the same hand-in
    for each of its cases, and parsing and compiling it again was most of a small case's time (A4's
    script: 7.8 ms a case, 0.15 ms reused).  What it returns is read only, so it is shared."""

    def __init__(self, parse: Callable[[Path, str], Extraction]) -> None:
        self._parse = parse  # (path, text) -> Extraction
        self._key: tuple[str, bytes] | None = None
        self._found: Extraction | None = None

    def __call__(self, path: Path) -> Extraction:
        data = path.read_bytes()
        if self._found is None or self._key != (str(path), data):
            self._found = self._parse(path, data.decode("utf-8", "replace"))
            self._key = (str(path), data)
        return self._found


def extract(chunks: list[Chunk], file: str) -> Extraction:
    """Top-level definitions and imports of ``chunks``, in document order; a chunk that does not parse
    is reported (line and caret) and contributes nothing."""
    found = Extraction(file)
    labels: dict[str, list[str]] = {}
    for chunk in chunks:
        _remember(chunk)
        try:
            tree = ast.parse(chunk.source, chunk.filename)
        except SyntaxError as exc:
            found.unparsable.append(describe_syntax_error(exc, chunk.label))
            continue
        for node in tree.body:
            if isinstance(node, DEFINITION):
                labels.setdefault(node.name, []).append(f"{chunk.label} line {node.lineno}")
                found.statements.append(Statement(node, chunk))
            elif isinstance(node, IMPORT):
                found.statements.append(Statement(node, chunk))
    found.duplicates = {name: where for name, where in labels.items() if len(where) > 1}
    return found


def describe_syntax_error(exc: SyntaxError, label: str) -> str:
    """``label line N: message`` and the line with a caret under the offending column."""
    caret = ""
    if exc.text:
        caret = "\n    " + exc.text.rstrip("\n") + "\n    " + " " * max((exc.offset or 1) - 1, 0) + "^"
    return f"{label} line {exc.lineno}: {exc.msg}{caret}"


def _remember(chunk: Chunk) -> None:
    """Tracebacks through a chunk's code show its lines (the compiled file name is no file on disk)."""
    lines = chunk.source.splitlines(keepends=True)
    linecache.cache[chunk.filename] = (len(chunk.source), None, lines, chunk.filename)
