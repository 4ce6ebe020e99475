"""Rank side: the seccomp filter every rank loads before its first line of student code.

Built with libseccomp through PyPI's ``pyseccomp`` (a ctypes binding of the system's
``libseccomp.so.2``), not Debian's ``python3-seccomp``: that one is compiled for Debian's own
``python3`` and cannot be imported from a virtual environment, a pyenv interpreter or a student's
laptop, whereas pyseccomp installs with pip wherever the grader does and needs only the shared
library Debian, Ubuntu and the grader's image already have.

The filter allows everything but what a rank has no business doing: the calls that reach another
process's memory or the kernel's (ptrace, process_vm_*, bpf, perf_event_open, userfaultfd, keys,
modules, kexec, io_uring), the ones that rebuild the sandbox from inside (mount, pivot_root,
unshare, setns, namespace flags on clone), and every way of making traffic beside Gloo's streams.
Denied calls fail with EPERM (clone3 with ENOSYS, so that glibc falls back to clone, whose flags
the filter can read).  The filter is synchronised to every thread (TSYNC), Gloo's included, and
NO_NEW_PRIVS (set by the prctl layer) lets an unprivileged rank load it.  It cannot be removed,
only made stricter.

Only Gloo's streams exist.  The filter is loaded after ``init_process_group``, when Gloo has
already connected every pair of ranks (a full mesh at start-up, read off torch 2.13: no
connection is ever opened later for send/recv or a collective), so from then on a rank needs no
new socket at all: ``socket``, ``socketpair``, ``bind``, ``listen``, ``connect`` and ``accept``
are denied outright (:data:`NO_NEW_SOCKETS`).  That closes datagrams of every protocol, raw and
packet sockets, unix and netlink sockets, a connection of the student's own and the choice of
another loopback address among 127/8, which a filter could not tell apart otherwise (``bind`` and
``connect`` take their address through a pointer, which seccomp cannot read).  On the sockets
Gloo holds, nothing that shapes a packet beyond its payload is left to the rank:
``setsockopt`` is denied (IP options, TOS, TTL, ``IP_HDRINCL``, window clamps, MD5 signatures;
Gloo sets its options, ``TCP_NODELAY``, while it connects), and so is urgent data (``MSG_OOB`` on
``sendto``/``sendmsg``/``sendmmsg``).  What a rank can still do to a Gloo socket is write bytes
into its stream, which the session parses and counts (``grader.runtimes.torchdist.traffic``).
"""

from __future__ import annotations

import errno
import socket
from typing import Any

DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fspick",
)
#: clone flags that create namespaces (CLONE_NEWNS .. CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME).
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x80)
#: Calls that make a socket, a connection or an address: Gloo made all it needs before the filter.
NO_NEW_SOCKETS = ("socket", "socketpair", "bind", "listen", "connect", "accept", "accept4", "setsockopt")
#: (call, index of its flags argument): urgent data sets a header field (URG, the urgent pointer).
MSG_OOB_FLAGS = (("sendto", 3), ("sendmsg", 2), ("sendmmsg", 3))

_filter: Any = None  # built once in the zygote, loaded by each rank


def preload() -> None:
    """Zygote side: build the filter once (loading it is per rank)."""
    global _filter
    _filter = _build()


def _build() -> Any:
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # OSError: pyseccomp is there, libseccomp.so.2 is not
        return f"off: libseccomp is not available ({exc})"
    try:
        f = sc.SyscallFilter(sc.ALLOW)
        f.set_attr(sc.Attr.CTL_TSYNC, 1)
        deny = sc.ERRNO(errno.EPERM)
        for name in (*DENIED, *NO_NEW_SOCKETS):
            try:
                f.add_rule(deny, name)
            except (ValueError, RuntimeError):
                continue  # a call this kernel or architecture does not have
        for flag in NAMESPACE_FLAGS:
            f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for name, flags in MSG_OOB_FLAGS:
            f.add_rule(deny, name, sc.Arg(flags, sc.MASKED_EQ, socket.MSG_OOB, socket.MSG_OOB))
    except (OSError, ValueError, RuntimeError) as exc:
        return f"off: building the seccomp filter failed: {exc}"
    return f


def install() -> str:
    """Rank side, after the uid change and NO_NEW_PRIVS: load the filter on every thread."""
    built = _filter if _filter is not None else _build()
    if isinstance(built, str):
        return built
    try:
        built.load()
    except (OSError, ValueError, RuntimeError) as exc:
        return f"off: loading the seccomp filter failed: {exc}"
    return "on"
