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
