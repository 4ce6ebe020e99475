"""Session side: a network namespace for one rank group, with only ``lo``, and a capture of it.

A short-lived helper process (forked from the session, never running student code) makes the
namespace, brings ``lo`` up, opens a packet socket on it and hands the session two descriptors
over a socketpair: the namespace itself (for the group's leader to ``setns`` into) and the packet
socket (``grader.runtimes.torchdist.traffic``).  The descriptors keep the namespace alive; the helper exits.
Root only (namespaces and packet sockets need CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_NET_RAW).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
from dataclasses import dataclass

from grader.runtimes.torchdist.traffic import Capture

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@dataclass
class GroupNetwork:
    netns: int  # an open /proc/<pid>/ns/net of the group's namespace
    capture: socket.socket  # a packet socket bound to that namespace's lo

    def close(self) -> None:
        os.close(self.netns)
        self.capture.close()


def loopback_namespace() -> GroupNetwork:
    """A new network namespace where only ``lo`` is up, and a packet socket on it.

    Raises OSError (with the helper's reason) when namespaces or packet sockets are not permitted.
    """
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the helper: a few system calls, then _exit
        parent.close()
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET): " + os.strerror(ctypes.get_errno()))
            _bring_up_lo()
            capture = Capture.open_in_current_namespace()
            netns = os.open("/proc/self/ns/net", os.O_RDONLY)
            socket.send_fds(child, [b"ok"], [netns, capture.fileno()])
        except BaseException as exc:
            child.send(f"no network namespace: {exc}".encode()[:500])
            os._exit(1)
        os._exit(0)
    child.close()
    try:
        message, fds, _, _ = socket.recv_fds(parent, 1024, 2)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if message != b"ok" or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        raise OSError(message.decode(errors="replace") or "no network namespace: the helper died")
    return GroupNetwork(fds[0], socket.socket(fileno=fds[1]))


def _bring_up_lo() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
