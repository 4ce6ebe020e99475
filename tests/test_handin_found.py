"""The hand-in is found by what it holds, not by its name (issue 37): what Colab and Jupyter save
(the handout's own file name, ``Copy of ...``, ``... (1)``, a ``.py`` export), a report named after
its student, a script renamed in its zip.  Every command takes a submission through ``intake.take``,
so these hold for ``grade``, ``check``, ``batch`` (its cache key), Classroom and the container alike."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from grader import candidates
from grader.intake import Intake, take
from grader.rubric import load_rubric

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = (REPO / "student_template/hw12/hw12.ipynb").read_bytes()  # the handout, TODOs untouched
DONE = (REPO / "reference/hw12/hw12.ipynb").read_bytes()  # the same notebook completed
HANDOUT_NAME = "Fall25_Hw12_DistributedTraining.ipynb"
HW12_HOLDS = "5 of 5: DistributedContext, split_batch, dp_step, ColumnParallelLinear, RowParallelLinear"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def submit(tmp_path: Path, files: dict[str, bytes], pack: str, form: str = "folder") -> Intake:
    """``files`` handed in as a folder or as a zip of it, taken under the pack's own rubric."""
    folder = tmp_path / "handed-in"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    source = folder
    if form == "zip":
        source = tmp_path / "handed-in.zip"
        with zipfile.ZipFile(source, "w") as archive:
            for name, data in files.items():
                archive.writestr(name, data)
    return take(source, load_rubric(REPO / "rubrics" / f"{pack}.yaml"), tmp_path / "sandbox")


def as_export(notebook: bytes) -> bytes:
    """The notebook as ``jupyter nbconvert --to script`` writes it (``# In[n]:`` before each cell)."""
    cells = [c for c in json.loads(notebook)["cells"] if c["cell_type"] == "code"]
    return "".join(f"\n# In[{n}]:\n\n{''.join(c['source'])}\n" for n, c in enumerate(cells, 1)).encode()


@pytest.mark.parametrize("form", ["folder", "zip"])
@pytest.mark.parametrize(
    "name",
    [HANDOUT_NAME, f"Copy of {HANDOUT_NAME}", "Fall25_Hw12_DistributedTraining (1).ipynb", "hw12_ada_lovelace.ipynb"],
)
def test_a_notebook_under_the_name_colab_gave_it_is_taken_as_hw12_ipynb(tmp_path: Path, name: str, form: str) -> None:
    taken = submit(tmp_path, {name: DONE, "notes.txt": b"my notes\n"}, "hw12", form)
    assert taken.student_files == ("hw12.ipynb",)
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert (taken.sandbox / "hw12.ipynb").read_bytes() == DONE
    assert taken.problems == []
    assert taken.info.notes == [f"hw12.ipynb was read from {name}: the only .ipynb or .py file in the submission"]


def test_a_py_export_under_another_name_is_taken_as_hw12_py(tmp_path: Path) -> None:
    export = as_export(DONE)
    taken = submit(tmp_path, {"fall25_hw12_distributedtraining.py": export}, "hw12")
    assert taken.student_files == ("hw12.py",)
    assert (taken.sandbox / "hw12.py").read_bytes() == export


def test_a_file_with_the_rubrics_name_is_taken_without_a_search(tmp_path: Path) -> None:
    taken = submit(tmp_path, {"hw12.ipynb": TEMPLATE, f"Copy of {HANDOUT_NAME}": DONE}, "hw12")
    assert taken.info.files == {"hw12.ipynb": digest(TEMPLATE)}
    assert taken.info.notes == []


def test_of_several_notebooks_the_completed_one_is_taken_and_the_note_says_why(tmp_path: Path) -> None:
    """The handout's untouched copy beside the work holds every name too: its stubs tell them apart."""
    files = {HANDOUT_NAME: TEMPLATE, f"Copy of {HANDOUT_NAME}": DONE, "scratch.ipynb": b'{"cells": []}'}
    taken = submit(tmp_path, files, "hw12", "zip")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert taken.info.notes == [
        f"hw12.ipynb was read from Copy of {HANDOUT_NAME}: of the 3 .ipynb or .py files (Copy of {HANDOUT_NAME}, "
        f"{HANDOUT_NAME}, scratch.ipynb), the one holding the most of the handout's names ({HW12_HOLDS}); "
        f"{HANDOUT_NAME} holds as many, and it leaves fewer bodies unfinished "
        "(2 pass or NotImplementedError lines against 8)"
    ]


def test_the_notebook_that_defines_more_of_the_handout_wins_over_a_helper_script(tmp_path: Path) -> None:
    files = {"helpers.py": b"def plot(x):\n    return x\n", "hw12_mine.ipynb": DONE}
    taken = submit(tmp_path, files, "hw12")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert "the one holding the most of the handout's names (5 of 5" in taken.info.notes[0]


def test_no_candidate_is_missing_and_the_problem_lists_what_was_there(tmp_path: Path) -> None:
    taken = submit(tmp_path, {"hw12.pdf": b"%PDF-1.4\n", "screenshot.png": b"\x89PNG"}, "hw12")
    assert taken.student_files == ()
    assert taken.problems == [
        "the submission holds hw12.pdf, screenshot.png: no .ipynb or .py files in it",
        "hw12.ipynb or hw12.py is missing",
    ]


def test_several_candidates_holding_nothing_of_the_handout_are_not_taken(tmp_path: Path) -> None:
    files = {"a.py": b"print(1)\n", "b.py": b"print(2)\n"}
    taken = submit(tmp_path, files, "hw12")
    assert taken.student_files == ()
    assert taken.problems[0] == (
        "the submission holds a.py, b.py: none of the .ipynb or .py files (a.py, b.py) holds any of the handout's "
        "DistributedContext, split_batch, dp_step, ColumnParallelLinear, RowParallelLinear"
    )


def test_an_a5_report_under_its_students_name_is_the_report_and_its_deliverable(tmp_path: Path) -> None:
    report = (REPO / "reference/a5/report.md").read_bytes()
    readme = b"# Assignment 5\n\nRun `torchrun test.py`.\n"
    taken = submit(tmp_path, {"A5_Lovelace_report.md": report, "README.md": readme}, "a5", "zip")
    assert taken.info.files == {"report.md": digest(report)}
    assert taken.problems == []  # the deliverable of the same name is this file, not missing
    assert taken.info.notes[0].startswith("report.md was read from A5_Lovelace_report.md: of the 2 .md files")


def test_an_a4_script_renamed_in_its_zip_is_found_and_the_handouts_utils_never_is(tmp_path: Path) -> None:
    script = (REPO / "reference/a4/assignment4.py").read_bytes()
    utils = (REPO / "reference/a4/utils.py").read_bytes()
    files = {"a4/assignment4_final.py": script, "a4/utils.py": utils, "a4/run.log": b"log\n", "a4/run.err": b""}
    taken = submit(tmp_path, files, "a4", "zip")
    assert taken.info.files["assignment4.py"] == digest(script)
    assert taken.info.notes == [
        "assignment4.py was read from a4/assignment4_final.py: the only .py file in the submission"
    ]
    alone = submit(tmp_path / "alone", {"utils.py": utils}, "a4")
    assert alone.student_files == ()
    assert "the submission holds utils.py: no .py files in it" in alone.problems


def test_a_renamed_notebook_in_a_git_repository_is_found(tmp_path: Path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    (work / HANDOUT_NAME).write_bytes(DONE)
    ident = ["-c", "user.name=Student", "-c", "user.email=s@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "hw12"]):
        subprocess.run(["git", *ident, *args], cwd=work, check=True, capture_output=True)
    taken = take(f"file://{work}", load_rubric(REPO / "rubrics/hw12.yaml"), tmp_path / "sandbox")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}


# --- reading candidates is reading data -----------------------------------------------------------


def test_a_candidate_over_the_size_limit_is_not_read_and_a_link_is_never_followed(tmp_path: Path) -> None:
    rubric = load_rubric(REPO / "rubrics/hw12.yaml")
    folder = tmp_path / "handed-in"
    folder.mkdir()
    (folder / "huge.ipynb").write_bytes(b" " * ((rubric.limits.file_size_mb << 20) + 1))
    (tmp_path / "outside.ipynb").write_bytes(DONE)
    os.symlink(tmp_path / "outside.ipynb", folder / "linked.ipynb")
    taken = take(folder, rubric, tmp_path / "sandbox")
    assert taken.student_files == ()
    assert f"huge.ipynb is over the {rubric.limits.file_size_mb << 20}-byte limit: not looked at" in taken.problems


@pytest.mark.parametrize(
    "data",
    [b"[" * 100_000, b'{"cells": 7}', b'{"cells": [{"cell_type": "code", "source": [1, null]}]}', b"\xff\xfe\x00"],
)
def test_a_notebook_that_is_not_one_holds_nothing(data: bytes) -> None:
    assert candidates.read("x.ipynb", data, ("split_batch",)).holds == ()


def test_definitions_and_headings_are_recognised_as_a_student_writes_them() -> None:
    code = b"class DistributedContext:\n    pass\n\nasync def dp_step(x):\n    return x\n# def split_batch\n"
    assert candidates.read("x.py", code, ("DistributedContext", "dp_step", "split_batch")).holds == (
        "DistributedContext",
        "dp_step",
    )
    report = b"## Q1: seeds\n**Q2:** asserts\n> **Q3.** shape\n### question 4\nQ10 asks\n"
    assert candidates.read("r.md", report, ("Q1", "Q2", "Q3", "Q4", "Q10")).holds == ("Q1", "Q2", "Q3", "Q10")
