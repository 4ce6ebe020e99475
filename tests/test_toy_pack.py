"""The engine grades an assignment it has never heard of: the toy pack (``tests/toy_pack``).

The toy pack shares no vocabulary with Assignment 9 (one function ``double`` in a flat ``ops.py``,
no collective), so an engine that named A9 anywhere (a ``src/`` folder, a function, a case id, a
report section) would fail here, where no import rule can see it.  Grading it must not import any
module of ``grader.packs`` at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.pack import load_pack
from grader.pipeline import grade
from grader.results import ItemStatus, Verdict

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "toy_pack"
RUBRIC = TOY / "rubric.yaml"


def test_the_toy_pack_loads_by_module_path_with_its_import_root() -> None:
    pack = load_pack("tests.toy_pack.pack:PACK")
    assert (pack.id, pack.case_ids()) == ("toy", ["test_double[ws1]", "test_double[ws2]"])
    assert pack.search_path == (str(REPO),)  # the zygote, run with python -I, imports the bodies from there


def test_a_right_submission_earns_every_point(tmp_path: Path) -> None:
    result = grade(TOY / "submission", RUBRIC, tmp_path / "out")
    (item,) = result.items()
    assert (result.assignment, result.score, result.max_score) == ("toy", 10, 10)
    assert (item.id, item.status, item.cases.passed, item.cases.total) == ("task.double", ItemStatus.PASSED, 2, 2)
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert {"results.json", "junit.xml", "summary.md", "classroom.json", "gradescope.json"} <= set(written)


def test_a_wrong_submission_is_told_what_differs(tmp_path: Path) -> None:
    result = grade(TOY / "wrong", RUBRIC)
    (item,) = result.items()
    assert (item.score, item.status) == (0, ItemStatus.FAILED)
    assert [f.verdict for f in item.failures] == [Verdict.WRONG, Verdict.WRONG]
    assert "rank 0: the result differs" in item.feedback


def test_grading_it_imports_no_module_of_any_pack_in_the_grader(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from grader.pipeline import grade\n"
        f"result = grade({str(TOY / 'submission')!r}, __import__('pathlib').Path({str(RUBRIC)!r}))\n"
        "print(json.dumps([result.score, sorted(m for m in sys.modules if m.startswith('grader.packs'))]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    score, loaded = json.loads(done.stdout.splitlines()[-1])
    assert (score, loaded) == (10, [])


@pytest.mark.parametrize("name", ["submission", "wrong"])
def test_the_cli_grades_it_as_well(tmp_path: Path, name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(TOY / name), "--rubric", str(RUBRIC), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "results.json").read_text())["score"] == (10 if name == "submission" else 0)


def test_a_pack_whose_runtime_this_grader_lacks_is_refused_with_a_message() -> None:
    from grader import runtimes
    from grader.errors import UserError

    runtimes.require("torchdist", "toy")
    runtimes.require("threads", "homework")
    with pytest.raises(UserError, match="runs on the 'mpi' runtime; this grader has: threads, torchdist"):
        runtimes.require("mpi", "homework")
