"""Open a submission's file without following a link at any component of its path.

A student controls every name in a submission: ``src -> /elsewhere`` must be refused like
``collectives.py -> /elsewhere``, and a FIFO or device must never be opened (it could block or
read the grader's machine).  ``grader.intake`` reads every file it copies or looks at through
:func:`open_nofollow`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath


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
                    raise Refused(where, f"is {_kind(mode)}")
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
            raise Refused(where, f"is {_kind(mode)}")
    try:
        return os.open(root.joinpath(*parts), os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise Refused("/".join(parts), f"cannot be read ({exc.strerror})") from exc


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device file"),
        (stat.S_ISBLK, "a device file"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ]
    return next((text for test, text in kinds if test(mode)), "not a regular file")
