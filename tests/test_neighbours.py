"""A neighbour cannot move a grade (issue 58): a submission whose ranks fork setsid() spinners in every
collective at every world size, and fill all the memory their limits allow, graded by ``grader batch
--jobs 2`` beside the reference and then beside the template.  Each honest grading keeps every verdict
and its score.  What the neighbour still costs in time is measured, not asserted here (speed targets
live in the measurements: docs/instructors/neighbours.md).

One batch serves every assertion: the attacker is first in the roster, so it is graded from the start,
the reference beside it, then the template once the reference is done; the batch is stopped as soon as
both honest gradings are in, before the attacker's own grading (long: its cases hang) ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from grader.results import GradeResult

if TYPE_CHECKING:  # conftest is pytest's: imported again as a module, it would run twice, after torch
    from tests.conftest import Graded

ROOT = Path(__file__).resolve().parents[1]
# a grading's worth of minutes; scripts/test.sh runs this module by itself, before the suite
pytestmark = pytest.mark.slow

ATTACK = Path(__file__).parent / "fixtures" / "neighbours" / "attack.py"
HONEST = {"reference": "reference/a9", "template": "student_template/a9"}
WAIT_S = 900  # the batch is stopped once both honest gradings are in; this only ends a batch that hangs


@pytest.fixture(scope="module")
def beside(tmp_path_factory: pytest.TempPathFactory, graded: Callable[[str], Graded]) -> dict[str, GradeResult]:
    """Each honest tree graded beside the attacker: name -> its result in the batch."""
    if not (ROOT / HONEST["reference"]).is_dir():
        pytest.skip("reference/a9 is not in this checkout")
    alone = {name: graded(tree) for name, tree in HONEST.items()}  # the same snapshots, graded alone
    root = tmp_path_factory.mktemp("neighbours")
    attacker = Path(shutil.copytree(alone["reference"].tree, root / "attacker"))
    collectives = attacker / "src" / "collectives.py"
    collectives.write_text(collectives.read_text() + "\n\n" + ATTACK.read_text())
    roster = root / "roster.csv"
    roster.write_text(f"attacker,{attacker}\n" + "".join(f"{n},{g.tree}\n" for n, g in alone.items()))
    out = root / "out"
    cmd = [sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out), "--jobs", "2"]
    batch = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # each grade's own output, installed as it ends (the batch writes the reports once every grade is in)
    results = {name: out / "students" / name / "graded" / "results.json" for name in (*HONEST, "attacker")}
    try:
        deadline = time.monotonic() + WAIT_S
        while not all(results[name].exists() for name in HONEST) and batch.poll() is None:
            assert time.monotonic() < deadline, "the batch did not grade the honest trees"
            time.sleep(0.5)
        # the premise: the attacker was being graded all along, beside both honest gradings
        assert batch.poll() is None and not results["attacker"].exists()
    finally:
        batch.send_signal(signal.SIGTERM)  # the batch kills every grade in flight: the attacker's
        _, err = batch.communicate(timeout=120)
    assert all(results[name].exists() for name in HONEST), err.decode(errors="replace")[-3000:]
    return {name: GradeResult.load(results[name]) for name in HONEST}


@pytest.mark.parametrize("name", list(HONEST))
def test_beside_an_attacker_every_verdict_and_the_score_are_those_of_the_grading_alone(
    name: str, beside: dict[str, GradeResult], graded: Callable[[str], Graded]
) -> None:
    alone, there = graded(HONEST[name]).result, beside[name]
    assert there.status == alone.status == "graded"
    assert {c.id: c.verdict for c in there.cases} == {c.id: c.verdict for c in alone.cases}
    assert there.score == alone.score
    assert {t.id: t.score for t in there.tasks} == {t.id: t.score for t in alone.tasks}


def test_each_honest_grading_says_its_processes_had_a_group_of_their_own(beside: dict[str, GradeResult]) -> None:
    for result in beside.values():
        layer = result.isolation["grading_cgroup"]
        assert layer.startswith("on: " if os.geteuid() == 0 else "off: cgroups need root"), layer
