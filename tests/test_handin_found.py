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
from grader.results import FILE_CHOSEN, FILE_IN_SUBFOLDER, ChosenFile
from grader.rubric import load_rubric

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = (REPO / "student_template/hw12/hw12.ipynb").read_bytes()  # the handout, TODOs untouched
DONE = (REPO / "reference/hw12/hw12.ipynb").read_bytes()  # the same notebook completed
HANDOUT_NAME = "Fall25_Hw12_DistributedTraining.ipynb"
FLAGS_BOTH = [FILE_IN_SUBFOLDER, FILE_CHOSEN]
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


def test_a_file_with_the_rubrics_name_alone_is_taken_without_a_note_or_flag(tmp_path: Path) -> None:
    taken = submit(tmp_path, {"hw12.ipynb": DONE, "notes.txt": b"my notes\n"}, "hw12")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert taken.info.notes == [] and taken.info.chosen == []


def test_a_name_match_alone_never_outranks_content(tmp_path: Path) -> None:
    """The handout saved as hw12.ipynb beside the work saved by Colab: the work is graded, and flagged."""
    taken = submit(tmp_path, {"hw12.ipynb": TEMPLATE, f"Copy of {HANDOUT_NAME}": DONE}, "hw12")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert taken.info.notes == [
        f"hw12.ipynb was read from Copy of {HANDOUT_NAME}: of the 2 .ipynb or .py files (Copy of {HANDOUT_NAME}, "
        "hw12.ipynb), hw12.ipynb is the handout's starter, unchanged, never graded over other work; of the rest, "
        f"the one holding the most of the handout's names ({HW12_HOLDS})"
    ]
    assert taken.info.chosen == [ChosenFile("hw12.ipynb", f"Copy of {HANDOUT_NAME}", ["hw12.ipynb"], [FILE_CHOSEN])]


def test_of_several_notebooks_the_completed_one_is_taken_and_the_note_says_why(tmp_path: Path) -> None:
    """The handout's untouched copy beside the work holds every name too: its stubs tell them apart."""
    files = {HANDOUT_NAME: TEMPLATE, f"Copy of {HANDOUT_NAME}": DONE, "scratch.ipynb": b'{"cells": []}'}
    taken = submit(tmp_path, files, "hw12", "zip")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert taken.info.notes == [
        f"hw12.ipynb was read from Copy of {HANDOUT_NAME}: of the 3 .ipynb or .py files (Copy of {HANDOUT_NAME}, "
        f"scratch.ipynb, {HANDOUT_NAME}), {HANDOUT_NAME} is the handout's starter, unchanged, never graded over "
        f"other work; of the rest, the one holding the most of the handout's names ({HW12_HOLDS})"
    ]


def test_two_drafts_holding_as_much_are_told_apart_by_their_stubs_then_by_folder(tmp_path: Path) -> None:
    """Without the starter in play, the old tie-breaks stand: fewer unfinished bodies, then the top."""
    draft = DONE.replace(b"################## YOUR CODE ##################", b"pass", 1)
    assert draft != DONE
    taken = submit(tmp_path, {"mine.ipynb": draft, "final/mine.ipynb": DONE}, "hw12")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert "mine.ipynb holds as many, and it leaves fewer bodies unfinished (2 pass" in taken.info.notes[0]
    assert taken.info.notes[0].endswith("; it is in the subfolder final")
    assert taken.info.chosen == [ChosenFile("hw12.ipynb", "final/mine.ipynb", ["mine.ipynb"], FLAGS_BOTH)]
    again = submit(tmp_path / "again", {"mine.ipynb": DONE, "old/mine.ipynb": DONE}, "hw12")
    assert again.info.chosen == [ChosenFile("hw12.ipynb", "mine.ipynb", ["old/mine.ipynb"], [FILE_CHOSEN])]
    assert "it is the one nearest the top of the hand-in" in again.info.notes[0]


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
    assert taken.info.notes == [  # the folder the zip wraps everything in is no subfolder of the work
        "assignment4.py was read from assignment4_final.py: the only .py file in the submission"
    ]
    assert taken.info.chosen == []
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


# --- one rule for which file is graded, whatever the layout (issue 57, item 2) --------------------


def with_pass_lines(notebook: bytes) -> bytes:
    """The completed notebook typed under the handout's ``pass`` lines, which the student kept: a
    ``pass`` under every ``YOUR CODE`` banner, the solution after it."""
    data = json.loads(notebook)
    for cell in data["cells"]:
        lines: list[str] = []
        for line in cell["source"] if cell["cell_type"] == "code" else []:
            lines.append(line)
            if "YOUR CODE" in line:
                lines.append(line[: len(line) - len(line.lstrip())] + "pass\n")
        cell["source"] = lines or cell["source"]
    kept = json.dumps(data, indent=1).encode()
    assert candidates.read("x.ipynb", kept, ("dp_step",)).stubs > candidates.read("x.ipynb", TEMPLATE, ()).stubs
    return kept


def ran_in_colab(notebook: bytes) -> bytes:
    """The handout as it is once run in Colab: execution counts and outputs, a comment added, code untouched."""
    data = json.loads(notebook)
    for n, cell in enumerate(c for c in data["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = n + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
    data["cells"][1]["source"] = ["# I ran this first\n", *data["cells"][1]["source"]]
    return json.dumps(data).encode()


@pytest.mark.parametrize("handout", [TEMPLATE, ran_in_colab(TEMPLATE)], ids=["untouched", "run-in-colab"])
@pytest.mark.parametrize("form", ["folder", "zip"])
def test_finished_work_that_kept_the_pass_lines_beats_the_handout(tmp_path: Path, handout: bytes, form: str) -> None:
    work = with_pass_lines(DONE)
    taken = submit(tmp_path, {HANDOUT_NAME: handout, f"Copy of {HANDOUT_NAME}": work}, "hw12", form)
    assert taken.info.files == {"hw12.ipynb": digest(work)}
    assert f"{HANDOUT_NAME} is the handout's starter, unchanged, never graded over other work" in taken.info.notes[0]


@pytest.mark.parametrize("form", ["folder", "zip"])
@pytest.mark.parametrize("folder", ["template", "hw12/starter", "drafts"])
def test_the_template_in_a_subfolder_never_takes_over_the_work(tmp_path: Path, folder: str, form: str) -> None:
    taken = submit(tmp_path, {f"{folder}/hw12.ipynb": TEMPLATE, "Hw12_final.ipynb": DONE}, "hw12", form)
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert taken.info.chosen == [ChosenFile("hw12.ipynb", "Hw12_final.ipynb", [f"{folder}/hw12.ipynb"], [FILE_CHOSEN])]


def test_work_found_only_in_a_subfolder_is_graded_and_flagged(tmp_path: Path) -> None:
    taken = submit(tmp_path, {"README.md": b"# hw12\n", "work/hw12.ipynb": DONE, "work/plots.py": b"x = 1\n"}, "hw12")
    assert taken.info.files == {"hw12.ipynb": digest(DONE)}
    assert taken.info.chosen == [ChosenFile("hw12.ipynb", "work/hw12.ipynb", [], [FILE_IN_SUBFOLDER])]
    assert taken.info.notes[0].endswith("; it is in the subfolder work")


A5_REPORT = (REPO / "reference/a5/report.md").read_bytes()
A5_STARTER = (REPO / "student_template/a5/report.md").read_bytes()


def test_an_a5_draft_in_a_subfolder_loses_to_the_report_at_the_top_and_is_named(tmp_path: Path) -> None:
    """A classmate's draft left in ``drafts/`` (named report.md) beside the student's own report."""
    mine = A5_REPORT.replace(b"## Q1", b"## Q1\n\nMy own words.", 1)
    taken = submit(tmp_path, {"A5_report_lovelace.md": mine, "drafts/report.md": A5_REPORT}, "a5", "zip")
    assert taken.info.files == {"report.md": digest(mine)}
    assert taken.problems == []  # the deliverable report.md is the file taken, not the draft of that name
    assert taken.info.chosen == [ChosenFile("report.md", "A5_report_lovelace.md", ["drafts/report.md"], [FILE_CHOSEN])]
    assert "it is the one nearest the top of the hand-in" in taken.info.notes[0]


def test_an_a5_starter_report_never_wins_and_the_handouts_own_files_are_starters(tmp_path: Path) -> None:
    files = {"report.md": A5_STARTER, "answers/my_report.md": A5_REPORT}
    taken = submit(tmp_path, files, "a5")
    assert taken.info.files == {"report.md": digest(A5_REPORT)}
    assert taken.info.chosen == [ChosenFile("report.md", "answers/my_report.md", ["report.md"], FLAGS_BOTH)]


def test_the_flag_reaches_the_gradebook_and_the_students_report() -> None:
    from grader.gradebook import flags_for
    from grader.render.markdown import render_markdown
    from grader.render.student_report import render_student_report
    from grader.results import GradeResult

    result = GradeResult.load(REPO / "tests/fixtures/results/graded.json")
    assert not {FILE_CHOSEN, FILE_IN_SUBFOLDER} & set(flags_for("graded", result))
    result.submission.chosen.append(ChosenFile("hw12.ipynb", "drafts/hw12.ipynb", ["hw12 copy.ipynb"], FLAGS_BOTH))
    assert {FILE_CHOSEN, FILE_IN_SUBFOLDER} <= set(flags_for("graded", result))
    said = "Graded hw12.ipynb from drafts/hw12.ipynb: from a subfolder and chosen over hw12 copy.ipynb"
    assert said in render_student_report(result) and said in render_markdown(result)
    assert GradeResult.from_dict(json.loads(result.to_json())).submission.chosen == result.submission.chosen


def test_an_a4_starter_in_a_subfolder_never_takes_over_and_the_logs_are_still_found(tmp_path: Path) -> None:
    """The handout's assignment4.py kept in starter/ used to become the submission's root by its name:
    the template was graded and the logs beside the work were missing."""
    script = (REPO / "reference/a4/assignment4.py").read_bytes()
    starter = (REPO / "student_template/a4/assignment4.py").read_bytes()
    files = {"a4_final.py": script, "starter/assignment4.py": starter, "run.log": b"log\n", "run.err": b""}
    taken = submit(tmp_path, files, "a4")
    assert taken.info.files["assignment4.py"] == digest(script)
    assert taken.problems == []
    assert taken.info.chosen == [ChosenFile("assignment4.py", "a4_final.py", ["starter/assignment4.py"], [FILE_CHOSEN])]
