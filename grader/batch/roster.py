"""Who is in the class and where each submission is: a directory of submissions or a CSV roster."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from grader.errors import UserError
from grader.submission_time import parse_time
from grader.text import shown


@dataclass(frozen=True)
class Student:
    name: str
    source: str  # absolute local path or git URL; "" when the roster lists no submission
    submitted_at: str | None = None  # from a CSV roster's optional third column


def load_roster(path: Path) -> list[Student]:
    """A directory with one entry per student (folder, archive or git repo), or a CSV roster."""
    path = Path(path)
    if path.is_dir():
        return _roster_from_dir(path)
    if path.is_file():
        return _roster_from_csv(path)
    raise UserError(f"{path}: roster not found (a directory of submissions or a CSV student,path_or_git_url)")


def _roster_from_dir(root: Path) -> list[Student]:
    entries = sorted(
        p
        for p in root.iterdir()
        if not p.name.startswith((".", "_")) and (p.is_dir() or _archive_stem(p.name) is not None)
    )
    if not entries:
        raise UserError(f"{root}: no submissions (expected one folder, .zip or .tar.gz per student)")
    names = [shown(_archive_stem(p.name) or p.name) for p in entries]  # a folder name may be any bytes
    names = strip_common_prefix(names)
    return _checked([Student(name, str(p.resolve())) for name, p in zip(names, entries, strict=True)], root)


def _roster_from_csv(path: Path) -> list[Student]:
    students = []
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
    return _checked(students, path)


def _checked(students: list[Student], where: Path) -> list[Student]:
    """Names become directory names: refuse anything that could escape ``students/`` or collide."""
    seen: set[str] = set()
    for s in students:
        if not s.name or s.name.startswith(".") or any(c in s.name for c in "/\0") or s.name != s.name.strip():
            raise UserError(f"{where}: {s.name!r} is not usable as a student name")
        if s.name in seen:
            raise UserError(f"{where}: student {s.name!r} appears twice")
        seen.add(s.name)
    return students


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
