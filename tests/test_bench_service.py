"""scripts/bench-service.py's arithmetic: the rush it schedules is the class it states, and the figures it
prints (nearest-rank percentiles of receipt -> grade, the count superseded, gradings per minute) are
worked out from the service's own times as its docstring says."""

from __future__ import annotations

import pytest

from tests.bench_kit import load_script


def _bench():
    return load_script("bench-service.py")


def test_the_rush_is_every_student_once_and_a_third_twice_template_first_all_inside_the_window():
    bench = _bench()
    pushes = bench.schedule(12, 120.0, 1 / 3, seed=0)
    finals = [p for p in pushes if p.final]
    firsts = [p for p in pushes if not p.final]
    assert sorted(p.student for p in finals) == [f"s{i:03d}" for i in range(12)]
    assert len(firsts) == 4 and {p.kind for p in firsts} == {"template"}
    final_at = {p.student: p.at for p in finals}
    assert all(0 <= p.at <= final_at[p.student] for p in firsts)  # a first push comes before its final one
    assert all(0 <= p.at <= 120 for p in pushes) and [p.at for p in pushes] == sorted(p.at for p in pushes)
    assert [p.kind for p in sorted(finals, key=lambda p: p.student)][:6] == list(bench.PATTERN)
    assert pushes == bench.schedule(12, 120.0, 1 / 3, seed=0)  # seeded: the same rush every run
    assert all(p.at == 0 for p in bench.schedule(4, 0.0, 0.5, seed=1))  # --window 0: everyone at once


def test_percentiles_are_nearest_rank():
    percentile = _bench().percentile
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert percentile(values, 50) == 10 and percentile(values, 95) == 19 and percentile(values, 100) == 20
    assert percentile([7.0], 95) == 7 and percentile([3.0, 1.0, 2.0], 50) == 2
    with pytest.raises(ValueError):
        percentile([], 50)


def test_the_figures_come_from_the_services_times_and_the_batchs_wall():
    bench = _bench()
    Push = bench.Push
    pushes = [
        Push("s000", 0, "template", final=False, status="superseded", received_at=100.0),
        Push("s000", 5, "reference", final=True, status="graded", received_at=105.0, graded_at=125.0),
        Push("s001", 1, "naive", final=True, status="graded", received_at=101.0, graded_at=111.0),
        Push("s002", 2, "naive", final=True, refused="too many submissions"),
    ]
    figures = bench.summary(pushes, batch_wall=45.0)
    assert figures["graded"] == 2 and figures["superseded"] == 1 and figures["refused"] == 1
    assert (figures["p50"], figures["p95"], figures["max"]) == (10.0, 20.0, 20.0)
    assert figures["service_span"] == 25.0  # the first receipt (100) to the last grade (125)
    assert figures["service_per_min"] == 60 * 2 / 25
    assert figures["batch_per_min"] == 60 * 3 / 45  # one grading per student: their final commits
    assert bench.summary([], batch_wall=None)["p50"] is None
