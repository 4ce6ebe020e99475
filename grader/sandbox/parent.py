"""A process that dies with its parent: every process of a grading ends when the one that started it
does (grade -> session -> zygote -> leader -> init; batch -> grade), so that a killed grading
leaves nothing running.

PDEATHSIG where the C library has ``prctl`` (Linux); elsewhere a thread that watches the parent.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

from grader.sandbox import libc
from grader.sandbox.libc import PR_SET_PDEATHSIG

#: Set by ``grader batch`` for the grades it starts: the parent's pid, whose death ends the grade
#: (``grader.cli`` arms :func:`die_with_parent` with it).
DIE_WITH_PARENT_ENV = "GRADER_DIE_WITH_PARENT"


def die_with_parent(parent: int, sig: int) -> None:
    """Arm PDEATHSIG, then make sure the parent did not die before it was armed.  Where there is no
    ``prctl`` (macOS, Windows), a thread watches the parent instead."""
    if not libc.has("prctl"):
        _watch_parent(parent)
    else:
        try:
            libc.prctl(PR_SET_PDEATHSIG, sig)
        except OSError:
            os._exit(1)
    if os.getppid() != parent:
        os._exit(1)


PARENT_POLL_S = 0.5


def _watch_parent(parent: int) -> None:
    """Without PDEATHSIG: a thread exits the process once the parent is gone (POSIX: this process was
    re-parented; Windows, where ``getppid`` keeps a dead parent's pid: the parent's handle is signalled)."""
    if sys.platform == "win32":
        kernel32 = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined,unused-ignore]
        handle = kernel32.OpenProcess(0x00100000, False, parent)  # SYNCHRONIZE
        if not handle:
            os._exit(1)

        def gone() -> None:
            kernel32.WaitForSingleObject(handle, 0xFFFFFFFF)  # INFINITE
    else:

        def gone() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_POLL_S)

    def watch() -> None:
        gone()
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="grader-parent-watch").start()
