"""`grader batch`: every student gets a row, failures stay rows, runs resume, manual scores merge.

The batch is driven with a fake grader (this file run as a script, injected through
``run_batch(grade_cmd=...)``): it writes a valid ``results.json`` and ``junit.xml`` whose scores are
a function of the submission's ``src/collectives.py``, and obeys ``# fake: ...`` lines in that file
(``sleep=S``, ``hang``, ``crash``, ``error``, ``forbidden``, ``hang-case``, ``no-trace``).  Every run
appends the submission's name to ``$FAKE_GRADER_LOG``, so the tests count grades.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from io import StringIO
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAKE = [sys.executable, str(Path(__file__).resolve())]
EMPTY_PY = "def my_broadcast(tensor, src=0):\n    return tensor\n"


# ----------------------------------------------------------------------------------------------
# The fake grader (runs in a child process)


def _item(iid, title, max_score, fraction, status=None, cases=(0, 0), failures=(), findings=()):
    from grader.results import CaseOutcome, CaseTally, ItemResult, ItemStatus, Verdict

    score = max_score * fraction
    if status is None:
        status = ItemStatus.PASSED if fraction == 1 else ItemStatus.FAILED if fraction == 0 else ItemStatus.PARTIAL
    outs = [CaseOutcome(cid, Verdict(v), msg) for cid, v, msg in failures]
    return ItemResult(iid, title, score, max_score, status, "", CaseTally(*cases), list(findings), outs)


def _events():
    """A plausible isend/irecv all-to-all at world size 4: every rank posts its receives, then sends."""
    events = []
    for r in range(4):
        for step in (1, 2, 3):
            src = (r - step) % 4
            events.append({"rank": r, "op": "irecv", "peer": src, "t": 0.0001 * (r + step)})
        for step in (1, 2, 3):
            dst = (r + step) % 4
            events.append({"rank": r, "op": "isend", "peer": dst, "t": 0.0002 * (2 * r + step) + 0.0003})
    for e in events:
        e.update(bytes=256, shape=[2, 8, 1, 4], dtype="float32", function="my_all_to_all")
    return sorted(events, key=lambda e: (e["t"], e["rank"]))


def fake_result(
    source: str, text: str, submitted_at: str | None = None, deadline: str | None = None, time_source: str = "flag"
):
    """The GradeResult the fake grader writes for a submission whose collectives.py is ``text``."""
    import math
    from datetime import datetime, timedelta

    from grader.manual import recompute_totals
    from grader.results import (
        Finding,
        GradeResult,
        ItemStatus,
        Lateness,
        LatePenalty,
        SubmissionInfo,
        TaskResult,
        TimeSource,
    )

    h = hashlib.sha256(text.encode()).digest()
    frac = [(b % 3) / 2 for b in h]  # 0, 1/2 or 1 of each item: exact in binary
    findings = []
    if "# fake: forbidden" in text:
        findings.append(
            Finding("forbidden-collective", "dist.all_reduce is not allowed in my_allreduce",
                    "src/collectives.py", 12, 4, "my_allreduce", "dist.all_reduce(tensor)")
        )
    a2a_failures = [] if frac[1] == 1 else [("test_all_to_all[ws4-s2g1-float32]", "wrong", "rank 2: wrong chunk")]
    if "# fake: hang-case" in text:
        a2a_failures.append(("test_all_to_all[ws8-s0g1-float64]", "hang", "rank 3 waited in recv from rank 1"))
    task1 = TaskResult("task1", "Task 1 — collectives", 0, 32, [
        _item("task1.broadcast", "my_broadcast", 6, frac[0], cases=(int(4 * frac[0]), 4),
              failures=[] if frac[0] == 1 else [("test_broadcast[ws4-src2-float32-4x5]", "wrong", "rank 1 differs")]),
        _item("task1.all_to_all", "my_all_to_all", 6, frac[1], cases=(int(4 * frac[1]), 4), failures=a2a_failures,
              findings=findings),
        _item("task1.diagram", "all-to-all schematic", 5, 0, status=ItemStatus.PENDING_REVIEW),
        _item("task1.written", "written questions", 15, frac[2]),
    ])
    task2 = TaskResult("task2", "Task 2 — parallel transformer", 0, 40, [
        _item("task2.tensor_parallel", "tensor parallel", 20, frac[3], cases=(int(2 * frac[3]), 2)),
        _item("task2.ulysses", "Ulysses", 20, frac[4], cases=(int(2 * frac[4]), 2),
              failures=[] if frac[4] == 1 else [("test_ulysses[ws4-d32h4s8b1]", "crash", "rank 0 raised IndexError")]),
    ])
    bonus = TaskResult("bonus", "Bonus", 0, 3, [
        _item("bonus.tree_broadcast", "tree broadcast", 2, frac[5]),
        _item("bonus.bandwidth_allreduce", "ring allreduce", 2, frac[6]),
    ], bonus=True)
    late, lateness = None, Lateness.UNKNOWN if deadline else Lateness.NO_DEADLINE
    if submitted_at and deadline:
        overdue = datetime.fromisoformat(submitted_at) - datetime.fromisoformat(deadline)
        days = max(0, math.ceil(overdue / timedelta(days=1)))
        late = LatePenalty(days, min(10.0 * days, 50.0), 0.0)
        lateness = Lateness.LATE if days else Lateness.ON_TIME
    info = SubmissionInfo(source, {"src/collectives.py": "sha256:" + hashlib.sha256(text.encode()).hexdigest()},
                          "sha256:" + h.hex(), submitted_at=submitted_at,
                          submitted_at_source=TimeSource(time_source) if submitted_at else TimeSource.UNKNOWN)
    result = GradeResult("a9", 0.0, 72.0, [task1, task2, bonus], info, "0.1.0", "sha256:fake", late=late,
                         lateness=lateness, findings=findings,
                         isolation={"rlimits": "on", "session": "on", "uid": "off: not root"})
    if "# fake: no-trace" not in text:
        result.trace = {"test_trace_all_to_all[ws4]": {"events": _events()}}
    recompute_totals(result)
    return result


def _junit(result) -> str:
    cases = []
    for item in result.items():
        for k in range(item.cases.total):
            cases.append((f"{item.id.split('.')[1]}_{k}", "pass" if k < item.cases.passed else "wrong"))
        cases += [(f.id, f.verdict.value) for f in item.failures]
    body = "".join(
        f'<testcase classname="matrix" name="{name}"><properties><property name="verdict" value="{v}"/>'
        f"</properties></testcase>"
        for name, v in cases
    )
    return f'<?xml version="1.0"?><testsuites><testsuite name="matrix">{body}</testsuite></testsuites>\n'


def _read_submission(source: Path) -> str:
    if source.suffix == ".zip":
        with zipfile.ZipFile(source) as zf:
            name = next(n for n in zf.namelist() if n.endswith("src/collectives.py"))
            return zf.read(name).decode()
    return next(source.rglob("collectives.py")).read_text()


def fake_main(argv: list[str]) -> int:
    import argparse

    import yaml

    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("submission")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rubric", type=Path)
    parser.add_argument("--submitted-at")
    parser.add_argument("--submitted-at-source", default="flag")
    parser.add_argument("--trust-commit-time", action="store_true")
    args = parser.parse_args(argv)
    with open(os.environ["FAKE_GRADER_LOG"], "a", errors="backslashreplace") as log:
        log.write(f"{Path(args.submission).name} {os.getpid()}\n")
    text = _read_submission(Path(args.submission))
    print(f"fake grading {args.submission}")
    for line in text.splitlines():
        if line.startswith("# fake: sleep="):
            time.sleep(float(line.split("=")[1]))
    if "# fake: hang" in text.split("\n"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(os.environ["FAKE_GRADER_LOG"] + ".pids").write_text(str(child.pid))
        time.sleep(600)
    if "# fake: crash" in text:
        print("Traceback: the grader fell over")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    deadline = None
    if args.rubric:
        deadline = (yaml.safe_load(args.rubric.read_text()).get("late") or {}).get("deadline")
    result = fake_result(args.submission, text, args.submitted_at, deadline, args.submitted_at_source)
    if args.trust_commit_time:
        result.submission.problems.append("fake: --trust-commit-time")
    if "# fake: error" in text:
        result.status, result.error = "error", "the matrix runner died: grader bug"
    (args.out / "results.json").write_text(result.to_json())
    (args.out / "junit.xml").write_text(_junit(result))
    return 2 if result.status == "error" else 0


# ----------------------------------------------------------------------------------------------
# Helpers


def submission(root: Path, name: str, *directives: str, body: str = EMPTY_PY) -> Path:
    """A student repo the way GitHub Classroom lays it out, with fake-grader directives."""
    path = root / name
    (path / "src").mkdir(parents=True)
    (path / "src" / "collectives.py").write_text("".join(f"# fake: {d}\n" for d in directives) + name + "\n" + body)
    (path / "written_answers_task1.md").write_text(f"answers of {name}\n")
    return path


def invocations(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    import csv

    with (out / "gradebook.csv").open() as fh:
        return {row["student"]: row for row in csv.DictReader(fh)}


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "grades.log"
    monkeypatch.setenv("FAKE_GRADER_LOG", str(path))
    return path


def run(roster: Path, out: Path, **kwargs):
    from grader.batch import run_batch

    kwargs.setdefault("progress", StringIO())
    return run_batch(roster, out, grade_cmd=FAKE, **kwargs)


# ----------------------------------------------------------------------------------------------
# Tests


def test_every_student_is_a_row_whatever_happened_to_their_grade(tmp_path, log):
    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    submission(roster, "a9-carol", "hang")
    submission(roster, "a9-dave", "crash")
    submission(roster, "a9-erin", "error")
    submission(roster, "a9-gina", "forbidden", "hang-case")
    (roster / "a9-frank").mkdir()  # accepted the assignment, pushed nothing
    bob = submission(tmp_path, "a9-bob")
    with zipfile.ZipFile(roster / "a9-bob.zip", "w") as zf:
        for f in bob.rglob("*"):
            zf.write(f, "a9-bob-main/" + f.relative_to(bob).as_posix())
    progress = StringIO()

    rows = run(roster, tmp_path / "out", jobs=3, timeout=10, progress=progress)

    status = {r.student: r.status for r in rows}
    assert status == {
        "alice": "graded", "bob": "graded", "carol": "timeout", "dave": "grader_error",
        "erin": "grader_error", "frank": "no_submission", "gina": "graded",
    }
    book = gradebook(tmp_path / "out")
    assert list(book) == ["alice", "bob", "carol", "dave", "erin", "frank", "gina"]
    assert book["carol"]["flags"] == "timeout" and book["carol"]["total"] == ""
    assert book["frank"]["total"] == "0"
    assert set(book["gina"]["flags"].split()) >= {"forbidden", "hang"}
    assert "the matrix runner died" in next(r.message for r in rows if r.student == "erin")
    assert "fell over" in next(r.message for r in rows if r.student == "dave")
    assert sorted(invocations(log)) == ["a9-alice", "a9-bob.zip", "a9-carol", "a9-dave", "a9-erin", "a9-gina"]
    # The timeout killed the hanging grade's whole process group, its child included.
    child = int(Path(str(log) + ".pids").read_text())
    assert _dead(child)
    lines = progress.getvalue().splitlines()
    assert len(lines) == 7 and lines[-1].startswith("[7/7]") and "ETA" in lines[-1]
    assert not list((tmp_path / "out" / "students").glob(".*"))


def _dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_numbers_in_the_gradebook_are_the_results(tmp_path, log):
    from grader.results import GradeResult

    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob", "a9-carol"):
        submission(roster, name)
    run(roster, tmp_path / "out")
    book = gradebook(tmp_path / "out")
    assert list(next(iter(book.values()))) == [
        "student", "task1", "task2", "bonus", "late_penalty", "total", "status", "flags",
    ]
    for name, row in book.items():
        result = GradeResult.load(tmp_path / "out" / "students" / name / "results.json")
        assert float(row["total"]) == pytest.approx(result.score)
        assert float(row["task1"]) == pytest.approx(result.tasks[0].score)
        assert float(row["bonus"]) == pytest.approx(result.bonus_score)
        assert "review" in row["flags"].split()  # the diagram waits for an instructor
        assert (tmp_path / "out" / "students" / name / "report.html").is_file()
        key = json.loads((tmp_path / "out" / "students" / name / "cache-key.json").read_text())
        assert key["submission"].startswith("sha256:") and key["grader_version"]


def test_rerun_grades_only_what_changed_and_force_grades_all(tmp_path, log):
    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob", "a9-carol"):
        submission(roster, name)
    (roster / "a9-dave").mkdir()
    out = tmp_path / "out"
    run(roster, out)
    assert len(invocations(log)) == 3

    log.unlink()
    run(roster, out)
    assert invocations(log) == []

    (roster / "a9-bob" / "src" / "collectives.py").write_text("# fake: forbidden\nbob v2\n")
    (roster / "a9-carol" / "notes.txt").write_text("not a file the rubric names: no regrade\n")
    run(roster, out)
    assert invocations(log) == ["a9-bob"]
    assert "forbidden" in gradebook(out)["bob"]["flags"].split()

    log.unlink()
    run(roster, out, force=True)
    assert sorted(invocations(log)) == ["a9-alice", "a9-bob", "a9-carol"]


def test_a_killed_batch_resumes_and_ends_as_an_uninterrupted_one(tmp_path, log):
    roster = tmp_path / "roster"
    names = [f"a9-s{i}" for i in range(6)]
    for name in names:
        submission(roster, name, "sleep=0.5")
    out = tmp_path / "out"
    driver = (
        "import sys; from pathlib import Path; from grader.batch import run_batch\n"
        f"run_batch(Path({str(roster)!r}), Path({str(out)!r}), jobs=2, grade_cmd={FAKE!r})\n"
    )
    batch = subprocess.Popen([sys.executable, "-c", driver], cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        while len(_done(out)) < 2:
            assert batch.poll() is None, "the batch ended before it could be interrupted"
            time.sleep(0.05)
    finally:
        batch.send_signal(signal.SIGSTOP)  # freeze it so that no grade starts while we look
        in_flight = _children(batch.pid)
        batch.send_signal(signal.SIGKILL)
        batch.wait()
    done = _done(out)
    assert 2 <= len(done) < 6
    assert not (out / "gradebook.csv").exists()
    # Grades in flight when the batch died finish on their own; wait for them, as a person would.
    for pid in in_flight:
        while not _dead(pid):
            time.sleep(0.05)

    log.unlink()
    run(roster, out, jobs=2)
    again = invocations(log)
    assert sorted(again) == sorted(n for n in names if n.removeprefix("a9-") not in done)
    assert not list((out / "students").glob(".*"))

    run(roster, tmp_path / "straight", jobs=2)
    assert (out / "gradebook.csv").read_text() == (tmp_path / "straight" / "gradebook.csv").read_text()
    assert (out / "index.html").read_text() == (tmp_path / "straight" / "index.html").read_text()


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _done(out: Path) -> set[str]:
    """Students whose grade is in place (temp dirs, named ``.tmp-*``, are not)."""
    return {p.parent.name for p in out.glob("students/*/cache-key.json") if not p.parent.name.startswith(".")}


def test_manual_scores_change_totals_exactly(tmp_path, log):
    from grader.results import GradeResult

    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob"):
        submission(roster, name)
    out = tmp_path / "out"
    run(roster, out)
    before = gradebook(out)
    auto = GradeResult.load(out / "students" / "alice" / "results.json")
    written = auto.item("task1.written").score

    manual = tmp_path / "manual.csv"
    manual.write_text('student,item,points,comment\nalice,task1.diagram,4,"clear, but chunk labels missing"\n'
                      "alice,task1.written,15\n")
    log.unlink()
    run(roster, out, manual=manual)
    assert invocations(log) == []  # merging never regrades
    after = gradebook(out)
    delta = 4 + (15 - written)
    assert float(after["alice"]["total"]) == pytest.approx(float(before["alice"]["total"]) + delta)
    assert float(after["alice"]["task1"]) == pytest.approx(float(before["alice"]["task1"]) + delta)
    assert after["bob"] == before["bob"]
    assert "manual" in after["alice"]["flags"].split() and "review" not in after["alice"]["flags"].split()
    final = GradeResult.load(out / "students" / "alice" / "final.json")
    assert final.item("task1.diagram").status.value == "manual"
    assert final.item("task1.diagram").feedback == "clear, but chunk labels missing"
    assert "clear, but chunk labels missing" in (out / "students" / "alice" / "report.html").read_text()
    assert GradeResult.load(out / "students" / "alice" / "results.json") == auto  # the cache stays automatic

    as_yaml = tmp_path / "manual.yaml"
    as_yaml.write_text("alice:\n  task1.diagram: {points: 4, comment: 'clear, but chunk labels missing'}\n"
                       "  task1.written: 15\n")
    run(roster, out, manual=as_yaml)
    assert gradebook(out) == after

    run(roster, out)  # dropping the file restores the automatic scores
    assert gradebook(out) == before


def test_bad_manual_scores_are_refused_with_the_reason(tmp_path, log):
    from grader.errors import UserError

    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    submission(roster, "a9-bob")
    bad = tmp_path / "m.csv"
    for content, reason in [
        ("zoe,task1.diagram,4\n", "not in the roster: zoe"),
        ("alice,task1.diagramm,4\n", "unknown item 'task1.diagramm'"),
        ("alice,task1.diagram,6\n", "outside 0..5"),
        ("alice,task1.diagram,four\n", "m.csv:1: points must be a number"),
    ]:
        bad.write_text(content)
        with pytest.raises(UserError, match=reason):
            run(roster, tmp_path / "out", manual=bad)


def test_apply_manual_recomputes_bonus_cap_and_late_penalty():
    import dataclasses

    from grader.manual import apply_manual
    from grader.results import LatePenalty

    result = fake_result("x", "alice\n")
    result.late = LatePenalty(2, 20.0, 0.0)
    merged = apply_manual(result, {"bonus.tree_broadcast": 2, "bonus.bandwidth_allreduce": 2,
                                   "task1.diagram": 5, "task1.written": 15})
    tasks = {t.id: t.score for t in merged.tasks}
    assert tasks["bonus"] == 3 and merged.bonus_score == 3  # 4 earned, capped at the bonus task's max
    gross = tasks["task1"] + tasks["task2"] + 3
    assert merged.late == dataclasses.replace(result.late, points=round(gross * 0.2, 2))
    assert merged.score == round(gross - merged.late.points, 2)
    assert result.item("task1.diagram").status.value == "pending_review"  # the input is left alone


def test_csv_roster_resolves_paths_and_deadline_makes_late(tmp_path, log):
    subs = tmp_path / "subs"
    submission(subs, "alice")
    submission(subs, "bob")
    roster = tmp_path / "roster.csv"
    roster.write_text("student,path_or_git_url,submitted_at\n"
                      "alice,subs/alice,2025-03-01T10:00:00+00:00\n"
                      "bob,subs/bob,2025-03-03T10:00:00+00:00\n"
                      "carl,,\n")
    out = tmp_path / "out"
    rows = {r.student: r for r in run(roster, out, deadline="2025-03-02T00:00:00+00:00")}
    assert rows["carl"].status == "no_submission"
    assert rows["alice"].late_penalty == 0 and "late" not in rows["alice"].flags
    assert rows["bob"].late_penalty and rows["bob"].late_penalty > 0 and "late" in rows["bob"].flags
    assert "2025-03-02T00:00:00+00:00" in (out / "rubric.yaml").read_text()

    log.unlink()
    run(roster, out, deadline="2025-03-05T00:00:00+00:00")  # another deadline: every grade is stale
    assert sorted(invocations(log)) == ["alice", "bob"]
    assert gradebook(out)["bob"]["late_penalty"] == "0"


def test_time_sources_reach_the_grade_and_unknown_lateness_is_flagged(tmp_path, log):
    subs = tmp_path / "subs"
    for name in ("alice", "bob"):
        submission(subs, name)
    roster = tmp_path / "roster.csv"
    roster.write_text("student,path_or_git_url,submitted_at\nalice,subs/alice,2025-03-01T10:00:00Z\nbob,subs/bob,\n")
    out = tmp_path / "out"
    rows = {r.student: r for r in run(roster, out, deadline="2025-03-02T00:00:00+00:00")}
    alice = json.loads((out / "students" / "alice" / "results.json").read_text())
    assert alice["submission"]["submitted_at_source"] == "roster"
    assert "late_unknown" not in rows["alice"].flags
    assert rows["bob"].late_penalty == 0 and "late_unknown" in rows["bob"].flags
    assert gradebook(out)["bob"]["flags"].split().count("late_unknown") == 1
    key = json.loads((out / "students" / "alice" / "cache-key.json").read_text())
    assert (key["submitted_at"], key["submitted_at_source"]) == ("2025-03-01T10:00:00+00:00", "roster")

    log.unlink()
    run(roster, out, deadline="2025-03-02T00:00:00+00:00", trust_commit_time=True)
    assert invocations(log) == []  # no commit to trust: the keys, and so the grades, stand
    bob = json.loads((out / "students" / "bob" / "results.json").read_text())
    assert "fake: --trust-commit-time" not in bob["submission"]["problems"]


def test_trusting_commit_times_is_passed_to_every_grade(tmp_path, log):
    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    run(roster, tmp_path / "out", trust_commit_time=True)
    alice = json.loads((tmp_path / "out" / "students" / "alice" / "results.json").read_text())
    assert "fake: --trust-commit-time" in alice["submission"]["problems"]


def test_seconds_spent_grading_are_recorded(tmp_path, log):
    roster = tmp_path / "roster"
    submission(roster, "a9-alice", "sleep=0.3")
    run(roster, tmp_path / "out")
    outcome = json.loads((tmp_path / "out" / "students" / "alice" / "batch-outcome.json").read_text())
    assert outcome["status"] == "graded" and outcome["seconds"] >= 0.3


def test_a_folder_named_with_any_bytes_is_a_student_like_any_other(tmp_path, log):
    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    odd = submission(tmp_path, "odd")
    os.rename(odd, os.path.join(os.fsencode(roster), b"a9-b\xf6b\n"))
    rows = run(roster, tmp_path / "out")
    assert [(r.student, r.status) for r in rows] == [("alice", "graded"), ("b\\xf6b\\n", "graded")]
    assert "b\\xf6b\\n" in gradebook(tmp_path / "out")
    assert "b\\xf6b\\n" in (tmp_path / "out" / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("names", "stripped"),
    [
        (["a9-alice", "a9-albert", "a9-bob"], ["alice", "albert", "bob"]),
        (["a9-alice", "a9-albert"], ["alice", "albert"]),  # the shared "al" stays
        (["alice", "bob"], ["alice", "bob"]),
        (["hw_9_x", "hw_9_y"], ["x", "y"]),
    ],
)
def test_common_prefix_of_classroom_names_is_stripped(names, stripped):
    from grader.batch import strip_common_prefix

    assert strip_common_prefix(names) == stripped


def test_cli_batch_writes_the_outputs(tmp_path, log, monkeypatch):
    """The real `grader batch` entry point, with the fake grader swapped in at the module level."""
    from grader import batch, cli

    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    real = batch.run_batch
    monkeypatch.setattr(batch, "run_batch", lambda *a, **k: real(*a, **k, grade_cmd=FAKE))
    assert cli.main(["batch", str(roster), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    assert (tmp_path / "out" / "gradebook.csv").is_file() and (tmp_path / "out" / "index.html").is_file()
    assert cli.main(["batch", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 1


# ----------------------------------------------------------------------------------------------
# The real grader


@pytest.mark.slow
def test_real_grader_batch_equals_grading_each_alone(tmp_path):
    from grader.results import GradeResult

    trees = {"a9": REPO / "reference" / "a9", "a9-naive": REPO / "reference" / "a9-naive",
             "template": REPO / "student_template"}
    if not trees["a9"].is_dir():
        pytest.skip("reference/a9 is not in this checkout")
    # Snapshots: the batch and the lone grades must see the same files even if the tree is edited.
    trees = {
        name: Path(shutil.copytree(path, tmp_path / "trees" / name, ignore=shutil.ignore_patterns("__pycache__")))
        for name, path in trees.items()
        if path.is_dir()
    }
    roster = tmp_path / "roster.csv"
    roster.write_text("".join(f"{name},{path}\n" for name, path in trees.items()))
    from grader.batch import run_batch

    rows = {r.student: r for r in run_batch(roster, tmp_path / "batch", jobs=2, progress=StringIO())}
    for name, path in trees.items():
        alone = tmp_path / f"alone-{name}"
        done = subprocess.run([sys.executable, "-m", "grader", "grade", str(path), "--out", str(alone)],
                              cwd=REPO, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr
        expected = GradeResult.load(alone / "results.json")
        assert rows[name].status == "graded", rows[name].message
        assert rows[name].total == pytest.approx(expected.score)
        assert rows[name].tasks == {t.id: t.score for t in expected.tasks if not t.bonus}
        # The cache key was computed without grading, yet names exactly what was graded.
        key = json.loads((tmp_path / "batch" / "students" / name / "cache-key.json").read_text())
        assert key["submission"] == expected.submission.digest
    if "template" in rows:
        assert rows["a9"].total > rows["template"].total


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(fake_main(sys.argv[1:]))
