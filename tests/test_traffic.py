"""The traffic measurement: Gloo's framing parsed from captured bytes, whatever the packets look like.

``_Stream`` gets a direction of a connection as TCP delivers it (sequence number and payload);
these tests feed it operations built the way Gloo's ``struct Op`` lays them out, cut at arbitrary
points, repeated and with holes, and check what the session would conclude from them.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from grader.runtimes.torchdist.traffic import (
    IPV4,
    MAX_FOREIGN,
    NOTIFY_RECV_READY,
    NOTIFY_SEND_READY,
    PREAMBLE,
    SEND_UNBOUND_BUFFER,
    Capture,
    Traffic,
    _Stream,
)
from grader.sandbox import descriptors, namespaces, netns


def op(opcode: int, slot: int, payload: bytes = b"") -> bytes:
    return (
        PREAMBLE.pack(
            PREAMBLE.size + len(payload) if opcode == SEND_UNBOUND_BUFFER else PREAMBLE.size,
            opcode,
            slot,
            0,
            len(payload),
            0,
        )
        + payload
    )


def feed(data: bytes, cuts: list[int], start: int = 1000) -> tuple[_Stream, Traffic]:
    stream, traffic = _Stream(0, 1), Traffic()
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    seq = start
    for piece in pieces:
        stream.feed(seq, memoryview(piece), traffic)
        seq += len(piece)
    return stream, traffic


EXCHANGE = (
    op(NOTIFY_SEND_READY, 0)
    + op(SEND_UNBOUND_BUFFER, 0, b"\x01" * 40)
    + op(NOTIFY_RECV_READY, 7)
    + op(SEND_UNBOUND_BUFFER, 7, b"\x02" * 100_000)
    + op(SEND_UNBOUND_BUFFER, 4 << 56 | 1 << 24, b"\x03" * 12)  # an allreduce's data
    + op(SEND_UNBOUND_BUFFER, 6 << 56, b"\x04" * 8)  # a broadcast's
)


def test_messages_bytes_and_collectives_are_counted_however_the_stream_is_cut() -> None:
    rng = random.Random(0)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(EXCHANGE)), rng.randint(0, 30)))
        _, traffic = feed(EXCHANGE, cuts)
        pair = traffic.pairs[(0, 1)]
        assert (pair.messages, pair.bytes) == (2, 100_040)
        assert pair.collectives == {"all_reduce": 1, "broadcast": 1}
        assert pair.notifications == 2
        assert traffic.foreign == [] and traffic.lost == ""


def test_a_retransmitted_segment_is_counted_once() -> None:
    stream, traffic = _Stream(0, 1), Traffic()
    stream.feed(5000, memoryview(EXCHANGE[:100]), traffic)
    stream.feed(5000, memoryview(EXCHANGE[:100]), traffic)  # the same bytes again
    stream.feed(5050, memoryview(EXCHANGE[50:]), traffic)  # overlapping the end of what was seen
    assert traffic.pairs[(0, 1)].messages == 2 and not traffic.lost


def test_sequence_numbers_wrap_around() -> None:
    _, traffic = feed(EXCHANGE, [30, 5000], start=(1 << 32) - 60)
    assert traffic.pairs[(0, 1)].messages == 2 and not traffic.lost


def test_a_hole_that_never_fills_is_a_lost_measurement_not_a_verdict() -> None:
    stream, traffic = _Stream(0, 1), Traffic()
    stream.feed(0, memoryview(EXCHANGE[:60]), traffic)
    stream.feed(100, memoryview(EXCHANGE[100:]), traffic)
    assert stream.missing() == "40 bytes from rank 0 to rank 1 were not captured"
    assert traffic.foreign == [] and traffic.pairs[(0, 1)].messages == 0  # nothing counted past the hole


def test_bytes_that_are_not_gloo_operations_are_foreign() -> None:
    _, traffic = feed(op(SEND_UNBOUND_BUFFER, 0, b"x") + b"GET / HTTP/1.1\r\n" * 4, [])
    assert traffic.foreign == ["rank 0 sent rank 1 bytes that are not Gloo operations"]
    assert traffic.pairs[(0, 1)].messages == 1


def test_a_preamble_whose_length_does_not_add_up_is_foreign() -> None:
    lying = PREAMBLE.pack(PREAMBLE.size, SEND_UNBOUND_BUFFER, 0, 0, 1 << 40, 0)  # claims a terabyte
    _, traffic = feed(lying, [])
    assert traffic.foreign


def test_per_rank_totals() -> None:
    traffic = Traffic()
    traffic.pair(0, 1).messages, traffic.pair(0, 1).bytes = 3, 300
    traffic.pair(0, 2).messages, traffic.pair(0, 2).bytes = 1, 100
    traffic.pair(2, 0).messages, traffic.pair(2, 0).bytes = 1, 50
    assert traffic.sent_by(0) == (4, 400)
    assert traffic.received_by(0) == (1, 50)
    assert traffic.sent_by(1) == (0, 0)


def test_segments_delivered_out_of_order_are_put_back_in_order() -> None:
    """On lo, a segment sent from one CPU may reach the capture after the next one, sent from another."""
    rng = random.Random(1)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(EXCHANGE)), 12))
        bounds = list(zip([0, *cuts], [*cuts, len(EXCHANGE)], strict=True))
        shuffled = bounds[:1] + rng.sample(bounds[1:], len(bounds) - 1)  # the first one starts the stream
        stream, traffic = _Stream(0, 1), Traffic()
        for a, b in shuffled:
            stream.feed(1000 + a, memoryview(EXCHANGE[a:b]), traffic)
        assert stream.missing() == "" and not traffic.lost
        assert (traffic.pairs[(0, 1)].messages, traffic.pairs[(0, 1)].bytes) == (2, 100_040)


# --- only Gloo's streams: every packet on the group's lo is held to the shape of Gloo's own ----------

GROUP, OTHER = bytes([127, 0, 0, 1]), bytes([127, 0, 0, 2])
TIMESTAMPS = bytes([1, 1, 8, 10]) + bytes(8)  # what the kernel puts on every segment of Gloo's connections


def ipv4(
    transport: int, body: bytes, *, src: bytes = GROUP, tos: int = 0, ttl: int = 64, options: bytes = b""
) -> bytes:
    ihl = (20 + len(options)) // 4
    head = struct.pack(
        "!BBHHHBBH4s4s", 0x40 | ihl, tos, 20 + len(options) + len(body), 7, 0x4000, ttl, transport, 0, src, GROUP
    )
    return head + options + body


def tcp(
    sport: int,
    dport: int,
    seq: int,
    payload: bytes = b"",
    *,
    flags: int = 0x18,
    urgent: int = 0,
    options: bytes = TIMESTAMPS,
) -> bytes:
    offset = (20 + len(options)) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, seq, 0, offset << 4, flags, 512, 0, urgent) + options + payload


def group_capture() -> Capture:
    """A capture past its group's set-up: one connection between ranks 0 (port 40000) and 1 (port 50000),
    its set-up seen as the kernel sent it."""
    capture = Capture(socket.socketpair()[0])
    capture.drain = lambda: None  # type: ignore[method-assign]  # packets are fed by hand
    capture._packet(memoryview(ipv4(6, tcp(40000, 50000, 1, flags=0x02))), IPV4)  # the SYN of Gloo's connection
    capture.map_connections({0: [[40000, 50000]], 1: [[50000, 40000]]})
    return capture


def test_the_payload_of_a_mapped_gloo_stream_is_all_that_is_counted_and_exactly() -> None:
    capture = group_capture()
    message = op(SEND_UNBOUND_BUFFER, 3, b"\x05" * 1000)
    capture._packet(memoryview(ipv4(6, tcp(40000, 50000, 100, message[:600]))), IPV4)
    capture._packet(memoryview(ipv4(6, tcp(50000, 40000, 9, flags=0x10))), IPV4)  # an ACK
    sack = bytes([1, 1, 5, 10]) + bytes(8)  # a SACK block, as the kernel sends after a reordering
    capture._packet(memoryview(ipv4(6, tcp(50000, 40000, 9, flags=0x10, options=sack))), IPV4)
    capture._packet(memoryview(ipv4(6, tcp(40000, 50000, 700, message[600:]))), IPV4)
    pair = capture.traffic.pairs[(0, 1)]
    assert (pair.messages, pair.bytes) == (1, 1000)
    assert capture.traffic.foreign == [] and capture.traffic.lost == ""


CHANNELS = {
    "an empty UDP datagram": (ipv4(17, struct.pack("!HHHH", 40000, 50000, 8, 0)), IPV4, "a packet of UDP with 0 bytes"),
    "a UDP datagram": (ipv4(17, struct.pack("!HHHH", 1, 2, 12, 0) + b"data"), IPV4, "a packet of UDP with 4 bytes"),
    "ICMP": (ipv4(1, bytes(8)), IPV4, "a packet of ICMP with 0 bytes"),
    "IP options": (ipv4(6, tcp(40000, 50000, 100), options=bytes([7, 4, 4, 0])), IPV4, "IP options"),
    "a TOS": (ipv4(6, tcp(40000, 50000, 100), tos=0x20), IPV4, "a TOS"),
    "a TTL": (ipv4(6, tcp(40000, 50000, 100), ttl=9), IPV4, "a TTL"),
    "another loopback address": (ipv4(6, tcp(40000, 50000, 100), src=OTHER), IPV4, "addresses other than"),
    "a connection of its own": (ipv4(6, tcp(40001, 50000, 5, flags=0x02)), IPV4, "a connection Gloo did not open"),
    "an urgent pointer": (ipv4(6, tcp(40000, 50000, 100, flags=0x18, urgent=1)), IPV4, "an urgent pointer"),
    "the URG flag": (ipv4(6, tcp(40000, 50000, 100, flags=0x38)), IPV4, "flags an open Gloo connection never sets"),
    "a TCP option": (ipv4(6, tcp(40000, 50000, 100, options=bytes([30, 4, 0, 0]))), IPV4, "option 30"),
    "another protocol": (bytes(28), 0x0806, "a packet of protocol 0x0806"),
    "IPv6": (
        struct.pack("!IHBB16s16s", 6 << 28, 32, 6, 64, bytes(16), bytes(16)) + tcp(40000, 50000, 100),
        0x86DD,
        "an IPv6 packet",
    ),
}


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_every_packet_beside_the_gloo_streams_is_foreign_traffic(channel: str) -> None:
    """Datagrams (empty ones too), header fields, options, another address or a connection of the
    student's own: each carries data no send/recv explains, so each is unexplained traffic."""
    packet, proto, why = CHANNELS[channel]
    capture = group_capture()
    capture._packet(memoryview(packet), proto)
    assert len(capture.traffic.foreign) == 1 and why in capture.traffic.foreign[0], capture.traffic.foreign
    assert capture.traffic.pairs == {}  # and nothing of it counts as a message


# --- the same, on a real loopback: the kernel's packets of each channel, and Gloo's own ----------------


def _set_on_gloo_socket(level: int, option: int, value: int | bytes) -> None:
    """A socket option on Gloo's connected socket (found as a student would find it), left open."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=int(fd))
        except OSError:
            continue
        try:
            sock.getpeername()
            sock.setsockopt(level, option, value)
            return
        except OSError:
            pass
        finally:
            sock.detach()  # closing it would close Gloo's
    raise AssertionError("Gloo holds no connected socket")


def _other_address() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.2", 0))
        sock.connect_ex(("127.0.0.1", 9))


REAL_CHANNELS: dict[str, tuple[Callable[[], object] | None, str]] = {
    "honest": (None, ""),
    "a UDP datagram": (lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"data", LOCAL), "UDP"),
    "an empty datagram": (lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"", LOCAL), "UDP with 0"),
    "another loopback address": (_other_address, "a connection Gloo did not open"),
    "a TOS": (lambda: _set_on_gloo_socket(socket.IPPROTO_IP, socket.IP_TOS, 0x20), "a TOS"),
    "IP options": (
        lambda: _set_on_gloo_socket(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([7, 7, 4]) + bytes(5)),
        "IP options",
    ),
}
LOCAL = ("127.0.0.1", 9)


def _rank(rank: int, store: str, netns: int, channel: str, pipe: int, go: int) -> None:
    """A rank born in the group's namespace: Gloo connects, the rank says its ports, waits for the
    case, opens its channel (rank 0) and sends rank 1 a tensor of 4000 bytes through Gloo."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    namespaces.join_network_namespace(netns)
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    os.write(pipe, json.dumps(descriptors.tcp_connections()).encode())
    os.read(go, 1)
    action = REAL_CHANNELS[channel][0]
    if rank == 0 and action is not None:
        action()
    data = torch.arange(1000, dtype=torch.float32)
    dist.send(data, 1) if rank == 0 else dist.recv(data, 0)
    os.write(pipe, b"done")


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace and a packet socket need root")
@pytest.mark.parametrize("channel", sorted(REAL_CHANNELS))
def test_on_a_real_loopback_gloo_bytes_are_exact_and_each_channel_is_foreign(channel: str, tmp_path: Path) -> None:
    network = netns.loopback_namespace()
    capture = Capture(network.capture)
    ranks = []
    try:
        for rank in range(2):
            (reply_r, reply_w), (go_r, go_w) = os.pipe(), os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    _rank(rank, str(tmp_path / "store"), network.netns, channel, reply_w, go_r)
                finally:
                    os._exit(0)
            ranks.append((pid, reply_r, go_w))
        connections = {r: json.loads(os.read(reply_r, 4096)) for r, (_, reply_r, _) in enumerate(ranks)}
        capture.map_connections(connections)
        capture.begin_case()
        for _, _, go_w in ranks:
            os.write(go_w, b"g")
        assert [os.read(reply_r, 4) for _, reply_r, _ in ranks] == [b"done", b"done"]
        time.sleep(0.1)  # for the last packets to reach the capture
        capture.drain()
    finally:
        for pid, _, _ in ranks:
            os.waitpid(pid, 0)
        network.close()
    traffic, why = capture.traffic, REAL_CHANNELS[channel][1]
    if not why:  # Gloo's own stream: one message, exactly its payload, nothing else
        assert (traffic.pairs[(0, 1)].messages, traffic.pairs[(0, 1)].bytes) == (1, 4000)
        assert traffic.foreign == [] and traffic.lost == ""
    else:
        assert any(why in f for f in traffic.foreign), traffic.foreign


def test_a_flood_of_foreign_packets_keeps_a_bounded_list_of_reasons() -> None:
    capture = group_capture()
    datagram = memoryview(ipv4(17, struct.pack("!HHHH", 1, 2, 8, 0)))
    for _ in range(10 * MAX_FOREIGN):
        capture._packet(datagram, IPV4)
    assert len(capture.traffic.foreign) == MAX_FOREIGN
