"""Which time decides lateness: one the student cannot set, in a fixed order of trust, else unknown."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from grader.errors import UserError
from grader.results import TimeSource
from grader.submission_time import UNKNOWN, SubmittedAt, given, parse_time, resolve

UTC_9AM = datetime(2026, 2, 5, 9, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "text",
    [
        "1770282000",  # GitHub's push event: repository.pushed_at in Unix seconds
        "2026-02-05T09:00:00Z",  # its other events, and the REST API
        "2026-02-05T10:00:00+01:00",
        "2026-02-05T09:00:00",  # no zone: UTC
        " 2026-02-05 09:00:00+00:00 ",
    ],
)
def test_times_are_read_in_every_form_the_platforms_and_people_give(text: str) -> None:
    assert parse_time(text, "--pushed-at") == UTC_9AM


@pytest.mark.parametrize("text", ["", "yesterday", "2026-02-30T00:00:00Z", "-5", "9" * 30])
def test_anything_else_is_a_user_error_that_names_the_option(text: str) -> None:
    with pytest.raises(UserError, match=r"^--pushed-at: .* is not a time"):
        parse_time(text, "--pushed-at")


def test_a_given_submission_time_wins_over_the_push_and_keeps_its_source() -> None:
    pushed = "2026-02-05T09:00:00+00:00"
    assert given(None, pushed_at="1770282000") == SubmittedAt(pushed, TimeSource.PUSH)
    assert given("2026-02-01T00:00:00Z", pushed_at="1770282000") == SubmittedAt(
        "2026-02-01T00:00:00+00:00", TimeSource.FLAG
    )
    assert given("2026-02-01T00:00:00Z", TimeSource.ROSTER).source is TimeSource.ROSTER
    assert given(None) is None


def test_a_commit_date_counts_only_when_trusted_and_only_without_a_better_time() -> None:
    committed = "2026-01-01T09:00:00+00:00"
    pushed = SubmittedAt("2026-02-05T09:00:00+00:00", TimeSource.PUSH)
    assert resolve(None, committed, trust_commit_time=False) == UNKNOWN
    assert resolve(None, committed, trust_commit_time=True) == SubmittedAt(committed, TimeSource.COMMIT)
    assert resolve(pushed, committed, trust_commit_time=True) == pushed
    assert resolve(None, None, trust_commit_time=True) == UNKNOWN
