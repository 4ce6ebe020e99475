"""``grader grade DIR --watch``: a student's loop.  It grades, waits until a file the grading reads
changes, grades again on a warm session host, and says which cases now pass and which now fail.
Ctrl-C ends it with status 0 and nothing left running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from grader import cli, intake, watch
from grader.matrix.host import Host, keep_spare
from grader.pipeline import grade
from grader.render.changes import CASES_SHOWN, render_changes
from grader.results import CaseOutcome, GradeResult, SubmissionInfo, Verdict
from grader.rubric import load_rubric

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "toy_pack"
RUBRIC = TOY / "rubric.yaml"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux sandbox's session host")


def result(score: float, cases: dict[str, Verdict], status: str = "graded") -> GradeResult:
    return GradeResult(
        assignment="toy",
        score=score,
        max_score=10,
        tasks=[],
        submission=SubmissionInfo(source=".", files={}, digest=""),
        grader_version="test",
        rubric_digest="",
        status=status,
        cases=[CaseOutcome(id, verdict, f"{id} was {verdict.value}") for id, verdict in cases.items()],
    )


# --- what changed --------------------------------------------------------------------------------


def test_the_report_lists_the_cases_that_now_pass_and_those_that_now_fail_with_why() -> None:
    before = result(5, {"a[ws1]": Verdict.PASS, "a[ws2]": Verdict.WRONG, "b[ws1]": Verdict.PASS})
    after = result(5, {"a[ws1]": Verdict.HANG, "a[ws2]": Verdict.PASS, "b[ws1]": Verdict.PASS})
    assert render_changes(before, after) == (
        "Since the last grade: 5/10 -> 5/10 (unchanged)\n"
        "  now pass (1):\n"
        "    a[ws2]\n"
        "  now fail (1):\n"
        "    a[ws1]: hang (a[ws1] was hang)\n"
    )


def test_a_grade_that_changes_no_verdict_says_so_with_the_score() -> None:
    same = {"a[ws1]": Verdict.PASS, "a[ws2]": Verdict.CRASH}
    assert render_changes(result(5, same), result(5, same)).splitlines() == [
        "Since the last grade: 5/10 -> 5/10 (unchanged)",
        "  no case changed its verdict",
    ]


def test_a_case_the_earlier_grade_did_not_list_now_passes_and_one_the_later_did_not_list_is_not_said_to_fail() -> None:
    graded = result(7.5, {"a[ws1]": Verdict.PASS})
    errored = result(0, {}, status="error")
    assert render_changes(errored, graded).splitlines()[:3] == [
        "Since the last grade: 0/10 -> 7.5/10 (+7.5)",
        "  now pass (1):",
        "    a[ws1]",
    ]
    assert render_changes(graded, errored).splitlines() == [
        "Since the last grade: 7.5/10 -> 0/10 (-7.5)",
        "  no case changed its verdict",
    ]


def test_a_change_of_the_whole_matrix_is_cut_to_a_count() -> None:
    ids = [f"a[{i}]" for i in range(CASES_SHOWN + 3)]
    lines = render_changes(result(10, dict.fromkeys(ids, Verdict.PASS)), result(0, dict.fromkeys(ids, Verdict.WRONG)))
    assert lines.splitlines()[1] == f"  now fail ({CASES_SHOWN + 3}):"
    assert lines.splitlines()[-1] == "    and 3 more"
    assert len(lines.splitlines()) == 2 + CASES_SHOWN + 1


def test_colour_marks_only_the_headings_and_only_when_asked() -> None:
    before, after = result(0, {"a[ws1]": Verdict.WRONG}), result(10, {"a[ws1]": Verdict.PASS})
    assert "\033[" not in render_changes(before, after)
    assert "\033[32mnow pass\033[0m" in render_changes(before, after, color=True)


# --- which files, and when they changed ----------------------------------------------------------


def test_the_watched_files_are_the_ones_intake_takes_and_where_it_looks_for_a_missing_one(tmp_path: Path) -> None:
    rubric = load_rubric(RUBRIC)
    (tmp_path / "repo").mkdir()
    shutil.copy(TOY / "submission" / "ops.py", tmp_path / "repo" / "ops.py")
    (tmp_path / "repo" / "notes.txt").write_text("not graded")
    assert intake.watched(tmp_path, rubric) == {tmp_path / "repo" / "ops.py"}  # the wrapping folder searched
    empty = tmp_path / "empty"
    empty.mkdir()
    assert intake.watched(empty, rubric) == {empty / "ops.py"}  # where a new ops.py will be taken from


def test_a_file_that_appears_is_a_change(tmp_path: Path) -> None:
    path = tmp_path / "ops.py"
    before = watch.stamp([path])
    assert before == {path: None}
    path.write_text("x = 1\n")
    assert watch.wait_for_change([path], before, stop=threading.Event(), poll_s=0.01)


def test_a_change_is_graded_once_it_holds_still_for_one_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path("ops.py")
    writes: list[watch.Stamps] = [{path: (1, 1)}, {path: (2, 5)}, {path: (3, 9)}, {path: (3, 9)}]
    saves = iter(writes)  # one save in three writes, then still
    polls: list[int] = []

    def stamp(paths: object) -> watch.Stamps:
        polls.append(1)
        return next(saves)

    monkeypatch.setattr(watch, "stamp", stamp)
    assert watch.wait_for_change([path], {path: (0, 0)}, stop=threading.Event(), poll_s=0)
    assert len(polls) == 4  # returned on the first poll that saw no further write


def test_a_stopped_wait_returns_without_a_change(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    assert not watch.wait_for_change([tmp_path / "ops.py"], {}, stop=stop, poll_s=0.01)


# --- the loop ------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A student's working copy of the toy submission (both cases pass)."""
    shutil.copytree(TOY / "submission", tmp_path / "tree")
    return tmp_path / "tree"


@linux_only
def test_an_edit_is_graded_again_on_the_host_started_beside_the_grade_before(
    tree: Path, started: list[Host], taken: list[Host]
) -> None:
    rubric = load_rubric(RUBRIC)
    shown: list[tuple[GradeResult, GradeResult | None]] = []
    ready: dict[Host, object] = {}  # the hosts started before the second grading, with the pack each was told

    def show(now: GradeResult, before: GradeResult | None) -> None:
        shown.append((now, before))
        if before is None:  # the student breaks double() after the first grade
            ready.update({host: host.told for host in started})
            shutil.copy(TOY / "wrong" / "ops.py", tree / "ops.py")

    with keep_spare(False):  # the suite's own spare (tests/conftest.py) off: the loop keeps its own
        watch.watch(lambda: grade(tree, RUBRIC), lambda: intake.watched(tree, rubric), show, rounds=2, poll_s=0.05)
    (first, none), (second, before) = shown
    assert none is None and before is first
    lines = render_changes(first, second).splitlines()
    assert lines[:2] == ["Since the last grade: 10/10 -> 0/10 (-10)", "  now fail (2):"]
    assert [line.partition(":")[0].strip() for line in lines[2:]] == ["test_double[ws1]", "test_double[ws2]"]
    assert taken[1] in ready and taken[1] is not taken[0]  # warm: the spare started beside the first grading
    assert ready[taken[1]] == taken[0].told  # and told its pack then: its zygote was ready for the re-grade
    assert all(host.proc.returncode is not None for host in started)  # leaving the loop closed the spare


def _descendants(pid: int) -> set[int]:
    """``pid``'s children, theirs, and so on, from every thread of each."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            with contextlib.suppress(OSError):  # a process that ended while we looked
                kids = {int(k) for k in (task / "children").read_text().split()} - found
                todo += kids
                found |= kids
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has, whoever is to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@linux_only
def test_ctrl_c_ends_the_loop_with_status_0_and_nothing_left(tree: Path, tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader", "grade", str(tree), "--rubric", str(RUBRIC), "--watch", "-k", "ws2"],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(temp), "NO_COLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        out.extend(proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _wait_for(lambda: any(line.startswith("Score:") for line in out))
        shutil.copy(TOY / "wrong" / "ops.py", tree / "ops.py")
        _wait_for(lambda: any(line.startswith("  now fail") for line in out) and out[-1].startswith("    test_double"))
        left = _descendants(proc.pid)
        assert left  # the spare host, warm for the next grade
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    assert proc.stderr is not None
    assert "grader: stopped watching" in proc.stderr.read()
    _, now_fail, case = "".join(out).split("Since the last grade: ")[1].splitlines()
    assert now_fail == "  now fail (1):" and case.startswith("    test_double[ws2]: wrong")  # -k ws2: only its case
    deadline = time.monotonic() + 30  # they die with the loop at once; a loaded machine may take its time
    while any(_running(pid) for pid in left) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in left if _running(pid)]
    assert not list(temp.glob("grader-*"))  # no work or group directory left behind


def _wait_for(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the loop did not get there in time"
        time.sleep(0.05)


# --- what --watch refuses ------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["archive", "https://example.com/student.git"])
def test_watch_refuses_what_does_not_change_under_it(
    source: str, tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if source == "archive":
        source = str(tmp_path / "hand-in.zip")
        with zipfile.ZipFile(source, "w") as archive:
            archive.write(tree / "ops.py", "ops.py")
    assert cli.main(["grade", source, "--rubric", str(RUBRIC), "--watch"]) == 1
    assert "--watch needs the directory you edit" in capsys.readouterr().err


def test_watch_refuses_the_docker_backend(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["grade", str(tree), "--rubric", str(RUBRIC), "--watch", "--backend", "docker"]) == 1
    assert "leave out --backend docker" in capsys.readouterr().err
