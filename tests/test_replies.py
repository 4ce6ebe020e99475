"""A rank's reply header, field by field: anything of the wrong type or range is that rank's crash."""

from __future__ import annotations

from typing import Any

import pytest

from grader.runtimes.torchdist import replies
from grader.sandbox.wire import WireError

HONEST = {
    "status": "ok",
    "message": "",
    "trace": {
        "rank": 0,
        "sends": 2,
        "recvs": 1,
        "bytes_sent": 80,
        "bytes_recv": 40,
        "sent_to": {"1": 2},
        "sent_bytes_to": {"1": 80},
        "recv_from": {"1": 1},
        "collectives": [],
        "violations": [],
        "student_functions": ["my_allreduce"],
    },
    "events": [
        {
            "rank": 0,
            "op": "isend",
            "peer": 1,
            "bytes": 40,
            "dtype": "float32",
            "shape": [10],
            "t": 0.01,
            "function": "my_allreduce",
        }
    ],
}


def test_an_honest_reply_is_read_as_claims() -> None:
    reply = replies.parse(HONEST, world_size=2)
    assert reply.status == "ok"
    assert reply.claims.sent_to == {1: 2} and reply.claims.sent_bytes_to == {1: 80}
    assert reply.claims.student_functions == ("my_allreduce",)
    assert reply.claims.events[0]["peer"] == 1


def with_trace(**fields: Any) -> dict[str, Any]:
    return {**HONEST, "trace": {**HONEST["trace"], **fields}}


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ({**HONEST, "status": "error"}, "unknown status"),  # a rank never declares a grader error
        ({**HONEST, "status": "grader_error"}, "unknown status"),
        ({**HONEST, "message": ["a", "list"]}, "message is not text"),
        (with_trace(sends="many"), "sends is not an integer"),
        (with_trace(sends=True), "sends is not an integer"),
        (with_trace(bytes_sent=-1), "bytes_sent is not an integer"),
        (with_trace(sent_to=[1, 2, 3]), "sent_to is not an object"),
        (with_trace(sent_to={"7": 1}), "sent_to peer is not an integer in -1..1"),
        (with_trace(collectives={"x": 1}), "collectives is not a list"),
        (with_trace(student_functions=7), "student_functions is not a list"),
        ({**HONEST, "trace": "forged"}, "trace is not an object"),
        ({**HONEST, "events": [{"op": "all_reduce", "t": 0}]}, "event op"),
        ({**HONEST, "events": [{**HONEST["events"][0], "t": float("nan")}]}, "event time"),
        ({**HONEST, "events": [{}] * 20_001}, "events is not a list of at most 20000"),
        ({**HONEST, "threads": "spin"}, "threads is not a list of at most 8"),
        ({**HONEST, "threads": ["spin"] * 9}, "threads is not a list of at most 8"),
        ({**HONEST, "threads": [7]}, "thread is not text"),
    ],
)
def test_a_field_of_the_wrong_type_or_range_is_refused(header: dict[str, Any], why: str) -> None:
    with pytest.raises(WireError, match=why):
        replies.parse(header, world_size=2)


def test_the_threads_a_rank_left_running_are_named_in_its_own_words_cut_short() -> None:
    reply = replies.parse({**HONEST, "threads": ["'spin' at collectives.py:9 in _spin", "x" * 1000]}, 2)
    assert reply.threads == ("'spin' at collectives.py:9 in _spin", "x" * 200)
    assert replies.parse(HONEST, 2).threads == ()


def test_a_ready_frame_lists_layers_and_sockets() -> None:
    reply = replies.parse({"status": "ready", "isolation": {"uid": "on"}, "connections": [[40000, 40001]]}, 2)
    assert reply.layers == {"uid": "on"} and reply.connections == ((40000, 40001),)
    with pytest.raises(WireError, match="port"):
        replies.parse({"status": "ready", "connections": [[0, 70000]]}, 2)
    with pytest.raises(WireError, match="connection"):
        replies.parse({"status": "ready", "connections": [[1, 2, 3]]}, 2)
