"""``scripts/ci-budget.py``: what ``.ci/run`` prints at its end (issue 43): the whole run, each stage,
the slowest tests and modules, and a warning, never a failure, above the 30-minute budget."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

BUDGET = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "ci-budget.py"))
JUNIT = """<testsuites><testsuite>
<testcase classname="tests.test_a" name="fast" time="0.5"/>
<testcase classname="tests.test_a" name="slow" time="70"/>
<testcase classname="tests.test_b" name="dear[x]" time="90.25"/>
</testsuite></testsuites>"""


def report(tmp_path: Path, capsys: pytest.CaptureFixture[str], total: int) -> list[str]:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert BUDGET["main"](["--junit", str(junit), "--total", str(total), "install=65", "suite=1500"]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_budget_names_each_stage_and_the_slowest_tests_and_modules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = report(tmp_path, capsys, 1600)
    assert lines[0] == "[ci-budget] .ci/run took 26:40 (budget 30:00, limit 90:00)"
    assert "[ci-budget]     1:05  install" in lines and "[ci-budget]    25:00  suite" in lines
    slowest = lines.index("[ci-budget] the ten slowest tests:")
    assert lines[slowest + 1 : slowest + 4] == [
        "[ci-budget]      90.2 s  tests.test_b::dear[x]",
        "[ci-budget]      70.0 s  tests.test_a::slow",
        "[ci-budget]       0.5 s  tests.test_a::fast",
    ]
    modules = lines.index("[ci-budget] the ten dearest test modules:")
    assert lines[modules + 1 : modules + 3] == [
        "[ci-budget]      90.2 s     1 tests  tests.test_b",
        "[ci-budget]      70.5 s     2 tests  tests.test_a",
    ]
    assert "[ci-budget] the tests' own seconds, summed over every worker: 161 s" in lines
    assert not any("OVER BUDGET" in line for line in lines)


def test_over_the_budget_it_says_so_last_and_still_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = report(tmp_path, capsys, 31 * 60)
    assert lines[-1].startswith("[ci-budget] OVER BUDGET: 31:00 is more than 30:00")


def test_an_unreadable_junit_still_gives_the_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert BUDGET["main"](["--junit", str(tmp_path / "none.xml"), "--total", "10"]) == 0
    assert capsys.readouterr().out == "[ci-budget] .ci/run took 0:10 (budget 30:00, limit 90:00)\n"


def test_with_proc_stat_before_and_after_it_says_how_busy_the_cores_were(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = "cpu  100 0 50 1000 10 0 0 0 0 0"
    after = "cpu  400 0 150 1090 20 0 0 0 0 0"  # 400 busy ticks, 100 idle or waiting on a disk
    args = ["--junit", str(tmp_path / "none.xml"), "--total", "10", "--cpu-before", before, "--cpu-after", after]
    assert BUDGET["main"](args) == 0
    assert "[ci-budget] the cores were busy 80% of the suite's time (the rest idle)" in capsys.readouterr().out
    assert BUDGET["busy_share"]("cpu 1 2", "not a line") is None
