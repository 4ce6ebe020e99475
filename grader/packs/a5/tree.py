"""Statements as JSON text and back, exactly: how the session sends a rank the spliced starter.

The session reads the report and splices it (``splice``, with the grader's own answers to the
questions a case does not grade); a rank receives only the resulting statements, so the grader's
answer to the question being graded never reaches it.  Each node keeps its line numbers and the
labels the splicer gives it (``a5_report``: the line came from the report; ``a5_segment``: the part
of ``main`` it belongs to), so tracebacks point into the report and the rank runs segment by segment.
Only data crosses: nothing is compiled or run on the session side, nothing unpickled on the rank's.
"""

from __future__ import annotations

import ast
import json
from typing import Any

LABELS = ("a5_report", "a5_segment")
#: The name a snippet's device arguments are passed through in a rank (``snippets.CpuMapped``): a
#: rank binds it to :func:`cpu_device` in every namespace a program runs in.
CPU_DEVICE = "__a5_cpu_device__"


def cpu_device(device: Any) -> Any:
    """A device argument as the grader's CPU ranks take it: a CUDA device in any form (``"cuda:1"``,
    ``torch.device("cuda", 0)``, a device index such as ``local_rank``) is the CPU; anything else (a
    dtype, a tensor, ``"cpu"``) is returned as it is.  Decided on the value, whatever the spelling."""
    if isinstance(device, int) and not isinstance(device, bool):
        return "cpu"
    if isinstance(device, str) and device.strip().lower().startswith("cuda"):
        return "cpu"
    if getattr(device, "type", None) == "cuda" and type(device).__name__ == "device":
        return "cpu"
    return device


_POSITIONS = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def segment(stmt: ast.stmt) -> str:
    """The part of ``main`` a statement belongs to (``splice.SEGMENTS``)."""
    return str(getattr(stmt, "a5_segment", "end"))


def _value(value: Any) -> Any:
    """A constant that JSON cannot carry as itself, tagged."""
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, complex):
        return {"complex": [repr(value.real), repr(value.imag)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, float):
        return {"float": repr(value)}  # inf and nan too
    return value


def _constant(data: Any) -> Any:
    if isinstance(data, dict):
        if "bytes" in data:
            return bytes.fromhex(data["bytes"])
        if "complex" in data:
            real, imag = data["complex"]
            return complex(float(real), float(imag))
        if "ellipsis" in data:
            return Ellipsis
        return float(data["float"])
    return data


def _data(node: Any) -> Any:
    if isinstance(node, list):
        return [_data(item) for item in node]
    if not isinstance(node, ast.AST):
        return _value(node)
    out: dict[str, Any] = {"_": type(node).__name__}
    for name in (*node._fields, *_POSITIONS, *LABELS):
        if hasattr(node, name):
            out[name] = _data(getattr(node, name))
    return out


def _node(data: Any) -> Any:
    if isinstance(data, list):
        return [_node(item) for item in data]
    if not isinstance(data, dict) or "_" not in data:
        return _constant(data)
    node = getattr(ast, data["_"])()
    for name, value in data.items():
        if name != "_":
            setattr(node, name, _node(value))
    return node


def dumps(statements: dict[str, list[ast.stmt]]) -> str:
    """Named lists of statements as one JSON text (a string crosses the wire at any nesting depth)."""
    return json.dumps({name: _data(body) for name, body in statements.items()}, separators=(",", ":"))


def loads(text: str) -> dict[str, list[ast.stmt]]:
    return {name: _node(body) for name, body in json.loads(text).items()}
