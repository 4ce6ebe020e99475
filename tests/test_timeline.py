"""Where a session's time went (``grader.matrix.timeline``): the phases add up to the session's
whole life, and a session that wrote nothing reports nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.matrix import timeline
from grader.matrix.timeline import Timeline


def test_phases_split_a_session_without_gaps_or_overlaps(tmp_path: Path) -> None:
    t = Timeline(launched=100.0)
    t.case_started(102.0)  # 2 s of start-up
    t.groups += 0.5  # the case started a group: 0.5 s of its 1 s
    t.case_ended(103.0, 102.0, 0.0)
    t.case_started(103.25)  # pytest's own work between the cases
    t.case_ended(103.5, 103.25, 0.5)
    t.closed(104.0)
    t.write(tmp_path / "t.json")
    timings = timeline.read(tmp_path / "t.json", ended=104.5, launched=100.0)
    assert timings == pytest.approx(
        {
            "matrix.startup": 2.0,
            "matrix.groups": 0.5,
            "matrix.cases": 0.75,
            "matrix.between": 0.25,
            "matrix.teardown": 0.5,
            "matrix.exit": 0.5,
        }
    )
    assert sum(timings.values()) == pytest.approx(4.5)  # the whole life of the session, launch to end


def test_a_session_that_wrote_no_timeline_reports_no_phases(tmp_path: Path) -> None:
    assert timeline.read(tmp_path / "missing.json", ended=5.0, launched=1.0) == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert timeline.read(tmp_path / "bad.json", ended=5.0, launched=1.0) == {}
