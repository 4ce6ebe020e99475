"""The manual's quick starts run as written (issue 61, item 4): docs/students/index.md and
docs/instructors/index.md include their commands from scripts/quickstart.sh, and this module runs that
script on a fresh copy of the bundled reference (the student's) and on a class of two, the reference and
the untouched template (the instructor's), with the installed ``grader`` on the PATH."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "quickstart.sh"

pytestmark = pytest.mark.slow


def quickstart(role: str, where: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SCRIPT), role, str(where)], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def included(page: str, role: str) -> list[str]:
    """The commands a page's quick start shows: the script's lines between its markers."""
    text = SCRIPT.read_text()
    block = text.split(f"# [{role}]\n", 1)[1].split(f"# [/{role}]", 1)[0]
    assert f'start-after: "# [{role}]"' in (REPO / "docs" / page).read_text()
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_students_quick_start(tmp_path):
    repo = shutil.copytree(REPO / "reference" / "a9", tmp_path / "mine")
    shown = included("students/index.md", "student")
    assert [line.split()[0] for line in shown] == ["grader", "grader", "grader", "grader", "python"]
    done = quickstart("student", repo)
    result = json.loads((repo / "out" / "results.json").read_text())
    assert result["score"] == 105 and result["status"] == "graded", result["score"]
    assert "partial" in done.stdout.lower()  # the -k grading says its score is not the grade
    assert (repo / "repro_test_allreduce_ws3_float64_7.py").is_file()


def test_the_instructors_quick_start(tmp_path):
    roster = tmp_path / "roster"
    shutil.copytree(REPO / "reference" / "a9", roster / "alice")
    shutil.copytree(REPO / "student_template" / "a9", roster / "bob")
    (tmp_path / "manual.csv").write_text("alice,task1.diagram,3,arrows unlabelled\n")
    shutil.copy(REPO / "rubrics" / "a9.yaml", tmp_path / "rubric.yaml")
    assert [line.split()[:2] for line in included("instructors/index.md", "instructor") if line[0] != "#"] == [
        ["grader", "batch"],
        ["grader", "batch"],
    ]
    done = quickstart("instructor", tmp_path)
    assert done.stderr.count(": cached") == 2, done.stderr  # the progress lines: the second batch graded nobody
    with (tmp_path / "out" / "class" / "gradebook.csv").open() as fh:
        rows = {row["student"]: row for row in csv.DictReader(fh)}
    assert set(rows) == {"alice", "bob"}
    assert float(rows["alice"]["total"]) == 103  # the reference's 105, its diagram's 5 replaced by the manual 3
    assert float(rows["bob"]["total"]) == 0


@pytest.mark.parametrize(("heading", "role"), [("## Students", "student"), ("## Instructors", "instructor")])
def test_the_readmes_doors_show_the_quick_starts_commands(heading, role):
    """README.md's student and instructor commands are lines of the script the tests above run."""
    readme = (REPO / "README.md").read_text()
    door = readme.split(f"\n{heading}", 1)[1].split("\n## ", 1)[0]
    block = door.split("```bash\n")[-1].split("```", 1)[0]
    run = {" ".join(line.split("#", 1)[0].split()) for line in SCRIPT.read_text().splitlines()}
    shown = [" ".join(line.split("#", 1)[0].split()) for line in block.splitlines() if line.strip()]
    assert shown and all(line in run for line in shown), [line for line in shown if line not in run]
