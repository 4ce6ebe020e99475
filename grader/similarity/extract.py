"""What the similarity check compares of a submission: its graded code as the pack reads it, never run.

A submission is taken as ``grader grade`` takes it (``grader.intake.take``: a folder, an archive, a
git repository or URL; only the rubric's files), then the pack says what of it is graded code
(``AssignmentPack.compared``).  The default, for a pack of modules or a script (A9, A4), is every
definition the pack's ``function_of`` names: a function, a class, or a method (``Class.method``, or a
method named alone, as A9's ``forward_ulysses``), read by the hand-in readers, as the ranks read them.
The starter and the instructor's boilerplate go through the same readers, so what they hold is
compared with exactly what a student's copy of it becomes.
"""

from __future__ import annotations

import ast
import tempfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from grader.errors import UserError
from grader.handin import DEFINITION, Extraction, notebook, script
from grader.handin.blocks import is_python, python_source
from grader.handin.report import read_report
from grader.intake import take
from grader.pack import AssignmentPack, CodePiece
from grader.rubric import Rubric
from grader.text import shown


@dataclass(frozen=True)
class Taken:
    """One student's graded code, or why there is none to compare."""

    student: str
    pieces: list[CodePiece]
    problem: str = ""  # why nothing was compared: the submission could not be read, holds no graded code


def graded_code(pack: AssignmentPack, root: Path) -> list[CodePiece]:
    """The graded code of the hand-in at ``root`` (a sandbox, or the starter's folder), in the pack's order."""
    if pack.compared is not None:
        return pack.compared(root)
    graded = {name.split(" ", 1)[0] for name in pack.function_of.values()}  # "X (inputs)" grades X
    pieces: list[CodePiece] = []
    for module in dict.fromkeys(pack.module_of.values()):
        found = read_module(pack, root, module)
        if found is not None:
            pieces += definitions(found, graded)
    return pieces


def read_module(pack: AssignmentPack, root: Path, module: str) -> Extraction | None:
    """A student module read as its ranks read it (a notebook's cells, a script's definitions), from the
    first of its files the hand-in holds; None when it holds none.  Nothing of it runs."""
    candidates = pack.files_of(module)
    reader = notebook.read if any(name.endswith(".ipynb") for name in candidates) else script.read
    for name in candidates:
        path = root / name
        if path.is_file():
            try:
                return reader(path)
            except ValueError:  # not a notebook: nothing to compare, as the ranks would grade nothing
                return None
    return None


def definitions(found: Extraction, names: Collection[str] | None = None) -> list[CodePiece]:
    """The winning definitions of ``found`` (the last of each name, as grading takes them) named in
    ``names`` (``f``, ``Class``, ``Class.method``; a method named alone is found in any class), each
    with its source as the student wrote it; None: every definition."""
    pieces = []
    lines: dict[int, list[str]] = {}  # per chunk, split once: ``ast.get_source_segment`` splits per node
    for statement in found.statements:
        node = statement.node
        if not isinstance(node, DEFINITION) or found.definition(statement.name) is not statement:
            continue
        chunk = statement.chunk
        text = lines.setdefault(id(chunk), chunk.source.splitlines(keepends=True))
        if names is None or node.name in names:
            pieces.append(_piece(chunk.label, node.name, node, text))
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, DEFINITION) and (member.name in names or f"{node.name}.{member.name}" in names):
                    pieces.append(_piece(chunk.label, f"{node.name}.{member.name}", member, text))
    return pieces


def _piece(label: str, name: str, node: ast.stmt, lines: list[str]) -> CodePiece:
    """The definition's whole lines, from its ``def`` or ``class`` line (decorators are not its code)."""
    return CodePiece(f"{label}: {name}", "".join(lines[node.lineno - 1 : node.end_lineno]))


def report_snippets(report: Path) -> list[CodePiece]:
    """Every Python code block of a Markdown report, per question in the report's order (A5's hand-in),
    each read by the one reader grading uses (``grader.handin.blocks``): the same fence tags, dedent,
    console prompts stripped and IPython's syntax read as IPython reads it."""
    if not report.is_file():
        return []
    read = read_report(report.read_text(encoding="utf-8", errors="replace"))
    blocks = [(f"{report.name}, before any question", block) for block in read.unheaded]
    for answer in read.answers.values():
        blocks += [(f"{report.name}, {answer.question}", block) for block in answer.code]
    return [
        CodePiece(f"{where} (line {block.line})", python_source(block.text))
        for where, block in blocks
        if is_python(block.info)
    ]


def starter_code(pack: AssignmentPack, boilerplate: Iterable[Path] = ()) -> list[CodePiece]:
    """What is never evidence: the pack's starter (a folder read as a hand-in, a file whole) and the
    instructor's ``--boilerplate`` files (a notebook's cells and a report's snippets, else the whole file)."""
    pieces = []
    for path in pack.starter:
        if path.is_dir():
            pieces += graded_code(pack, path)
        elif path.is_file():
            pieces.append(CodePiece(path.name, path.read_text(encoding="utf-8", errors="replace")))
        else:
            raise UserError(
                f"the starter of {pack.id}, {path}, is not here: run the similarity check from a checkout of the "
                "grader (scripts/install.sh), or name the starter's files with --boilerplate"
            )
    for path in boilerplate:
        if not path.is_file():
            raise UserError(f"--boilerplate {shown(str(path))}: no such file")
        if path.suffix == ".ipynb":
            cells = dict.fromkeys(statement.chunk for statement in notebook.read(path).statements)
            pieces += [CodePiece(cell.label, cell.source) for cell in cells]
        elif path.suffix == ".md":
            pieces += report_snippets(path)
        else:
            pieces.append(CodePiece(path.name, path.read_text(encoding="utf-8", errors="replace")))
    return pieces


def take_graded_code(student: str, source: str, pack: AssignmentPack, rubric: Rubric) -> Taken:
    """A roster entry's graded code: its submission taken as ``grader grade`` takes it (only the rubric's
    files, no link followed, nothing run), then read by the pack.  Bad input is a problem, never an error."""
    if not source:
        return Taken(student, [], "no submission")
    with tempfile.TemporaryDirectory(prefix="grader-similarity-") as tmp:
        try:
            intake = take(source, rubric, Path(tmp) / "sandbox")
        except UserError as exc:
            return Taken(student, [], str(exc))
        try:
            pieces = [piece for piece in graded_code(pack, intake.sandbox) if piece.source.strip()]
        except (ValueError, RecursionError, MemoryError) as exc:  # the parser's limits, met by a hostile file
            return Taken(student, [], f"its graded code could not be read ({type(exc).__name__}: {str(exc)[:200]})")
    if not pieces:
        files = ", ".join(rubric.student_files)
        return Taken(student, [], f"no graded code found (looked in {files})")
    return Taken(student, pieces)
