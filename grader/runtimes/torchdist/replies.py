"""Session side: what a rank may say in a reply's header, checked field by field.

A reply's header is untrusted input: every field is checked for type and range here, and a
header that breaks any rule is a :class:`~grader.sandbox.wire.WireError`, which the session
treats as that rank's crash.  Nothing downstream (verdicts, scoring, reports) ever sees a value of
the wrong type, so no reply can make the grader fail, and a rank's claims (its trace) stay claims:
the session compares them with the traffic it measured itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.sandbox.wire import WireError

#: Statuses a case reply may carry: all of them the student's own outcome, none a grader error.
#: "hang" is a threads-runtime rank naming its own stuck threads (``grader.runtimes.threads.harness``).
CASE_STATUSES = frozenset(
    {"ok", "not_implemented", "forbidden", "import_error", "bad_return", "exception", "memory", "hang"}
)
P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})
MAX_INT = 1 << 53
MAX_EVENTS = 20_000
MAX_NAMES = 64
MAX_TEXT = 4000
MAX_THREADS = 8  # threads a reply names as left running (the session counts them all, from /proc)


@dataclass(frozen=True)
class Claims:
    """A rank's own account of one case's communication (``grader.runtimes.torchdist.guard.Trace.summary``)."""

    sends: int = 0
    recvs: int = 0
    bytes_sent: int = 0
    bytes_recv: int = 0
    sent_to: dict[int, int] = field(default_factory=dict)  # peer -> messages
    sent_bytes_to: dict[int, int] = field(default_factory=dict)
    recv_from: dict[int, int] = field(default_factory=dict)
    collectives: tuple[str, ...] = ()  # built-in collectives it called (the allowed ones)
    student_functions: tuple[str, ...] = ()
    events: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Reply:
    status: str
    message: str = ""
    claims: Claims = field(default_factory=Claims)
    layers: dict[str, str] = field(default_factory=dict)  # ready frames only
    connections: tuple[tuple[int, int], ...] = ()  # ready frames only
    threads: tuple[str, ...] = ()  # threads the rank left running, named: it cannot serve another case


def parse(header: dict[str, Any], world_size: int) -> Reply:
    """The checked reply, or WireError naming the first rule the header breaks."""
    status = header.get("status")
    if not isinstance(status, str):
        raise WireError("status is not text")
    if status == "ready":
        raw = _mapping(header.get("isolation", {}), "layers")
        layers = {_text(k, "layer"): _text(v, "layer") for k, v in raw.items()}
        connections = tuple(_connection(pair) for pair in _list(header.get("connections", []), "connections", 4096))
        return Reply("ready", layers=layers, connections=connections)
    if status not in CASE_STATUSES:
        raise WireError(f"unknown status {status[:40]!r}")
    message = _text(header.get("message", ""), "message")
    threads = tuple(_text(t, "thread")[:200] for t in _list(header.get("threads", []), "threads", MAX_THREADS))
    claims = _claims(header.get("trace", {}), header.get("events", []), world_size)
    return Reply(str(status), message, claims, threads=threads)


def _claims(trace: Any, events: Any, world_size: int) -> Claims:
    if not isinstance(trace, dict):
        raise WireError("trace is not an object")

    def peers(name: str) -> dict[int, int]:
        items = _mapping(trace.get(name, {}), name).items()
        return {_int(k, f"{name} peer", -1, world_size - 1): _int(v, name, 0, MAX_INT) for k, v in items}

    return Claims(
        sends=_int(trace.get("sends", 0), "sends", 0, MAX_INT),
        recvs=_int(trace.get("recvs", 0), "recvs", 0, MAX_INT),
        bytes_sent=_int(trace.get("bytes_sent", 0), "bytes_sent", 0, MAX_INT),
        bytes_recv=_int(trace.get("bytes_recv", 0), "bytes_recv", 0, MAX_INT),
        sent_to=peers("sent_to"),
        sent_bytes_to=peers("sent_bytes_to"),
        recv_from=peers("recv_from"),
        collectives=_names(trace.get("collectives", []), "collectives"),
        student_functions=_names(trace.get("student_functions", []), "student_functions"),
        events=tuple(_event(e, world_size) for e in _list(events, "events", MAX_EVENTS)),
    )


def _event(value: Any, world_size: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError("an event is not an object")
    op = value.get("op")
    if op not in P2P_OPS:
        raise WireError(f"event op {str(op)[:20]!r}")
    t = value.get("t")
    if not isinstance(t, int | float) or isinstance(t, bool) or not 0 <= t < 1e6:
        raise WireError("event time out of range")
    function = value.get("function")
    return {
        "rank": _int(value.get("rank"), "event rank", 0, world_size - 1),
        "op": op,
        "peer": _int(value.get("peer"), "event peer", -1, world_size - 1),
        "bytes": _int(value.get("bytes"), "event bytes", 0, MAX_INT),
        "dtype": _text(value.get("dtype", ""), "event dtype")[:40],
        "shape": [_int(d, "event shape", 0, MAX_INT) for d in _list(value.get("shape", []), "event shape", 16)],
        "t": float(t),
        "function": None if function is None else _text(function, "event function")[:100],
    }


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 20:
        value = int(value)  # JSON object keys are strings
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise WireError(f"{what} is not an integer in {low}..{high}")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"{what} is not text")
    return value[:MAX_TEXT]


def _list(value: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise WireError(f"{what} is not a list of at most {limit}")
    return value


def _names(value: Any, what: str) -> tuple[str, ...]:
    return tuple(sorted({_text(v, what)[:100] for v in _list(value, what, MAX_NAMES)}))


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict) or len(value) > MAX_NAMES:
        raise WireError(f"{what} is not an object of at most {MAX_NAMES} entries")
    return value


def _connection(pair: Any) -> tuple[int, int]:
    local, remote = _list(pair, "connection", 2) if len(_list(pair, "connection", 2)) == 2 else (None, None)
    return _int(local, "port", 1, 65535), _int(remote, "port", 1, 65535)
