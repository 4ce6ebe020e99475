"""The one format that crosses the trust boundary between the runner and a rank process.

A frame is ``u32 header length | header JSON | raw tensor bytes...``.  The header lists each
tensor's name, dtype, shape and byte count; the bytes follow in that order.  Tensors are rebuilt
with ``torch.frombuffer`` from a whitelisted dtype, so nothing a student process sends is ever
unpickled, and every length is checked against a cap before memory is committed to it.

Every way a frame can be malformed is a :class:`WireError` (never a ``RecursionError`` or
``TypeError`` escaping to the caller): a header nested deeper than :data:`MAX_DEPTH`, a header
that is not a JSON object, a tensor entry of the wrong shape.  A reader that raised is spent: the
caller replaces the sender, since the stream is out of step from then on.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

MAX_HEADER_BYTES = 4 << 20
MAX_DEPTH = 16  # a reply is at most a few levels deep; a deeper one is hostile
_LEN = struct.Struct("<I")


class WireError(Exception):
    """A frame that breaks the format or a cap: the sender is treated as crashed."""


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def encode(header: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None) -> bytearray:
    """Serialize a header and named tensors into one frame, each tensor's bytes copied once, straight
    into their place (a case's inputs reach 16 MiB: issue 23)."""
    tensors = tensors or {}
    entries = []
    flats = []
    for name, tensor in tensors.items():
        if tensor.dtype not in DTYPE_NAMES:
            raise WireError(f"{name}: dtype {tensor.dtype} cannot be sent")
        entries.append({"name": name, "dtype": dtype_name(tensor.dtype), "shape": list(tensor.shape)})
        flats.append(tensor.detach().to("cpu").contiguous().reshape(-1))
    head = json.dumps({**header, "tensors": entries}, separators=(",", ":")).encode()
    sizes = [flat.numel() * flat.element_size() for flat in flats]
    offset = _LEN.size + len(head)
    frame = bytearray(offset + sum(sizes))
    _LEN.pack_into(frame, 0, len(head))
    frame[_LEN.size : offset] = head
    for flat, size in zip(flats, sizes, strict=True):
        if size:  # through a byte view: no NumPy (torch does not depend on it), no ctypes (the audit hook's)
            torch.frombuffer(frame, dtype=torch.uint8, count=size, offset=offset).copy_(flat.view(torch.uint8))
        offset += size
    return frame


@dataclass
class Frame:
    header: dict[str, Any]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


class FrameReader:
    """Incremental parser for frames arriving in pieces from a non-blocking pipe.

    ``max_bytes`` caps one frame (header + tensors); a frame announcing more is refused before
    its bytes are buffered.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._need: int | None = None  # total frame size once the header is known
        self._header: dict[str, Any] | None = None
        self._head_end = 0

    def feed(self, data: bytes) -> list[Frame]:
        self._buf.extend(data)
        frames = []
        while (frame := self._next()) is not None:
            frames.append(frame)
        return frames

    def _next(self) -> Frame | None:
        if self._header is None:
            if len(self._buf) < _LEN.size:
                return None
            (head_len,) = _LEN.unpack_from(self._buf)
            if head_len > MAX_HEADER_BYTES:
                raise WireError(f"header of {head_len} bytes exceeds the cap")
            if len(self._buf) < _LEN.size + head_len:
                return None
            self._head_end = _LEN.size + head_len
            header = _parse_header(bytes(self._buf[_LEN.size : self._head_end]))
            self._need = self._head_end + sum(_nbytes(e) for e in header.get("tensors", []))
            if self._need > self.max_bytes:
                raise WireError(f"result of {self._need} bytes exceeds the cap of {self.max_bytes}")
            self._header = header
        assert self._need is not None
        if len(self._buf) < self._need:
            return None
        header, offset = self._header, self._head_end
        tensors = {}
        for entry in header.get("tensors", []):
            size = _nbytes(entry)
            raw = self._buf[offset : offset + size]  # a bytearray's slice is a copy of its own
            offset += size
            dtype = DTYPES[entry["dtype"]]
            flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            tensors[str(entry["name"])] = flat.view(dtype).reshape(entry["shape"])
        del self._buf[: self._need]
        self._header, self._need = None, None
        return Frame(header, tensors)


def _parse_header(data: bytes) -> dict[str, Any]:
    try:
        header = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the C stack allows
        raise WireError(f"malformed header: {str(exc)[:200]}") from None
    if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
        raise WireError("malformed header")
    if _depth(header) > MAX_DEPTH:
        raise WireError(f"malformed header: nested deeper than {MAX_DEPTH} levels")
    return header


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, iteratively (the value may be thousands of levels deep)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _nbytes(entry: Any) -> int:
    """Validate one tensor entry of a header and return its byte count."""
    if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
        raise WireError(f"bad tensor entry {entry!r:.200}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > 16 or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise WireError(f"bad tensor shape {shape!r:.200}")
    itemsize = torch.empty(0, dtype=DTYPES[entry["dtype"]]).element_size()
    return math.prod(shape) * itemsize
