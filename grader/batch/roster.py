"""Who is in the class and where each submission is: a directory of submissions or a CSV roster.

Every entry becomes a :class:`Student`, the odd ones too: a plain file among the folders, a hidden
folder, a name that cannot be a directory name (``..``, a trailing space), two entries for one name
(``alice`` and ``alice.zip``).  Those are *refused* (``Student.refused``), each alone, with a gradebook
flag and the reason; the rest of the class is graded as usual."""

from __future__ import annotations

import csv
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from grader.errors import UserError
from grader.gradebook import AMBIGUOUS, BAD_NAME, HIDDEN, NOT_A_SUBMISSION
from grader.submission_time import parse_time
from grader.text import shown


@dataclass(frozen=True)
class Student:
    name: str
    source: str  # absolute local path or git URL; "" when the roster lists no submission
    submitted_at: str | None = None  # from a CSV roster's optional third column
    refused: str = ""  # a gradebook flag when the entry cannot be graded (then ``name`` is its label)
    why: str = ""  # and the reason, for the gradebook's message and the class report


def load_roster(path: Path) -> list[Student]:
    """A directory with one entry per student (folder, archive or git repo), or a CSV roster."""
    path = Path(path)
    if path.is_dir():
        return _roster_from_dir(path)
    if path.is_file():
        return _roster_from_csv(path)
    raise UserError(f"{path}: roster not found (a directory of submissions or a CSV student,path_or_git_url)")


def _roster_from_dir(root: Path) -> list[Student]:
    entries: list[Path] = []
    slots: list[Student | None] = []  # in the folder's order: a refused entry, or None for the next of entries
    for p in sorted(root.iterdir()):
        label = shown(p.name)  # a folder name may be any bytes
        if p.name.startswith((".", "_")):
            slots.append(Student(label, "", refused=HIDDEN, why="a name starting with . or _: rename it to grade it"))
        elif p.is_dir() or _archive_stem(p.name) is not None:
            entries.append(p)
            slots.append(None)
        else:
            why = "a plain file, not a folder, .zip or .tar.gz: put it in a folder to grade it"
            slots.append(Student(label, "", refused=NOT_A_SUBMISSION, why=why))
    if not entries:
        raise UserError(f"{root}: no submissions (expected one folder, .zip or .tar.gz per student)")
    names = strip_common_prefix([shown(_archive_stem(p.name) or p.name) for p in entries])
    students = [Student(name, str(p.resolve())) for name, p in zip(names, entries, strict=True)]
    checked = iter(_checked(students, [shown(p.name) for p in entries]))
    return [slot or next(checked) for slot in slots]


def _roster_from_csv(path: Path) -> list[Student]:
    students, labels = [], []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        try:
            rows = list(csv.reader(fh))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: not a readable CSV roster ({exc})") from None
    for lineno, row in enumerate(rows, start=1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if lineno == 1 and cells[0].lower() == "student":
            continue
        if len(cells) not in (2, 3):
            raise UserError(f"{path}:{lineno}: expected student,path_or_git_url[,submitted_at]")
        name, source = shown(cells[0]), cells[1]
        if source and not _is_git_url(source):
            source = str((path.parent / source).resolve())
        submitted_at = cells[2] if len(cells) == 3 and cells[2] else None
        if submitted_at:
            parse_time(submitted_at, f"{path}:{lineno}")
        students.append(Student(name, source, submitted_at))
        labels.append(f"{name} (line {lineno})")
    return _checked(students, labels)


def _checked(students: list[Student], labels: list[str]) -> list[Student]:
    """Names become directory names: an entry whose name could escape ``students/`` is refused, and
    two entries of one name both are (which one is the student's?); each refusal alone, under its
    ``labels`` entry (the folder's name, the CSV line)."""
    count = Counter(s.name for s in students)
    checked = []
    for s, label in zip(students, labels, strict=True):
        if not s.name or s.name.startswith(".") or any(c in s.name for c in "/\0") or s.name != s.name.strip():
            why = f"{s.name!r} cannot be a student's name (a directory name): rename it to grade it"
            checked.append(Student(label, "", refused=BAD_NAME, why=why))
        elif count[s.name] > 1:
            why = f"{count[s.name]} entries for student {s.name!r}: keep one to grade it"
            checked.append(Student(label, "", refused=AMBIGUOUS, why=why))
        else:
            checked.append(s)
    return checked


def strip_common_prefix(names: list[str]) -> list[str]:
    """``["a9-alice", "a9-bob"] -> ["alice", "bob"]``: GitHub Classroom prefixes every repo with the
    assignment name.  The prefix is cut at its last ``-`` or ``_`` so a shared first letter stays."""
    prefix = os.path.commonprefix(names)  # noqa: RUF071 - names, not paths
    cut = max(prefix.rfind("-"), prefix.rfind("_")) + 1
    stripped = [n[cut:] for n in names]
    return stripped if cut and all(stripped) else names


def _archive_stem(name: str) -> str | None:
    for suffix in (".tar.gz", ".tgz", ".zip"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return None


def _is_git_url(source: str) -> bool:
    return "://" in source or source.startswith("git@")
