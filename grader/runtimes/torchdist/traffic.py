"""Session side: the traffic between a group's ranks, measured on the wire, outside every rank.

Each group lives in a network namespace of its own where only ``lo`` exists, so every byte one
rank sends another crosses that ``lo``, and a packet socket bound to it (opened in the namespace
before any rank existed, see ``grader.sandbox.netns``) sees all of it.  The rank's seccomp filter
leaves it no other channel to its peers: no unix or netlink sockets, no shared memory (a new IPC
namespace and a private /dev/shm per rank), no shared writable directory.

Gloo's TCP transport frames every operation with a fixed preamble (``gloo/transport/tcp/pair.h``,
``struct Op``: six 64-bit fields ``nbytes, opcode, slot, offset, length, roffset``).  A message's
data travels as one ``SEND_UNBOUND_BUFFER`` op carrying ``length`` payload bytes; ``NOTIFY_*``
ops carry none.  The slot says who sent it: point-to-point ops use the caller's 32-bit tag,
built-in collectives put an algorithm prefix in the slot's top byte (:data:`COLLECTIVE_PREFIXES`,
read off Gloo's traffic for torch 2.13).  So per case and per ordered pair of ranks the session
knows exactly how many messages and payload bytes went by send/recv, and which built-in
collectives ran, whatever route the student's code took to them and whatever its own trace says.

Ports are mapped to ranks from the sockets each rank listed in its ready frame, which it sent
before any student code ran.  Bytes on any other connection, or that do not parse as Gloo ops,
are *foreign*: nothing a rank's recorded calls can explain.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

PREAMBLE = struct.Struct("<6Q")
SEND_BUFFER, SEND_UNBOUND_BUFFER, NOTIFY_SEND_READY, NOTIFY_RECV_READY = 0, 1, 2, 3
#: Top byte of a collective's slot -> the collective (``reduce_scatter`` runs as Gloo's allreduce).
COLLECTIVE_PREFIXES = {
    1: "gather",
    2: "all_gather",
    3: "reduce",
    4: "all_reduce",
    5: "scatter",
    6: "broadcast",
    7: "barrier",
    8: "all_to_all",
}
P2P_SLOTS = 1 << 32  # point-to-point slots are the caller's tag, a C int
ETH_P_ALL = 0x0003
SOL_PACKET, PACKET_STATISTICS, PACKET_IGNORE_OUTGOING = 263, 6, 23
SO_RCVBUFFORCE = 33
RCVBUF = 64 << 20
MAX_PACKET = 1 << 18  # lo's largest (GSO) packet is 64 KiB plus headers
MAX_AHEAD = 64 << 20  # bytes of one stream held while waiting for a segment delivered late


@dataclass
class PairTraffic:
    """What one rank sent another during one case."""

    messages: int = 0  # point-to-point data ops
    bytes: int = 0  # their payload
    collectives: dict[str, int] = field(default_factory=dict)  # built-in collective -> data ops
    notifications: int = 0  # NOTIFY_* ops: a posted send or receive announced to its peer


@dataclass
class Traffic:
    """One case's measured traffic.  ``lost`` is why it is incomplete ("" when it is not)."""

    pairs: dict[tuple[int, int], PairTraffic] = field(default_factory=dict)
    foreign: list[str] = field(default_factory=list)  # traffic no recorded call can explain
    lost: str = ""
    #: every point-to-point message as (src, dst, payload bytes), in the order its first bytes were
    #: captured: a message sent after another was received comes after it (the order of a schedule)
    order: list[tuple[int, int, int]] = field(default_factory=list)

    def pair(self, src: int, dst: int) -> PairTraffic:
        return self.pairs.setdefault((src, dst), PairTraffic())

    def sent_by(self, rank: int) -> tuple[int, int]:
        """(point-to-point messages, payload bytes) a rank sent."""
        mine = [p for (src, _), p in self.pairs.items() if src == rank]
        return sum(p.messages for p in mine), sum(p.bytes for p in mine)

    def received_by(self, rank: int) -> tuple[int, int]:
        mine = [p for (_, dst), p in self.pairs.items() if dst == rank]
        return sum(p.messages for p in mine), sum(p.bytes for p in mine)

    def collectives(self) -> list[str]:
        return sorted({name for p in self.pairs.values() for name in p.collectives})

    def total_bytes(self) -> int:
        return sum(p.bytes for p in self.pairs.values()) + sum(
            n for p in self.pairs.values() for n in p.collectives.values()
        )


class _Stream:
    """One direction of one Gloo connection, parsed op by op.

    On ``lo`` a segment sent from one CPU can reach the capture after the next one, sent from
    another: segments ahead of the stream wait (copied, bounded) until the bytes before them come.
    """

    def __init__(self, src: int, dst: int) -> None:
        self.src, self.dst = src, dst
        self.next_seq: int | None = None
        self.skip = 0  # payload bytes still to pass over
        self.head = bytearray()
        self.broken = ""
        self.ahead: dict[int, bytes] = {}  # seq -> segment that arrived before the bytes preceding it
        self.ahead_bytes = 0

    def feed(self, seq: int, view: memoryview, traffic: Traffic) -> None:
        if self.broken:
            return
        if self.next_seq is None:
            self.next_seq = seq  # the first bytes after the ready frames: an operation boundary
        gap = (seq - self.next_seq) & 0xFFFFFFFF
        if 0 < gap < 1 << 31:  # ahead of the stream: keep it for when the gap fills
            if self.ahead_bytes + len(view) > MAX_AHEAD:
                self.broken = f"{gap} bytes from rank {self.src} to rank {self.dst} were not captured"
                traffic.lost = traffic.lost or self.broken
                return
            self.ahead[seq] = bytes(view)
            self.ahead_bytes += len(view)
            return
        if gap:  # a retransmission of bytes already seen
            view = view[(self.next_seq - seq) & 0xFFFFFFFF :]
        self._parse(view, traffic)
        while self.next_seq in self.ahead:
            data = self.ahead.pop(self.next_seq)
            self.ahead_bytes -= len(data)
            self._parse(memoryview(data), traffic)

    def missing(self) -> str:
        """Why this stream's measurement is incomplete once every byte should have come ("" if it is not)."""
        if self.ahead and not self.broken:
            gap = min(self.ahead, key=lambda s: (s - (self.next_seq or 0)) & 0xFFFFFFFF) - (self.next_seq or 0)
            return f"{gap & 0xFFFFFFFF} bytes from rank {self.src} to rank {self.dst} were not captured"
        return ""

    def _parse(self, view: memoryview, traffic: Traffic) -> None:
        assert self.next_seq is not None
        self.next_seq = (self.next_seq + len(view)) & 0xFFFFFFFF
        while view:
            if self.skip:
                n = min(self.skip, len(view))
                self.skip -= n
                view = view[n:]
                continue
            n = min(PREAMBLE.size - len(self.head), len(view))
            self.head += view[:n]
            view = view[n:]
            if len(self.head) == PREAMBLE.size:
                self._op(traffic)

    def _op(self, traffic: Traffic) -> None:
        nbytes, opcode, slot, _, length, _ = PREAMBLE.unpack(self.head)
        self.head.clear()
        pair = traffic.pair(self.src, self.dst)
        if opcode in (SEND_BUFFER, SEND_UNBOUND_BUFFER) and nbytes == PREAMBLE.size + length:
            self.skip = length
            if slot < P2P_SLOTS:
                pair.messages += 1
                pair.bytes += length
                traffic.order.append((self.src, self.dst, length))
            else:
                name = COLLECTIVE_PREFIXES.get(slot >> 56, f"collective with slot prefix {slot >> 56:#x}")
                pair.collectives[name] = pair.collectives.get(name, 0) + 1
        elif opcode in (NOTIFY_SEND_READY, NOTIFY_RECV_READY) and nbytes == PREAMBLE.size:
            pair.notifications += 1
        else:
            self.broken = f"rank {self.src} sent rank {self.dst} bytes that are not Gloo operations"
            traffic.foreign.append(self.broken)


class Capture:
    """The packet socket of one group's namespace, and the parse of what it saw."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.streams: dict[tuple[int, int], _Stream] = {}
        self.traffic = Traffic()
        self._buf = bytearray(MAX_PACKET)

    @classmethod
    def open_in_current_namespace(cls) -> socket.socket:
        """A packet socket on this network namespace's ``lo`` (root, or CAP_NET_RAW there)."""
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
        sock.bind(("lo", 0))
        try:  # each packet once: on lo every packet is both sent and received
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass  # older kernels: outgoing copies are skipped by their packet type below
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        return sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def map_connections(self, connections: dict[int, list[list[int]]]) -> None:
        """Rank -> [[local port, remote port], ...] from the ready frames; discard what came before
        (connection set-up), so that every stream starts at an operation boundary."""
        self.drain()
        self.streams.clear()
        # By the pair of ports, never by one port: an accepted socket has its listener's port, and
        # the kernel may give two ranks' connections to different peers the same ephemeral port.
        ends = {(local, remote): r for r, conns in connections.items() for local, remote in conns}
        for (local, remote), r in ends.items():
            peer = ends.get((remote, local))
            if peer is not None:
                self.streams[(local, remote)] = _Stream(r, peer)
        self.traffic = Traffic()

    def begin_case(self) -> None:
        self.drain()
        self.traffic = Traffic()

    def drain(self) -> None:
        """Parse every packet waiting on the socket."""
        while True:
            try:
                size, _, flags, addr = self.sock.recvmsg_into([self._buf])
            except (BlockingIOError, InterruptedError):
                break
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            if flags & socket.MSG_TRUNC:
                self.traffic.lost = self.traffic.lost or "a packet larger than the capture buffer was cut"
                continue
            self._packet(memoryview(self._buf)[:size], addr[1])
        self._check_drops()

    def missing(self) -> str:
        """Why the case's measurement is still incomplete: a segment that has not come yet."""
        return next((why for stream in self.streams.values() if (why := stream.missing())), "")

    def _check_drops(self) -> None:
        stats = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        _, drops = struct.unpack("II", stats)
        if drops:
            self.traffic.lost = self.traffic.lost or f"the capture dropped {drops} packets"

    def _packet(self, pkt: memoryview, proto: int) -> None:
        if proto == 0x0800 and len(pkt) >= 20 and pkt[0] >> 4 == 4:
            ihl = (pkt[0] & 15) * 4
            end = min(struct.unpack_from("!H", pkt, 2)[0], len(pkt))
            transport, body = pkt[9], pkt[ihl:end]
        elif proto == 0x86DD and len(pkt) >= 40:
            transport, body = pkt[6], pkt[40 : 40 + struct.unpack_from("!H", pkt, 4)[0]]
        else:
            self.traffic.foreign.append(f"a packet of protocol {proto:#06x}")
            return
        if transport != 6:
            if len(body) > 8:  # UDP and the like: nothing Gloo sends
                self.traffic.foreign.append(f"a packet of IP protocol {transport}")
            return
        if len(body) < 20:
            return
        sport, dport, seq = struct.unpack_from("!HHI", body, 0)
        payload = body[(body[12] >> 4) * 4 :]
        if not payload:
            return  # ACKs and connection set-up carry nothing
        stream = self.streams.get((sport, dport))
        if stream is None:
            self.traffic.foreign.append(f"{len(payload)} bytes on a connection Gloo did not open (port {sport})")
            return
        stream.feed(seq, payload, self.traffic)

    def close(self) -> None:
        self.sock.close()
