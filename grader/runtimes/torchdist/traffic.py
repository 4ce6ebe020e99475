"""Session side: the traffic between a group's ranks, measured on the wire, outside every rank.

Each group lives in a network namespace of its own where only ``lo`` exists, so every byte one
rank sends another crosses that ``lo``, and a packet socket bound to it (opened in the namespace
before any rank existed, see ``grader.sandbox.netns``) sees all of it.  The rank's seccomp filter
leaves it no other channel to its peers: no socket of its own once Gloo connected (so no unix or
netlink socket either), no shared memory (a new IPC namespace and a private /dev/shm per rank), no
shared writable directory.

Gloo's TCP transport frames every operation with a fixed preamble (``gloo/transport/tcp/pair.h``,
``struct Op``: six 64-bit fields ``nbytes, opcode, slot, offset, length, roffset``).  A message's
data travels as one ``SEND_UNBOUND_BUFFER`` op carrying ``length`` payload bytes; ``NOTIFY_*``
ops carry none.  The slot says who sent it: point-to-point ops use the caller's 32-bit tag,
built-in collectives put an algorithm prefix in the slot's top byte (:data:`COLLECTIVE_PREFIXES`,
read off Gloo's traffic for torch 2.13).  So per case and per ordered pair of ranks the session
knows exactly how many messages and payload bytes went by send/recv, and which built-in
collectives ran, whatever route the student's code took to them and whatever its own trace says.

Ports are mapped to ranks from the sockets each rank listed in its ready frame, which it sent
before any student code ran.  Only Gloo's streams may exist after that: every packet is held to
the shape of the packets of Gloo's own connection set-up, which the kernel built before any student
code ran (:class:`Shape`: the same IP version, header length, TOS, flags, TTL and the group's one
address at both ends; no IP options), and must be a TCP segment of a mapped connection with no
flag but ACK, PSH, FIN or RST, no urgent pointer and no TCP option but the kernel's own
timestamps and SACK blocks.  Anything else, an empty datagram or a bare SYN included, is
*foreign*, as are bytes of a mapped stream that do not parse as Gloo ops: nothing a rank's
recorded calls can explain.  The payload of a mapped stream is all that is counted, so an honest
collective's bytes stay exact.
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
MSG_TRUNC = int(socket.MSG_TRUNC)  # a plain int: the flag enum's ``&`` cost a microsecond a packet
RCVBUF = 64 << 20
MAX_PACKET = 1 << 18  # lo's largest (GSO) packet is 64 KiB plus headers
MAX_AHEAD = 64 << 20  # bytes of one stream held while waiting for a segment delivered late
IPV4, IPV6 = 0x0800, 0x86DD
TCP_PROTOCOL = 6
TCP_SYN = 0x02
MAX_FOREIGN = 100  # reasons kept per case: the first decides the message, a flood must not fill memory
TCP_FLAGS_OF_A_STREAM = 0x01 | 0x04 | 0x08 | 0x10  # FIN, RST, PSH, ACK: what an open connection sends
TCP_OPTIONS_OF_A_STREAM = frozenset({0, 1, 5, 8})  # end, no-op, SACK blocks, timestamps (set by the kernel)
IP_PROTOCOLS = {1: "ICMP", 17: "UDP", 58: "ICMPv6", 132: "SCTP", 136: "UDP-Lite", 255: "raw"}


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

    def unexplained(self, why: str) -> None:
        """Record traffic no recorded call can explain (the first ``MAX_FOREIGN`` reasons)."""
        if len(self.foreign) < MAX_FOREIGN:
            self.foreign.append(why)

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


@dataclass(frozen=True)
class Shape:
    """The fixed fields of an IP header: what every packet of the group's connections shares.

    Taken from Gloo's connection set-up (the kernel's packets, before any student code ran): IPv4
    version and header length (no options), TOS, flags and fragment offset, TTL, protocol and both
    addresses; for IPv6, version and traffic class, next header (no extension headers), hop limit
    and both addresses (the flow label is the kernel's hash of the connection, left out)."""

    proto: int
    fields: bytes

    def differs(self, other: Shape) -> str:
        """What sets ``other`` apart from this shape, in words ("" when nothing does)."""
        if other == self:
            return ""
        if other.proto != self.proto:
            return f"an IPv{6 if other.proto == IPV6 else 4} packet on an IPv{6 if self.proto == IPV6 else 4} group"
        a, b = self.fields, other.fields
        if self.proto == IPV4:
            names = [(0, 1, "IP options"), (1, 2, "a TOS"), (2, 4, "IP flags"), (4, 5, "a TTL"), (5, 6, "a protocol")]
        else:
            names = [(0, 2, "a traffic class"), (2, 3, "an extension header"), (3, 4, "a hop limit")]
        for start, end, name in names:
            if a[start:end] != b[start:end]:
                return f"a packet with {name} Gloo's connections do not have"
        return "a packet between addresses other than the group's own"


def _shape_fields(pkt: memoryview, proto: int) -> bytes | None:
    """A packet's :class:`Shape` fields, without the object: every captured packet is held to them."""
    if proto == IPV4 and len(pkt) >= 20 and pkt[0] >> 4 == 4:
        return bytes(pkt[0:2]) + bytes(pkt[6:10]) + bytes(pkt[12:20])
    if proto == IPV6 and len(pkt) >= 40 and pkt[0] >> 4 == 6:
        return bytes([pkt[0], pkt[1] & 0xF0]) + bytes(pkt[6:8]) + bytes(pkt[8:40])
    return None


def _tcp_extras(segment: memoryview) -> str:
    """What a TCP segment of an open connection carries beyond its payload ("" when nothing)."""
    flags = segment[13] | (segment[12] & 0x0F) << 8  # the reserved bits, too
    if flags & ~TCP_FLAGS_OF_A_STREAM:
        return "a TCP segment with flags an open Gloo connection never sets" + (
            " (a connection set up after the ranks started)" if flags & TCP_SYN else ""
        )
    if segment[18] or segment[19]:
        return "a TCP segment with an urgent pointer"
    options, i = segment[20 : (segment[12] >> 4) * 4], 0
    while i < len(options):
        kind = options[i]
        if kind not in TCP_OPTIONS_OF_A_STREAM:
            return f"a TCP segment with option {kind}, which the kernel does not set on Gloo's connections"
        if kind == 0:
            break
        i += 1 if kind == 1 else max(options[i + 1] if i + 1 < len(options) else 0, 2)
    return ""


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
            traffic.unexplained(self.broken)


class Capture:
    """The packet socket of one group's namespace, and the parse of what it saw."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.streams: dict[tuple[int, int], _Stream] = {}
        self.traffic = Traffic()
        self.shape: Shape | None = None  # of the group's packets, from its connection set-up
        self._mapped = False  # past the set-up: every packet is held to the group's shape
        self._buf = bytearray(MAX_PACKET)
        #: the kernel gave the socket the buffer asked for (root): it holds milliseconds of a busy
        #: group's packets, so they can wait to be read (``launcher.CAPTURE_EVERY_S``); a rootless
        #: capture is capped at net.core.rmem_max and is read as soon as a packet comes
        self.holds_bursts = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= RCVBUF

    @classmethod
    def open_in_current_namespace(cls) -> socket.socket:
        """A packet socket on this network namespace's ``lo`` (root, or CAP_NET_RAW there)."""
        # Made with no protocol and given one by bind: rebinding a socket that already listens makes
        # the kernel wait for an RCU grace period (``synchronize_net``), 7-15 ms here (issue 23).
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)
        sock.bind(("lo", ETH_P_ALL))
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
        self._mapped = True
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
            if flags & MSG_TRUNC:
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
        fields = _shape_fields(pkt, proto)
        if fields is None:
            self.traffic.unexplained(f"a packet of protocol {proto:#06x}")
            return
        if proto == IPV4:
            ihl = (pkt[0] & 15) * 4
            transport, body = pkt[9], pkt[ihl : min(struct.unpack_from("!H", pkt, 2)[0], len(pkt))]
        else:
            transport, body = pkt[6], pkt[40 : 40 + struct.unpack_from("!H", pkt, 4)[0]]
        if not self._mapped:  # connection set-up: the kernel's own packets say what the group's look like
            if transport == TCP_PROTOCOL:
                self.shape = self.shape or Shape(proto, fields)
            return
        if transport != TCP_PROTOCOL:
            name = IP_PROTOCOLS.get(transport, f"IP protocol {transport}")
            self.traffic.unexplained(f"a packet of {name} with {max(len(body) - 8, 0)} bytes: nothing Gloo sends")
            return
        if len(body) < 20 or (body[12] >> 4) * 4 < 20:
            self.traffic.unexplained("a truncated TCP segment")
            return
        sport, dport, seq = struct.unpack_from("!HHI", body, 0)
        stream = self.streams.get((sport, dport))
        if stream is None:
            self.traffic.unexplained(f"a TCP segment on a connection Gloo did not open (ports {sport} -> {dport})")
            return
        if self.shape is None:
            extra = "no connection of the group's"
        elif fields != self.shape.fields or proto != self.shape.proto:  # compared without a Shape: hot path
            extra = self.shape.differs(Shape(proto, fields))
        else:
            extra = _tcp_extras(body)
        if extra:
            self.traffic.unexplained(f"rank {stream.src} sent rank {stream.dst} {extra}")
            return
        payload = body[(body[12] >> 4) * 4 :]
        if payload:  # ACKs carry nothing
            stream.feed(seq, payload, self.traffic)

    def close(self) -> None:
        self.sock.close()
