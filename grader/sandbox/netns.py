"""Session side: a network namespace for one rank group, with only ``lo``, and a capture of it.

The session ends up with two descriptors: the namespace itself (for the group's leader to
``setns`` into) and a packet socket on its ``lo`` (``grader.runtimes.torchdist.traffic``).  The
descriptors keep the namespace alive.

As root (namespaces and packet sockets need CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_NET_RAW) the
session's own thread makes the namespace, brings ``lo`` up, opens the socket and returns to its own
namespace: no process is forked, which from a session that imported torch cost 20-30 ms a group
(issue 23).  Rootless, a short-lived helper process (forked from the session, never running student
code) does it, since a user namespace cannot be left again: it first makes a user namespace in which
its uid is root (a one-uid map: ``0 <uid> 1``), which gives it those capabilities over the network
namespace it then makes, and hands over the two descriptors and a third, the user namespace, which
the group's leader joins first (``namespaces.join_user_namespace``) to be allowed into the network
namespace and to make the PID one.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
from dataclasses import dataclass

from grader.runtimes.torchdist.traffic import Capture
from grader.sandbox import libc
from grader.sandbox.libc import CLONE_NEWNET, CLONE_NEWUSER

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@dataclass
class GroupNetwork:
    netns: int  # an open /proc/<pid>/ns/net of the group's namespace
    capture: socket.socket  # a packet socket bound to that namespace's lo
    userns: int | None = None  # rootless: an open /proc/<pid>/ns/user that owns the network namespace

    def close(self) -> None:
        """Safe to run again (a group's close cut short is finished by the next): each descriptor is closed
        once, since by the second time its number may be another file's."""
        for fd in (self.netns, self.userns):
            if fd is not None and fd >= 0:
                os.close(fd)
        self.netns, self.userns = -1, None
        self.capture.close()


def loopback_namespace(rootless: bool = False) -> GroupNetwork:
    """A new network namespace where only ``lo`` is up, and a packet socket on it; ``rootless``: inside
    a new user namespace of its own.

    Raises OSError (with the reason) when namespaces or packet sockets are not permitted.
    """
    return _made_by_helper() if rootless else _made_here()


def _made_here() -> GroupNetwork:
    """Root: this thread enters a new network namespace, sets it up and comes back (a network
    namespace is per thread; the rest of the process never leaves its own)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    capture: socket.socket | None = None
    try:
        try:
            capture = _new_loopback()
            return GroupNetwork(os.open("/proc/thread-self/ns/net", os.O_RDONLY), capture)
        finally:  # back home, also when the unshare itself failed (then this thread never left)
            if libc.LIBC.setns(home, CLONE_NEWNET) != 0:  # never go on in the group's namespace
                raise RuntimeError(f"could not return to the session's network namespace: {_errno()}")
    except OSError as exc:
        if capture is not None:
            capture.close()
        raise OSError(f"no network namespace: {exc}") from exc
    finally:
        os.close(home)


def _made_by_helper() -> GroupNetwork:
    """Rootless: a forked helper makes the user namespace and the network one, and sends them and the
    packet socket back."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the helper: a few system calls, then _exit
        parent.close()
        try:
            _own_user_namespace()
            capture = _new_loopback()
            fds = [os.open(f"/proc/self/ns/{ns}", os.O_RDONLY) for ns in ("net", "user")]
            socket.send_fds(child, [b"ok"], [fds[0], capture.fileno(), fds[1]])
        except BaseException as exc:
            child.send(f"no network namespace: {exc}".encode()[:500])
            os._exit(1)
        os._exit(0)
    child.close()
    try:
        message, fds, _, _ = socket.recv_fds(parent, 1024, 3)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if message != b"ok" or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise OSError(message.decode(errors="replace") or "no network namespace: the helper died")
    return GroupNetwork(fds[0], socket.socket(fileno=fds[1]), fds[2])


def _new_loopback() -> socket.socket:
    """This thread in a new network namespace, with ``lo`` up, and a packet socket on it."""
    libc.check(libc.LIBC.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    _bring_up_lo()
    return Capture.open_in_current_namespace()


def _errno() -> str:
    return os.strerror(ctypes.get_errno())


def _own_user_namespace() -> None:
    """The helper becomes root of a new user namespace that maps only its own uid and gid."""
    uid, gid = os.getuid(), os.getgid()
    libc.check(libc.LIBC.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
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
