"""Open a submission's file without following a link at any component of its path.

A student controls every name in a submission: ``src -> /elsewhere`` must be refused like
``collectives.py -> /elsewhere``, and a FIFO or device must never be opened (it could block or
read the grader's machine).  ``grader.intake`` reads every file it copies or looks at through
:func:`open_nofollow`; ``grader.seal`` reads a batch's cached gradings with :func:`walk` and
:func:`copy_nofollow`, so that what it checks is what rescoring reads.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO

_CHUNK = 1 << 20


class Refused(Exception):
    """A path that is not opened: ``where`` is the component that failed, the message says why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(why)
        self.where = where


def open_nofollow(root: Path, relpath: str) -> int:
    """Open the regular file ``root/relpath`` read-only without following a symlink at any component.

    Each component is looked at with ``lstat`` before it is opened (a device or FIFO is never
    opened) and opened with ``O_NOFOLLOW`` relative to its parent, so a swap in between fails closed.
    """
    parts = PurePosixPath(relpath).parts
    if os.open not in os.supports_dir_fd:  # Windows: no dir_fd, O_NOFOLLOW or O_DIRECTORY
        return _open_checked_path(root, parts)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            where = "/".join(parts[: i + 1])
            try:
                mode = os.lstat(part, dir_fd=fd).st_mode
                if not (stat.S_ISREG(mode) if last else stat.S_ISDIR(mode)):
                    raise Refused(where, f"is {kind(mode)}")
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY)
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                raise Refused(where, f"cannot be read ({exc.strerror})") from exc
            os.close(fd)
            fd = child
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(relpath, "changed while it was being read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def walk(root: Path, names: Iterable[str]) -> Iterator[tuple[str, os.stat_result]]:
    """``(relative path, lstat)`` of each of ``names`` under ``root`` that exists and of everything under
    each that is a directory, a directory before what it holds, in name order.  A link is an entry,
    never a directory to enter; a directory swapped for a link while it is listed is refused when a
    file under it is opened (:func:`copy_nofollow`)."""
    for name in names:
        try:
            info = os.lstat(root / name)
        except FileNotFoundError:
            continue
        yield name, info
        if stat.S_ISDIR(info.st_mode):
            yield from walk(root, sorted(f"{name}/{child}" for child in os.listdir(root / name)))


def copy_nofollow(root: Path, relpath: str, out: IO[bytes] | None = None) -> str:
    """The SHA-256 of the regular file ``root/relpath``, opened by :func:`open_nofollow` and read once,
    written to ``out`` too when given: the bytes hashed are the bytes kept.  A file with another name
    (a hard link, which whoever holds the other name can rewrite) is refused like a symlink."""
    fd = open_nofollow(root, relpath)
    with os.fdopen(fd, "rb") as src:
        if os.fstat(src.fileno()).st_nlink != 1:
            raise Refused(relpath, "is hard-linked")
        digest = hashlib.sha256()
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
    return digest.hexdigest()


def _open_checked_path(root: Path, parts: tuple[str, ...]) -> int:
    """Where descriptors cannot be walked (Windows): every component ``lstat``-ed by path (no link, the
    last a regular file) before the file is opened.  Not race-free as the descriptor walk is: enough
    for a student grading their own checkout, which is advisory there (the portable runtime)."""
    for i in range(len(parts)):
        where = "/".join(parts[: i + 1])
        last = i == len(parts) - 1
        try:
            mode = os.lstat(root.joinpath(*parts[: i + 1])).st_mode
        except OSError as exc:
            raise Refused(where, f"cannot be read ({exc.strerror})") from exc
        if not (stat.S_ISREG(mode) if last else stat.S_ISDIR(mode)):
            raise Refused(where, f"is {kind(mode)}")
    try:
        return os.open(root.joinpath(*parts), os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise Refused("/".join(parts), f"cannot be read ({exc.strerror})") from exc


def kind(mode: int) -> str:
    """What a file of this ``lstat`` mode is, in words: "a symlink", "a FIFO", "a directory"..."""
    kinds = [
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device file"),
        (stat.S_ISBLK, "a device file"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ]
    return next((text for test, text in kinds if test(mode)), "not a regular file")
