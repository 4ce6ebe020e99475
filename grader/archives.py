"""A submission's ``.zip``/``.tar.gz``/``.tgz``/``.tar`` archive, extracted for the intake to search.

Only regular files and folders come out, at most :data:`MAX_ARCHIVE_MEMBERS` of them, never a
link, a device, a name that climbs out with ``..`` or an absolute one; reading stops once the
members declare :data:`ARCHIVE_DECLARED_FACTOR` times the submission limit, or once what was
written passes it.  A damaged archive yields what came before the damage.  Nothing here is a
failure but an archive that cannot be opened at all: the rest is a problem in plain words, which
``grader.intake`` reports with every other.
"""

from __future__ import annotations

import functools
import lzma
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from grader.errors import UserError
from grader.text import shown

MAX_ARCHIVE_MEMBERS = 20_000
#: An archive's members may declare this many times the submission limit before reading stops
#: (skipping a member of a compressed tar means decompressing it).
ARCHIVE_DECLARED_FACTOR = 8
#: What a damaged archive raises besides the archive modules' own errors.
_ARCHIVE_ERRORS = (OSError, EOFError, RuntimeError, NotImplementedError, ValueError, zlib.error, lzma.LZMAError)


@dataclass
class Bounds:
    """What one extraction may write, what it wrote, and what it refused or cut short."""

    max_file: int  # bytes of one member (one more is written, so that the intake refuses the file)
    max_total: int  # bytes all members may expand to
    max_depth: int  # folder levels of a member
    expanded: int = 0  # bytes written so far
    problems: list[str] = field(default_factory=list)


# One archive entry, whatever the format: (name, kind, declared size, open) with kind "file", "dir",
# or the reason it is refused ("is a symlink", ...); ``open`` yields the bytes of a file.
_Entry = tuple[str, str, int, Callable[[], IO[bytes] | None]]


def extract(archive: Path, out: Path, budget: Bounds, wanted: Collection[str]) -> None:
    """Extract regular files and directories only; refuse anything that could point outside ``out``.
    What was refused or cut short is in ``budget.problems``: of the refusals, only those of a file
    named in ``wanted`` (the rubric's names), the only ones worth telling the student about."""
    names = {PurePosixPath(w).name for w in wanted}
    declared_cap = ARCHIVE_DECLARED_FACTOR * budget.max_total
    declared = 0
    try:
        for count, (name, kind, size, opener) in enumerate(_entries(archive)):
            if count >= MAX_ARCHIVE_MEMBERS:
                budget.problems.append(f"the archive has over {MAX_ARCHIVE_MEMBERS} entries: rest ignored")
                return
            declared += size
            if declared > declared_cap:
                budget.problems.append(f"the archive's members declare over {declared_cap} bytes: rest ignored")
                return
            member = _safe_member(name)
            why = _member_refusal(member, kind, budget.max_depth)
            if why is None and member is not None:
                try:
                    if kind == "dir":
                        (out / member).mkdir(parents=True, exist_ok=True)
                    elif not _write_member(opener, out / member, budget):
                        budget.problems.append(f"the archive expands past {budget.max_total} bytes: stopped there")
                        return
                except OSError as exc:  # a name too long, a file where a folder was, ...
                    why = f"cannot be written ({exc.strerror})"
            # Only refusals of files the rubric asks for are worth telling the student about.
            if why is not None and PurePosixPath(name.replace("\\", "/")).name in names:
                budget.problems.append(f"{shown(name)} in the archive {why}: refused")
    except (zipfile.BadZipFile, tarfile.TarError, *_ARCHIVE_ERRORS) as exc:
        budget.problems.append(f"the archive is damaged ({shown(str(exc))}): only the part before it was read")


def _member_refusal(member: PurePosixPath | None, kind: str, max_depth: int) -> str | None:
    """Why an archive member is not extracted, or None when it is."""
    if member is None:
        return "points outside the archive"
    if len(member.parts) > max_depth:
        return f"is nested over {max_depth} folders deep"
    return None if kind in ("file", "dir") else kind


def _entries(archive: Path) -> Iterator[_Entry]:
    lower = archive.name.lower()
    shown_name = shown(str(archive))
    if not lower.endswith((".zip", ".tar.gz", ".tgz", ".tar")):
        raise UserError(f"{shown_name} is neither a directory, a .zip/.tar.gz archive nor a git repository")
    try:
        opened = zipfile.ZipFile(archive) if lower.endswith(".zip") else tarfile.open(archive)  # noqa: SIM115
    except (zipfile.BadZipFile, tarfile.TarError, *_ARCHIVE_ERRORS) as exc:
        raise UserError(f"{shown_name} is not a readable archive: {shown(str(exc))}") from exc
    with opened:
        if isinstance(opened, zipfile.ZipFile):
            for info in opened.infolist():
                kind = "is a symlink" if stat.S_ISLNK(info.external_attr >> 16) else "file"
                kind = "dir" if info.filename.endswith("/") else kind  # is_dir() fails on an empty name
                yield info.filename, kind, info.file_size, functools.partial(opened.open, info)
        else:
            for tinfo in opened:
                kind = "dir" if tinfo.isdir() else "file" if tinfo.isreg() else _tar_kind(tinfo)
                yield tinfo.name, kind, tinfo.size, functools.partial(opened.extractfile, tinfo)


def _tar_kind(info: tarfile.TarInfo) -> str:
    return "is a symlink" if info.issym() else "is a hard link" if info.islnk() else "is not a regular file"


def _safe_member(name: str) -> PurePosixPath | None:
    """The member's relative path, or None when it is empty, absolute or climbs out with ``..``."""
    member = PurePosixPath(name.replace("\\", "/"))
    if not member.parts or member.is_absolute() or ":" in member.parts[0] or ".." in member.parts:
        return None
    return member


def _write_member(opener: Callable[[], IO[bytes] | None], target: Path, budget: Bounds) -> bool:
    """Write at most max_file + 1 bytes (enough for the copy step to refuse an oversize file);
    return False once the archive's expanded size passes the total budget."""
    target.parent.mkdir(parents=True, exist_ok=True)
    src = opener()
    if src is None:  # tarfile's answer for a member without data
        return True
    written = 0
    with src, open(target, "wb") as out:
        while written <= budget.max_file and (chunk := src.read(1 << 16)):
            chunk = chunk[: budget.max_file + 1 - written]
            out.write(chunk)
            written += len(chunk)
            budget.expanded += len(chunk)
            if budget.expanded > budget.max_total:
                return False
    return True
