"""Session side: a network namespace for one rank group, with only ``lo``, and a capture of it.

A short-lived helper process (forked from the session, never running student code) makes the
namespace, brings ``lo`` up, opens a packet socket on it and hands the session two descriptors
over a socketpair: the namespace itself (for the group's leader to ``setns`` into) and the packet
socket (``grader.runtimes.torchdist.traffic``).  The descriptors keep the namespace alive; the helper exits.

As root that is all (namespaces and packet sockets need CAP_SYS_ADMIN, CAP_NET_ADMIN and
CAP_NET_RAW).  Rootless, the helper first makes a user namespace in which its uid is root (a
one-uid map: ``0 <uid> 1``), which gives it those capabilities over the network namespace it then
makes, and hands over a third descriptor, the user namespace, which the group's leader joins first
(``isolation.join_user_namespace``) to be allowed into the network namespace and to make the PID one.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
from dataclasses import dataclass

from grader.runtimes.torchdist.traffic import Capture

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@dataclass
class GroupNetwork:
    netns: int  # an open /proc/<pid>/ns/net of the group's namespace
    capture: socket.socket  # a packet socket bound to that namespace's lo
    userns: int | None = None  # rootless: an open /proc/<pid>/ns/user that owns the network namespace

    def close(self) -> None:
        os.close(self.netns)
        if self.userns is not None:
            os.close(self.userns)
        self.capture.close()


def loopback_namespace(rootless: bool = False) -> GroupNetwork:
    """A new network namespace where only ``lo`` is up, and a packet socket on it; ``rootless``: inside
    a new user namespace of its own.

    Raises OSError (with the helper's reason) when namespaces or packet sockets are not permitted.
    """
    wanted = 3 if rootless else 2
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the helper: a few system calls, then _exit
        parent.close()
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if rootless:
                _own_user_namespace(libc)
            if libc.unshare(CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET): " + os.strerror(ctypes.get_errno()))
            _bring_up_lo()
            capture = Capture.open_in_current_namespace()
            fds = [os.open("/proc/self/ns/net", os.O_RDONLY), capture.fileno()]
            if rootless:
                fds.append(os.open("/proc/self/ns/user", os.O_RDONLY))
            socket.send_fds(child, [b"ok"], fds)
        except BaseException as exc:
            child.send(f"no network namespace: {exc}".encode()[:500])
            os._exit(1)
        os._exit(0)
    child.close()
    try:
        message, fds, _, _ = socket.recv_fds(parent, 1024, wanted)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if message != b"ok" or len(fds) != wanted:
        for fd in fds:
            os.close(fd)
        raise OSError(message.decode(errors="replace") or "no network namespace: the helper died")
    return GroupNetwork(fds[0], socket.socket(fileno=fds[1]), fds[2] if rootless else None)


def _own_user_namespace(libc: ctypes.CDLL) -> None:
    """The helper becomes root of a new user namespace that maps only its own uid and gid."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER): " + os.strerror(ctypes.get_errno()))
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def _bring_up_lo() -> None:
    import fcntl  # Linux only, like everything here; imported here so the module imports anywhere

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
