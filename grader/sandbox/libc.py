"""The C library, called where Python has no binding: unshare, setns, mount, pivot_root, prctl.

:data:`LIBC` is None where there is no ``dlopen(NULL)`` (Windows), and :func:`has` says which calls
this system's library has (``prctl`` and ``unshare`` are Linux's alone).  Callers read ``libc.LIBC``
when they call, never a copy taken at import, so that a test can take the library away.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38


def _load() -> Any:
    """The C library, or None where there is no ``dlopen(NULL)`` (Windows)."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except (OSError, TypeError):
        return None


LIBC = _load()


def has(name: str) -> bool:
    """Does this system's C library have ``name``?"""
    return LIBC is not None and hasattr(LIBC, name)


def check(result: int, what: str) -> None:
    """A call's result: 0, or an ``OSError`` naming ``what`` failed and why (errno)."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, value: int) -> None:
    if LIBC.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
