"""The namespaces of a rank group, made or entered by the group's leader (or probed by a session):
a user namespace where the grader is not root (rootless), the group's network namespace, a PID
namespace whose init is the group's, and the child subreaper that takes back what detached.

A rank's own mount and IPC namespaces are ``isolation``'s (they are part of its layers); the
network namespace itself is made by ``netns`` on the session side.
"""

from __future__ import annotations

import ctypes
import os

from grader.sandbox import libc
from grader.sandbox.libc import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    PR_SET_CHILD_SUBREAPER,
)


def in_user_namespace() -> bool:
    """Is this process in a user namespace other than the host's?  (The initial namespace maps every uid.)"""
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def user_namespaces() -> str:
    """ "" when an unprivileged process may build a rank group's namespaces (user, network, PID, mount,
    IPC) here, else why not.  Probed in a child, which tries exactly that and exits."""
    if not hasattr(os, "fork") or not libc.has("unshare"):
        return "this system has no unshare"
    flags = CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.LIBC.unshare(flags) == 0 else min(ctypes.get_errno(), 255) or 255)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return ""
    err = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
    reason = os.strerror(err) if 0 < err < 255 else "the probe failed"
    return f"unprivileged user namespaces are not available ({reason})"


def join_user_namespace(fd: int) -> None:
    """Leader side, rootless: enter the group's user namespace (an open ``/proc/<pid>/ns/user``), where
    this uid is root, so that the group's network and PID namespaces can be entered and made."""
    libc.check(libc.LIBC.setns(fd, CLONE_NEWUSER), "setns(CLONE_NEWUSER)")


def become_subreaper() -> None:
    """Orphans of our descendants (``setsid`` + double fork) come back to us."""
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)


def new_pid_namespace() -> str:
    """Leader side: the next child is pid 1 of a new PID namespace ("on"), or why not."""
    if libc.LIBC.unshare(CLONE_NEWPID) != 0:
        return f"off: unshare(CLONE_NEWPID): {os.strerror(ctypes.get_errno())}"
    return "on"


def join_network_namespace(fd: int) -> None:
    """Leader side: enter the group's network namespace (an open ``/proc/<pid>/ns/net``), before
    any rank exists, so that every rank and every thread of it is born there."""
    libc.check(libc.LIBC.setns(fd, CLONE_NEWNET), "setns(CLONE_NEWNET)")
