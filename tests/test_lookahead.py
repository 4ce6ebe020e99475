"""The session computes the next case's inputs while the current case runs (issue 23): what a case
gets is what computing it there and then would have given, errors included."""

from __future__ import annotations

import threading

import pytest

from grader.matrix.plugin import Lookahead
from grader.pack import Case, Prepared

CASE = Case("test_x[ws2]", "ws2", 2, "x")


def test_a_case_taken_ahead_is_computed_once_off_the_sessions_thread() -> None:
    computed: list[tuple[str, str, str]] = []
    made = Prepared([], [])

    def prepare(case: Case, salt: str) -> Prepared:
        computed.append((case.name, salt, threading.current_thread().name))
        return made

    ahead = Lookahead()
    ahead.start(CASE.name, prepare, CASE, "s")
    ahead.start(CASE.name, prepare, CASE, "s")  # asked twice, computed once
    assert ahead.take(CASE.name) is made
    assert [(name, salt) for name, salt, _ in computed] == [(CASE.name, "s")]
    assert computed[0][2].startswith("lookahead")
    assert ahead.take(CASE.name) is None  # taken: the next ask computes it where it is asked
    ahead.close()


def test_what_a_prepare_ahead_raised_is_raised_where_the_case_takes_it() -> None:
    def broken(case: Case, salt: str) -> Prepared:
        raise ValueError("the pack's own bug")

    ahead = Lookahead()
    ahead.start(CASE.name, broken, CASE, "s")
    with pytest.raises(ValueError, match="the pack's own bug"):
        ahead.take(CASE.name)
    ahead.close()


def test_a_case_never_started_ahead_is_not_there() -> None:
    ahead = Lookahead()
    assert ahead.take("test_other") is None
    ahead.close()
