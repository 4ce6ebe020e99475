"""What this process's descriptors point to, read from ``/proc/self/fd``: which are sockets, and the
TCP connections among them (Gloo's, by which the session maps a group's traffic to its ranks).

Rank side: ``rank`` lists a rank's connections in its ready frame, and ``isolation`` reports an
inherited descriptor that reaches past the rank's new root.
"""

from __future__ import annotations

import os
import socket


def tcp_connections() -> list[list[int]]:
    """[local port, remote port] of this process's established TCP sockets (Gloo's, right after
    ``init_process_group``): the session maps the group's traffic to ranks with them.

    Asked of each socket descriptor (``TCP_INFO``), not read from ``/proc/self/net/tcp``: that file
    walks the kernel's whole table of connections, every namespace's, which cost each rank about 7 ms
    of CPU (0.3 s of an A9 grading, issue 23)."""
    found = []
    for fd in _socket_fds():
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            tcp = sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
            if tcp and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_ESTABLISHED:
                found.append([sock.getsockname()[1], sock.getpeername()[1]])
        except OSError:
            pass
        finally:
            sock.detach()  # the descriptor stays Gloo's
    return sorted(found)


TCP_ESTABLISHED = 1  # tcp_info.tcpi_state (include/net/tcp_states.h)


def _socket_fds() -> list[int]:
    return [fd for fd, target in fd_targets() if target.startswith("socket:[")]


def fd_targets() -> list[tuple[int, str]]:
    """(descriptor, what it points to) for each descriptor this process has open."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            found.append((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:
            continue  # the listing's own descriptor, already closed
    return found
