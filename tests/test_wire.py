"""The wire format is the trust boundary: exact round trips, and nothing else gets through."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
import torch

from grader.sandbox import wire


@pytest.mark.parametrize("dtype", list(wire.DTYPES.values()), ids=str)
def test_every_dtype_round_trips_bit_for_bit(dtype: torch.dtype) -> None:
    source = (torch.arange(24) - 7).reshape(2, 3, 4).to(dtype).transpose(0, 2)  # non-contiguous
    (frame,) = wire.FrameReader(1 << 20).feed(wire.encode({"status": "ok"}, {"out": source}))
    got = frame.tensors["out"]
    assert got.dtype == dtype and got.shape == source.shape
    assert torch.equal(got, source)
    assert frame.header["status"] == "ok"


def test_frames_arriving_byte_by_byte_are_reassembled() -> None:
    data = wire.encode({"n": 1}, {"a": torch.ones(3), "b": torch.zeros(0)}) + wire.encode({"n": 2})
    reader = wire.FrameReader(1 << 20)
    frames = [f for i in range(len(data)) for f in reader.feed(data[i : i + 1])]
    assert [f.header["n"] for f in frames] == [1, 2]
    assert frames[0].tensors["b"].shape == (0,)


def test_a_frames_tensors_own_their_bytes() -> None:
    """Writing into one tensor (a rank's in-place collective on its input) touches no other tensor of
    its frame and no later frame of the reader."""
    reader = wire.FrameReader(1 << 20)
    (first,) = reader.feed(
        wire.encode({}, {"a": torch.ones(4), "b": torch.ones(4)}) + wire.encode({}, {"c": torch.ones(4)})[:9]
    )
    first.tensors["a"].fill_(7)
    (second,) = reader.feed(wire.encode({}, {"c": torch.ones(4)})[9:])
    assert torch.equal(first.tensors["b"], torch.ones(4)) and torch.equal(second.tensors["c"], torch.ones(4))


def frame_with(header: dict) -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<I", len(head)) + head


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (frame_with({"tensors": [{"name": "x", "dtype": "float32", "shape": [1 << 40]}]}), "exceeds the cap"),
        (frame_with({"tensors": [{"name": "x", "dtype": "object", "shape": [1]}]}), "bad tensor entry"),
        (frame_with({"tensors": [{"name": "x", "dtype": "float32", "shape": [-1]}]}), "bad tensor shape"),
        (frame_with({"tensors": "pickle"}), "malformed header"),
        (struct.pack("<I", 3) + b"{{{", "malformed header"),
        (struct.pack("<I", 1 << 30), "header of"),
    ],
)
def test_malformed_or_oversized_frames_are_refused_before_memory_is_committed(data: bytes, reason: str) -> None:
    with pytest.raises(wire.WireError, match=reason):
        wire.FrameReader(1 << 20).feed(data)


def test_encoding_needs_no_numpy() -> None:
    """torch does not depend on NumPy; a student's environment may lack it."""
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import torch\n"
        "from grader.sandbox import wire\n"
        "f, = wire.FrameReader(1 << 20).feed(wire.encode({}, {'x': torch.arange(5.0)}))\n"
        "assert torch.equal(f.tensors['x'], torch.arange(5.0))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- property-based: whatever a rank sends, the session gets frames or a WireError, nothing else ---

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from grader.runtimes.torchdist import replies  # noqa: E402

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)


@given(st.binary(max_size=2048), st.lists(st.integers(min_value=1, max_value=64), max_size=20))
def test_random_bytes_are_frames_or_a_wire_error(data: bytes, cuts: list[int]) -> None:
    reader = wire.FrameReader(1 << 16)
    try:
        start = 0
        for cut in [*cuts, len(data)]:
            for frame in reader.feed(data[start : start + cut]):
                assert isinstance(frame.header, dict)
            start += cut
    except wire.WireError:
        pass


@given(st.dictionaries(st.sampled_from(["status", "message", "trace", "events", "tensors", "x"]), JSON))
def test_any_header_is_a_checked_reply_or_a_wire_error(header: dict) -> None:
    head = json.dumps(header, allow_nan=True).encode()
    try:
        (frame,) = wire.FrameReader(1 << 20).feed(struct.pack("<I", len(head)) + head)
        reply = replies.parse(frame.header, world_size=4)
    except wire.WireError:
        return
    assert reply.status in replies.CASE_STATUSES | {"ready"}
    assert isinstance(reply.message, str)
    assert all(isinstance(n, int) for n in reply.claims.sent_to.values())


@given(st.integers(min_value=17, max_value=300_000))
def test_a_header_nested_too_deep_is_a_wire_error(depth: int) -> None:
    head = b"[" * depth + b"]" * depth
    with pytest.raises(wire.WireError, match="malformed header"):
        wire.FrameReader(1 << 30).feed(struct.pack("<I", len(head)) + head)
