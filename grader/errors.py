"""The kinds of failure the CLI tells apart."""

from __future__ import annotations

import errno
from pathlib import Path

#: Errors of the machine, not of the grader or its input: the disk is full, read-only, or not ours.
_ALWAYS_ENVIRONMENT = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
_DENIED = {errno.EACCES, errno.EPERM}
ENVIRONMENT_EXIT = 3


class UserError(Exception):
    """Bad input the user can fix: a malformed rubric, a missing path.  Exit status 1."""


class GraderError(Exception):
    """The grader itself could not run.  Exit status 2; never blamed on a student."""


def environment_fault(exc: BaseException, under: Path | None = None) -> bool:
    """Whether ``exc`` is the machine's fault (exit status 3): out of space or quota, a read-only file
    system anywhere, or permission denied on a path under ``under`` (anywhere when ``None``)."""
    if not isinstance(exc, OSError):
        return False
    if exc.errno in _ALWAYS_ENVIRONMENT:
        return True
    if exc.errno not in _DENIED:
        return False
    return under is None or (exc.filename is not None and Path(str(exc.filename)).is_relative_to(under))


def named(exc: OSError, path: Path | str) -> OSError:
    """``exc``, an error that names no file (a write to a file already open fails so), naming ``path``:
    the message then says where to free space.  Its callers know which path a failed write was for."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def explain_environment(exc: OSError) -> str:
    """One line naming the path, what went wrong and what to do."""
    where = exc.filename if exc.filename is not None else "a file of the output directory"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        todo = "free some space there (or give another --out)"
    elif exc.errno == errno.EROFS:
        todo = "the file system is read-only: give an --out on a writable one"
    else:
        todo = "give this account access there (or another --out)"
    return (
        f"{where}: {exc.strerror}. This is the machine, not the grader: {todo}, then rerun "
        "the same command; every grading finished so far is kept"
    )
