"""`grader batch`: every student gets a row, failures stay rows, runs resume, the matrix run is cached and
everyone is scored again from it on every run (rubric scoring, deadline and manual scores cost no regrade).

The batch is driven with a fake grader (this file run as a script, injected through
``run_batch(grade_cmd=...)``).  It writes what a real ``grader grade --out`` writes, without running any
student code: the submission as intake takes it, a ``junit.xml`` in the matrix's shape whose testcases are
the real case ids of the rubric's pack, ``results.json`` scored from it by ``grader.scoring.score`` under
the rubric it was given (so its ``matrix_digest`` is the rubric's), and ``deliverables/``.  The verdicts
are a function of the submission's ``src/collectives.py``; lines ``# fake: ...`` in that file steer it:

* ``sleep=S``: take S seconds; ``hang``: never finish (with a child process of its own);
* ``crash``: die by SIGSEGV after printing a traceback; ``error``: write an ``error`` result, exit 2;
* ``kill-worker``: SIGKILL its parent (the Dask worker running it), on every try;
* ``forbidden``: a static finding (``dist.all_reduce`` in ``my_allreduce``);
* ``hang-case``: one all-to-all case has the verdict ``hang``;
* ``no-trace``: the all-to-all probe recorded no events (the report's diagram has nothing to draw).

Every run appends the submission's name and the fake's pid to ``$FAKE_GRADER_LOG``, so the tests count
grades (then a digest of the salt it was given, and whether its command line is free of it).  The scores
the batch reports are whatever ``scoring.score`` makes of that junit: the tests use
``grader.rescore.rescore`` (itself ``scoring.score``) as the oracle.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from io import StringIO
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAKE = [sys.executable, str(Path(__file__).resolve())]
A9 = REPO / "rubrics" / "a9.yaml"
COLLECTIVES_PY = "def my_broadcast(tensor, src=0):\n    return tensor\n"
TRANSFORMER_PY = "def forward_ulysses(block, x):\n    return x\n"
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
ISOLATION = {"rlimits": "on", "session": "on", "uid": "off: not root"}
FORBIDDEN_SOURCE = "dist.all_reduce(tensor)"


# ----------------------------------------------------------------------------------------------
# The fake grader (runs in a child process)


def _events(function: str = "my_all_to_all") -> list[dict]:
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
        e.update(bytes=256, shape=[2, 8, 1, 4], dtype="float32", function=function)
    return sorted(events, key=lambda e: (e["t"], e["rank"]))


def _byte(text: str, what: str) -> int:
    return hashlib.sha256(f"{text}\0{what}".encode()).digest()[0]


def fake_cases(text: str, pack, present: list[str]) -> list[tuple[str, str, str, dict | None]]:
    """``(case id, verdict, message, trace)`` for every case of ``pack``, as the matrix would report a
    submission whose main file is ``text``.  Each test family passes, fails every other case, or fails all
    (a function of the text); a case whose student file was not submitted is ``missing``; the trace probes
    (``keep_events``) carry the metrics the rubric's trace checks read, and the pack's diagram probe its
    message events unless ``# fake: no-trace``."""
    hang = next((c for c in pack.case_ids() if c.startswith("test_all_to_all[ws8")), None)
    cases = []
    for position, case in enumerate(pack.cases()):
        file = pack.file_of(pack.module_of[case.kind])
        mode = _byte(text, case.test) % 4  # 0, 1: all pass; 2: every other case wrong; 3: all wrong
        verdict, message = "pass", ""
        if file not in present:
            verdict, message = "missing", f"{file} was not submitted"
        elif mode == 3 or (mode == 2 and position % 2):
            verdict, message = "wrong", f"rank {position % 4} returned a wrong result"
        if case.name == hang and "# fake: hang-case" in text:
            verdict, message = "hang", "rank 3 waited in recv(src=1) for the whole case"
        trace = None
        if case.keep_events:
            function = pack.function_of[case.kind]
            tensor_bytes = 4096
            trace = {
                "max_sends_per_rank": 3 if _byte(text, case.name) % 2 else 7,
                "max_bytes_sent_per_rank": tensor_bytes * (3 if _byte(text, case.name) % 3 == 0 else 1.5),
                "tensor_bytes": tensor_bytes,
                "collectives": [],
                "student_functions": [function],
                "events": [],
            }
            diagram = pack.diagram
            if diagram is not None and case.name == diagram.case and "# fake: no-trace" not in text:
                trace["events"] = _events(diagram.function)
        cases.append((case.name, verdict, message, trace))
    return cases


def write_junit(path: Path, cases, classname: str) -> None:
    """pytest's xunit1 shape, as the matrix writes it: a ``verdict``, ``message`` (and ``trace``) property
    per testcase, a failure element for a case that did not pass (``grader.runner.synthesized_case``)."""
    from junitparser import Failure, JUnitXml, Properties, Property, TestCase, TestSuite

    suite = TestSuite("pytest")
    for name, verdict, message, trace in cases:
        case = TestCase(name, classname=classname)
        if verdict != "pass":
            case.result = [Failure(message)]
        props = Properties()
        props.add_property(Property("verdict", verdict))
        props.add_property(Property("message", message))
        if trace is not None:
            props.add_property(Property("trace", json.dumps(trace)))
        case.append(props)
        suite.add_testcase(case)
    xml = JUnitXml("pytest tests")
    xml.add_testsuite(suite)
    xml.write(str(path))


def fake_main(argv: list[str]) -> int:
    """``grader grade SUBMISSION --out DIR [--rubric R] ...``, without the matrix."""
    import argparse

    from grader import scoring
    from grader.intake import take
    from grader.pack import load_pack
    from grader.pipeline import error_result, keep_deliverables
    from grader.render.outputs import write_outputs
    from grader.results import Finding, TimeSource
    from grader.rubric import load_rubric
    from grader.submission_time import given

    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["grade"])
    parser.add_argument("submission")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rubric", type=Path)
    parser.add_argument("--submitted-at")
    parser.add_argument("--submitted-at-source", default="flag")
    parser.add_argument("--trust-commit-time", action="store_true")
    args = parser.parse_args(argv)
    parent = os.environ.pop("GRADER_DIE_WITH_PARENT", "")  # as the real grader's cli.main does
    if parent.isdigit():
        from grader.sandbox.parent import die_with_parent

        die_with_parent(int(parent), signal.SIGTERM)
    salt = os.environ.get("GRADER_INPUT_SALT", "")
    seen = hashlib.sha256(salt.encode()).hexdigest()[:12] if salt else "-"
    with open(os.environ["FAKE_GRADER_LOG"], "a", errors="backslashreplace") as log:
        # Also what the tests check of the salt: which one this grade got, and never on its command line.
        log.write(f"{Path(args.submission).name} {os.getpid()} salt={seen} argv-clean={salt not in ' '.join(argv)}\n")
    print(f"fake grading {args.submission}")
    rubric = load_rubric(args.rubric)
    pack = load_pack(rubric.assignment.pack)
    when = given(args.submitted_at, TimeSource(args.submitted_at_source))
    with tempfile.TemporaryDirectory(prefix="fake-grade-") as work:
        taken = take(args.submission, rubric, Path(work) / "sandbox", when, args.trust_commit_time)
        main_file = taken.sandbox / rubric.student_files[0]
        text = main_file.read_text() if main_file.is_file() else ""
        for line in text.splitlines():
            if line.startswith("# fake: sleep="):
                time.sleep(float(line.split("=")[1]))
        if "# fake: hang" in text.split("\n"):
            # A child the timeout must end too; silent, so that the log holds one traceback, never two
            # interleaved as the two processes happen to write them (the cluster test compares logs).
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], **quiet)
            Path(os.environ["FAKE_GRADER_LOG"] + ".pids").write_text(str(child.pid))
            time.sleep(600)
        if "# fake: kill-worker" in text:  # a grade that takes its worker down with it, every time
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(600)
        if "# fake: crash" in text:
            print("Traceback: the grader fell over")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        if "# fake: error" in text:
            write_outputs(error_result(rubric, args.submission, "the matrix runner died: grader bug"), args.out, None)
            return 2
        findings = []
        if "# fake: forbidden" in text:
            findings.append(
                Finding(
                    "forbidden-collective",
                    "dist.all_reduce is not allowed in my_allreduce",
                    "src/collectives.py",
                    12,
                    4,
                    "my_allreduce",
                    FORBIDDEN_SOURCE,
                )
            )
        info = taken.info
        if args.trust_commit_time:
            info.problems.append("fake: --trust-commit-time")
        junit = args.out / "junit.xml"
        write_junit(junit, fake_cases(text, pack, sorted(taken.present)), pack.test_file.stem)
        result = scoring.score(
            rubric, junit, info, findings, taken.sandbox, isolation=ISOLATION, timings={"intake": 0.01, "matrix": 0.0}
        )
        write_outputs(result, args.out, None)  # the junit is already in place
        keep_deliverables(taken.sandbox, rubric.deliverable_files, args.out)
    return 0


# ----------------------------------------------------------------------------------------------
# Helpers


def submission(root: Path, name: str, *directives: str, body: str = COLLECTIVES_PY) -> Path:
    """A student repo the way GitHub Classroom lays it out, with fake-grader directives."""
    path = root / name
    (path / "src").mkdir(parents=True)
    (path / "src" / "collectives.py").write_text("".join(f"# fake: {d}\n" for d in directives) + name + "\n" + body)
    (path / "src" / "transformer.py").write_text(TRANSFORMER_PY)
    (path / "written_answers_task1.md").write_text(f"answers of {name}\n")
    (path / "all_to_all_schematic.pdf").write_bytes(PDF)
    return path


def invocations(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    import csv

    with (out / "gradebook.csv").open() as fh:
        return {row["student"]: row for row in csv.DictReader(fh)}


def results(out: Path) -> dict:
    """Every student's results.json, as the GradeResult it holds."""
    from grader.results import GradeResult

    return {p.parent.name: GradeResult.load(p) for p in sorted((out / "students").glob("*/results.json"))}


def rubric_variant(tmp_path: Path, name: str, *replacements: tuple[str, str], base: Path = A9) -> Path:
    """A copy of ``base`` with exact text replacements (each must occur once)."""
    text = base.read_text()
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def oracle(out: Path, student: str, rubric: Path | None = None, manual=None, deadline: str | None = None):
    """What scoring the student's cached matrix run under ``rubric`` gives: what the batch must report."""
    from grader.late import with_deadline
    from grader.rescore import rescore
    from grader.rubric import load_rubric
    from grader.submission_time import parse_time

    loaded = load_rubric(rubric)
    if deadline:
        loaded = with_deadline(loaded, parse_time(deadline, "deadline"))
    return rescore(out / "students" / student / "graded", loaded, manual)


def _scored(result) -> dict:
    """What a result says, but which rubric file it was scored under."""
    return {k: v for k, v in result.to_dict().items() if k != "rubric_digest"}


def snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "grades.log"
    monkeypatch.setenv("FAKE_GRADER_LOG", str(path))
    return path


def run(roster: Path, out: Path, **kwargs):
    from grader.batch import run_batch

    kwargs.setdefault("progress", StringIO())
    return run_batch(roster, out, grade_cmd=FAKE, **kwargs)


def grade_alone(tmp_path: Path, name: str, *directives: str, rubric: Path | None = None) -> Path:
    """A ``grader grade --out`` directory made by the fake grader (in this process: it runs no code)."""
    source = submission(tmp_path / "subs", name, *directives)
    out = tmp_path / "graded" / name
    out.mkdir(parents=True)
    argv = ["grade", str(source), "--out", str(out)] + (["--rubric", str(rubric)] if rubric else [])
    assert fake_main(argv) == 0
    return out


# ----------------------------------------------------------------------------------------------
# The fake grader writes what the real one does


def test_the_fake_grader_writes_a_real_grading(tmp_path, log):
    from grader.junit import read_junit
    from grader.pack import load_pack
    from grader.results import GradeResult
    from grader.rubric import load_rubric

    out = grade_alone(tmp_path, "alice", "hang-case")
    result = GradeResult.load(out / "results.json")
    rubric = load_rubric()
    assert result.status == "graded" and result.matrix_digest == rubric.matrix_digest
    assert result.isolation == ISOLATION and result.submission.digest.startswith("sha256:")
    junit = read_junit(out / "junit.xml")
    assert list(junit) == load_pack("a9").case_ids()
    assert {c.verdict.value for c in junit.values()} >= {"pass", "wrong", "hang"}
    assert junit["test_trace_all_to_all[ws4]"].trace["events"] == _events()
    assert {c.id: c.verdict for c in result.cases} == {c.id: c.verdict for c in junit.values()}
    assert sorted(p.name for p in (out / "deliverables").iterdir()) == [
        "all_to_all_schematic.pdf",
        "written_answers_task1.md",
    ]
    for name in ("summary.md", "gradescope.json", "classroom.json"):
        assert (out / name).is_file()


# ----------------------------------------------------------------------------------------------
# Rows, statuses, numbers


def a_class(root: Path) -> Path:
    """A roster of every fate: graded, hanging, crashing, erroring, forbidden, absent and archived."""
    roster = root / "roster"
    submission(roster, "a9-alice")
    submission(roster, "a9-carol", "hang")
    submission(roster, "a9-dave", "crash")
    submission(roster, "a9-erin", "error")
    submission(roster, "a9-gina", "forbidden", "hang-case")
    (roster / "a9-frank").mkdir()  # accepted the assignment, pushed nothing
    bob = submission(root, "a9-bob")
    with zipfile.ZipFile(roster / "a9-bob.zip", "w") as zf:
        for f in bob.rglob("*"):
            zf.write(f, "a9-bob-main/" + f.relative_to(bob).as_posix())
    return roster


def test_every_student_is_a_row_whatever_happened_to_their_grade(tmp_path, log):
    roster = a_class(tmp_path)
    progress = StringIO()

    rows = run(roster, tmp_path / "out", jobs=3, timeout=10, progress=progress)

    status = {r.student: r.status for r in rows}
    assert status == {
        "alice": "graded",
        "bob": "graded",
        "carol": "timeout",
        "dave": "grader_error",
        "erin": "grader_error",
        "frank": "no_submission",
        "gina": "graded",
    }
    book = gradebook(tmp_path / "out")
    assert list(book) == ["alice", "bob", "carol", "dave", "erin", "frank", "gina"]
    assert book["carol"]["flags"] == "timeout" and book["carol"]["total"] == ""
    assert book["frank"]["total"] == "0"
    assert set(book["gina"]["flags"].split()) >= {"forbidden", "hang"}
    assert "the matrix runner died" in next(r.message for r in rows if r.student == "erin")
    assert "fell over" in next(r.message for r in rows if r.student == "dave")
    assert sorted(invocations(log)) == ["a9-alice", "a9-bob.zip", "a9-carol", "a9-dave", "a9-erin", "a9-gina"]
    # Only a finished grading is a result: the failed ones have a status and no results.json.
    assert sorted(results(tmp_path / "out")) == ["alice", "bob", "gina"]
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


def test_numbers_in_the_gradebook_are_the_results_and_the_results_are_a_rescore(tmp_path, log):
    from grader.rubric import load_rubric

    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob", "a9-carol"):
        submission(roster, name)
    out = tmp_path / "out"
    run(roster, out)
    book = gradebook(out)
    assert list(next(iter(book.values()))) == [
        "student",
        "task1",
        "task2",
        "bonus",
        "late_penalty",
        "total",
        "status",
        "flags",
    ]
    rubric = load_rubric()
    for name, row in book.items():
        student = out / "students" / name
        result = results(out)[name]
        assert result == oracle(out, name)  # the grade of record is the cache scored under today's rubric
        assert float(row["total"]) == pytest.approx(result.score)
        assert float(row["task1"]) == pytest.approx(result.tasks[0].score)
        assert float(row["task2"]) == pytest.approx(result.tasks[1].score)
        assert float(row["bonus"]) == pytest.approx(result.bonus_score)
        assert "review" in row["flags"].split()  # the diagram's points are provisional until reviewed
        assert result.item("task1.diagram").score == 5  # read from graded/deliverables/
        for output in ("summary.md", "gradescope.json", "classroom.json", "report.html"):
            assert (student / output).is_file(), output
        assert not (student / "final.json").exists()
        assert (student / "junit.xml").read_bytes() == (student / "graded" / "junit.xml").read_bytes()
        key = json.loads((student / "graded" / "cache-key.json").read_text())
        assert set(key) == {"submission", "submitted_at", "submitted_at_source", "matrix", "grader_version"}
        assert key["submission"] == result.submission.digest and key["grader_version"]
        assert key["matrix"] == rubric.matrix_digest == result.matrix_digest
    assert len({row["total"] for row in book.values()}) > 1  # the fake's verdicts differ between students


def test_rerun_grades_only_what_changed_and_force_grades_all(tmp_path, log):
    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob", "a9-carol"):
        submission(roster, name)
    (roster / "a9-dave").mkdir()
    out = tmp_path / "out"
    run(roster, out)
    assert len(invocations(log)) == 3

    log.unlink()
    before = snapshot(out)
    junits = {p: p.stat().st_mtime_ns for p in (out / "students").glob("*/junit.xml")}
    assert len(junits) == 3
    run(roster, out)
    assert invocations(log) == []
    assert snapshot(out) == before  # scored again from the cache: to the same bytes
    assert {p: p.stat().st_mtime_ns for p in junits} == junits  # the matrix runs were not written again

    (roster / "a9-bob" / "src" / "collectives.py").write_text("# fake: forbidden\nbob v2\n")
    (roster / "a9-carol" / "notes.txt").write_text("not a file the rubric names: no regrade\n")
    run(roster, out)
    assert invocations(log) == ["a9-bob"]
    assert "forbidden" in gradebook(out)["bob"]["flags"].split()

    log.unlink()
    run(roster, out, force=True)
    assert sorted(invocations(log)) == ["a9-alice", "a9-bob", "a9-carol"]


# ----------------------------------------------------------------------------------------------
# What the cache key holds: the matrix part of the rubric, never its scoring part


DEADLINE = "2025-03-02T00:00:00+00:00"
SCORING_CHANGES = {
    "item points": [
        (
            "        points: 6\n        functions: [src/collectives.py::my_broadcast]",
            "        points: 8\n        functions: [src/collectives.py::my_broadcast]",
        ),
        (
            "        points: 6\n        functions: [src/collectives.py::my_allreduce]",
            "        points: 4\n        functions: [src/collectives.py::my_allreduce]",
        ),
    ],
    "components": [
        (
            '{name: values, match: "test_broadcast[*", share: 0.8}',
            '{name: values, match: "test_broadcast[*", share: 0.5}',
        ),
        (
            '{name: in place, match: "test_broadcast_inplace[*", share: 0.2,',
            '{name: in place, match: "test_broadcast_inplace[*", share: 0.5,',
        ),
    ],
    "bonus cap": [("  cap: 5\n", "  cap: 1\n")],
    "late policy": [("penalty_percent_per_day: 10", "penalty_percent_per_day: 25")],
    "deadline": [(f"deadline: '{DEADLINE}'", "deadline: '2025-03-10T00:00:00+00:00'")],
    "hidden case ids": [("case_ids: visible", "case_ids: hidden")],
}
MATRIX_CHANGES = {
    "limits": [("case_timeout_s: 10\n", "case_timeout_s: 9\n")],
    "policy": [("src/transformer.py: [all_reduce, all_gather]", "src/transformer.py: [all_reduce]")],
    "student_files": [("  - src/transformer.py\n", "  - src/transformer.py\n  - src/helpers.py\n")],
    "deliverables": [
        (
            "any_of: [all_to_all_schematic.pdf, all_to_all_schematic.png]",
            "any_of: [all_to_all_schematic.png, all_to_all_schematic.pdf]",
        )
    ],
}


def _late_class(tmp_path: Path) -> tuple[Path, Path]:
    """A CSV roster (carol's submission is 2 days late) and a rubric with a deadline."""
    subs = tmp_path / "subs"
    for name in ("alice", "bob", "carol", "dora"):
        submission(subs, name)
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "student,path_or_git_url,submitted_at\n"
        "alice,subs/alice,2025-03-01T10:00:00+00:00\nbob,subs/bob,2025-03-01T11:00:00+00:00\n"
        "carol,subs/carol,2025-03-03T10:00:00+00:00\ndora,subs/dora,2025-03-01T12:00:00+00:00\n"
    )
    return roster, rubric_variant(tmp_path, "base", ("deadline: null", f"deadline: '{DEADLINE}'"))


@pytest.mark.parametrize("change", sorted(SCORING_CHANGES))
def test_changing_only_how_the_rubric_scores_regrades_nobody(tmp_path, log, change):
    from grader.rubric import load_rubric

    roster, base = _late_class(tmp_path)
    out = tmp_path / "out"
    run(roster, out, rubric=base)
    assert len(invocations(log)) == 4
    before = results(out)
    assert before["carol"].late is not None and before["carol"].late.days_late == 2

    log.unlink()
    variant = rubric_variant(tmp_path, "variant", *SCORING_CHANGES[change], base=base)
    assert load_rubric(variant).matrix_digest == load_rubric(base).matrix_digest
    rows = {r.student: r for r in run(roster, out, rubric=variant)}
    assert invocations(log) == []
    after = results(out)
    book = gradebook(out)
    for name, result in after.items():
        assert result == oracle(out, name, variant)
        assert result.rubric_digest == load_rubric(variant).digest
        assert rows[name].total == result.score and float(book[name]["total"]) == pytest.approx(result.score)
    changed = [name for name in after if _scored(after[name]) != _scored(before[name])]
    assert changed, "the change changed nobody's result: the test proves nothing"
    if change == "bonus cap":
        assert all(r.bonus_score <= 1 for r in after.values())
        assert any(r.bonus_score > 1 for r in before.values())
    if change == "late policy":  # 2 days at 25% a day, of everything carol earned
        gross = sum(t.score for t in after["carol"].tasks)
        assert after["carol"].late.points == round(gross * 0.5, 2)
        assert after["carol"].score == round(gross - after["carol"].late.points, 2)


@pytest.mark.parametrize("change", sorted(MATRIX_CHANGES))
def test_changing_what_decides_the_verdicts_regrades_everyone(tmp_path, log, change):
    from grader.rubric import load_rubric

    roster, base = _late_class(tmp_path)
    out = tmp_path / "out"
    run(roster, out, rubric=base)
    log.unlink()
    variant = rubric_variant(tmp_path, "variant", *MATRIX_CHANGES[change], base=base)
    run(roster, out, rubric=variant)
    assert sorted(invocations(log)) == ["alice", "bob", "carol", "dora"]
    digest = load_rubric(variant).matrix_digest
    for name, result in results(out).items():
        assert result.matrix_digest == digest
        key = json.loads((out / "students" / name / "graded" / "cache-key.json").read_text())
        assert key["matrix"] == digest


def test_a_cache_without_its_matrix_run_is_graded_again(tmp_path, log):
    """The batch scores everyone from graded/junit.xml, so a grading missing it is no cache at all."""
    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob"):
        submission(roster, name)
    out = tmp_path / "out"
    run(roster, out)
    expected = gradebook(out)
    (out / "students" / "bob" / "graded" / "junit.xml").unlink()
    log.unlink()
    run(roster, out)
    assert invocations(log) == ["a9-bob"]
    expected["bob"]["flags"] = "cache_untrusted " + expected["bob"]["flags"]  # and the gradebook says why
    assert gradebook(out) == expected
    assert results(out)["bob"].cases


# ----------------------------------------------------------------------------------------------
# Interruptions: SIGKILL, SIGINT and SIGTERM of a batch mid-way, then a rerun, are in
# tests/test_batch_faults.py (on copies of real gradings: a tenth of the cost of this file's fake).


# ----------------------------------------------------------------------------------------------
# Manual scores


def test_manual_scores_change_totals_exactly_and_never_regrade(tmp_path, log):
    from grader.manual import ManualScores

    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob"):
        submission(roster, name)
    out = tmp_path / "out"
    run(roster, out)
    before = gradebook(out)
    auto = results(out)["alice"]
    diagram, written = auto.item("task1.diagram").score, auto.item("task1.written").score
    cached = (out / "students" / "alice" / "graded" / "results.json").read_bytes()

    comment = "clear, but chunk labels missing"
    manual = tmp_path / "manual.csv"
    manual.write_text(f'student,item,points,comment\nalice,task1.diagram,4,"{comment}"\nalice,task1.written,15\n')
    log.unlink()
    run(roster, out, manual=manual)
    assert invocations(log) == []  # manual scores never regrade
    after = gradebook(out)
    delta = (4 - diagram) + (15 - written)
    assert float(after["alice"]["total"]) == pytest.approx(float(before["alice"]["total"]) + delta)
    assert float(after["alice"]["task1"]) == pytest.approx(float(before["alice"]["task1"]) + delta)
    assert after["bob"] == before["bob"]
    assert "manual" in after["alice"]["flags"].split() and "review" not in after["alice"]["flags"].split()
    alice = results(out)["alice"]
    assert alice == oracle(
        out, "alice", manual=ManualScores({"task1.diagram": 4, "task1.written": 15}, {"task1.diagram": comment})
    )
    assert alice.item("task1.diagram").status.value == "manual"
    assert f"instructor's comment: {comment}" in alice.item("task1.diagram").feedback
    assert comment in (out / "students" / "alice" / "report.html").read_text()
    assert (out / "students" / "alice" / "graded" / "results.json").read_bytes() == cached  # the cache stays

    as_yaml = tmp_path / "manual.yaml"
    as_yaml.write_text(f"alice:\n  task1.diagram: {{points: 4, comment: '{comment}'}}\n  task1.written: 15\n")
    run(roster, out, manual=as_yaml)
    assert gradebook(out) == after
    assert results(out)["alice"] == alice

    run(roster, out)  # dropping the file restores the automatic scores
    assert gradebook(out) == before
    assert results(out)["alice"] == auto
    assert invocations(log) == []


def test_bad_manual_scores_are_refused_with_the_reason_and_change_nothing(tmp_path, log):
    from grader.errors import UserError

    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    submission(roster, "a9-bob")
    out = tmp_path / "out"
    run(roster, out)
    before = snapshot(out)
    bad = tmp_path / "m.csv"
    for content, reason in [
        ("zoe,task1.diagram,4\n", "not in the roster: zoe"),
        ("bob,task1.diagramm,4\n", "bob: manual score for 'task1.diagramm': not a deliverable, written or manual"),
        ("bob,task1.broadcast,6\n", "bob: manual score for 'task1.broadcast': not a deliverable, written or manual"),
        ("bob,task1.diagram,6\n", r"bob: manual score for task1.diagram: 6 is outside 0\.\.5"),
        ("alice,task1.diagram,4\nbob,task1.diagram,-1\n", "outside 0..5"),
        ("alice,task1.diagram,four\n", "m.csv:1: points must be a number"),
    ]:
        bad.write_text(content)
        with pytest.raises(UserError, match=reason):
            run(roster, out, manual=bad)
        # Refused as a whole: alice's valid line did not reach her results while the gradebook kept the old.
        assert snapshot(out) == before, content


def test_manual_scores_are_scored_before_the_bonus_cap_and_the_late_penalty(tmp_path, log):
    """The one totals rule, with an instructor's scores in it: tasks capped, bonus capped, then the late
    penalty on all of it (the numbers computed from the rubric)."""
    from grader.rubric import load_rubric

    roster, base = _late_class(tmp_path)
    out = tmp_path / "out"
    run(roster, out, rubric=base)
    manual = tmp_path / "manual.csv"
    manual.write_text("carol,task1.diagram,2\ncarol,task1.written,11.5\n")
    log.unlink()
    run(roster, out, rubric=base, manual=manual)
    assert invocations(log) == []
    rubric = load_rubric(base)
    carol = results(out)["carol"]
    tasks = {t.id: t for t in carol.tasks}
    assert tasks["task1"].score == pytest.approx(min(50, sum(i.score for i in tasks["task1"].items)))
    assert tasks["bonus"].score == min(rubric.bonus.cap, round(sum(i.score for i in tasks["bonus"].items), 2))
    assert carol.bonus_score == tasks["bonus"].score
    gross = sum(t.score for t in carol.tasks)
    percent = min(2 * rubric.late.penalty_percent_per_day, rubric.late.cap_percent)
    assert (carol.late.days_late, carol.late.percent) == (2, percent)
    assert carol.late.points == round(gross * percent / 100, 2)
    assert carol.score == round(gross - carol.late.points, 2)
    assert gradebook(out)["carol"]["late_penalty"] == f"{carol.late.points:g}"


# ----------------------------------------------------------------------------------------------
# Submission times and the deadline


def test_csv_roster_resolves_paths_and_a_new_deadline_rescores_without_a_regrade(tmp_path, log):
    subs = tmp_path / "subs"
    submission(subs, "alice")
    submission(subs, "bob")
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "student,path_or_git_url,submitted_at\n"
        "alice,subs/alice,2025-03-01T10:00:00+00:00\n"
        "bob,subs/bob,2025-03-03T10:00:00+00:00\n"
        "carl,,\n"
    )
    out = tmp_path / "out"
    rows = {r.student: r for r in run(roster, out, deadline=DEADLINE)}
    assert rows["carl"].status == "no_submission"
    assert rows["alice"].late_penalty == 0 and "late" not in rows["alice"].flags
    assert rows["bob"].late_penalty and rows["bob"].late_penalty > 0 and "late" in rows["bob"].flags
    assert results(out)["bob"] == oracle(out, "bob", deadline=DEADLINE)
    assert not (out / "rubric.yaml").exists()  # the deadline is applied when scoring, not by a rubric copy
    late_total = results(out)["bob"].score

    log.unlink()
    rows = {r.student: r for r in run(roster, out, deadline="2025-03-05T00:00:00+00:00")}
    assert invocations(log) == []  # another deadline only scores
    assert gradebook(out)["bob"]["late_penalty"] == "0" and "late" not in rows["bob"].flags
    assert results(out)["bob"].score > late_total
    assert results(out)["bob"] == oracle(out, "bob", deadline="2025-03-05T00:00:00+00:00")

    run(roster, out)  # the rubric's own late policy: no deadline, nothing late
    assert invocations(log) == []
    assert results(out)["bob"].lateness.value == "no_deadline"


def test_a_deadline_needs_a_late_policy(tmp_path, log):
    from grader.errors import UserError

    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    no_late = A9.read_text().split("\nlate:\n")[0] + "\npolicy:" + A9.read_text().split("\npolicy:")[1]
    rubric = tmp_path / "no-late.yaml"
    rubric.write_text(no_late)
    with pytest.raises(UserError, match="--deadline needs a `late:` section"):
        run(roster, tmp_path / "out", rubric=rubric, deadline=DEADLINE)
    assert invocations(log) == []  # refused before anyone was graded


def test_time_sources_reach_the_grade_and_unknown_lateness_is_flagged(tmp_path, log):
    subs = tmp_path / "subs"
    for name in ("alice", "bob"):
        submission(subs, name)
    roster = tmp_path / "roster.csv"
    roster.write_text("student,path_or_git_url,submitted_at\nalice,subs/alice,2025-03-01T10:00:00Z\nbob,subs/bob,\n")
    out = tmp_path / "out"
    rows = {r.student: r for r in run(roster, out, deadline=DEADLINE)}
    alice = json.loads((out / "students" / "alice" / "results.json").read_text())
    assert alice["submission"]["submitted_at_source"] == "roster"
    assert "late_unknown" not in rows["alice"].flags
    assert rows["bob"].late_penalty == 0 and "late_unknown" in rows["bob"].flags
    assert gradebook(out)["bob"]["flags"].split().count("late_unknown") == 1
    key = json.loads((out / "students" / "alice" / "graded" / "cache-key.json").read_text())
    assert (key["submitted_at"], key["submitted_at_source"]) == ("2025-03-01T10:00:00+00:00", "roster")

    log.unlink()
    run(roster, out, deadline=DEADLINE, trust_commit_time=True)
    assert invocations(log) == []  # no commit to trust: the keys, and so the grades, stand
    bob = json.loads((out / "students" / "bob" / "results.json").read_text())
    assert "fake: --trust-commit-time" not in bob["submission"]["problems"]

    # A submission time is part of the key: it decides lateness, and a grade records it.
    roster.write_text("student,path_or_git_url,submitted_at\nalice,subs/alice,2025-03-04T10:00:00Z\nbob,subs/bob,\n")
    rows = {r.student: r for r in run(roster, out, deadline=DEADLINE)}
    assert invocations(log) == ["alice"]
    assert "late" in rows["alice"].flags and rows["alice"].late_penalty > 0


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


# ----------------------------------------------------------------------------------------------
# Rosters


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
    from grader.batch.roster import strip_common_prefix

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
# grader rescore


def test_rescore_applies_a_changed_scoring_part_and_refuses_a_changed_matrix_part(tmp_path, log):
    from grader import scoring
    from grader.errors import UserError
    from grader.rescore import rescore
    from grader.results import GradeResult
    from grader.rubric import load_rubric

    graded = grade_alone(tmp_path, "alice")
    assert rescore(graded, load_rubric()) == GradeResult.load(graded / "results.json")  # same rubric, same result

    capped = load_rubric(rubric_variant(tmp_path, "capped", ("  cap: 5\n", "  cap: 0.5\n")))
    result = rescore(graded, capped)
    assert result.bonus_score <= 0.5 and result.rubric_digest == capped.digest
    previous = GradeResult.load(graded / "results.json")
    assert result == scoring.score(
        capped,
        graded / "junit.xml",
        previous.submission,
        previous.findings,
        graded / "deliverables",
        isolation=previous.isolation,
        timings=previous.timings,
    )

    for change, replacements in sorted(MATRIX_CHANGES.items()):
        other = load_rubric(rubric_variant(tmp_path, change, *replacements))
        with pytest.raises(UserError) as refused:
            rescore(graded, other)
        message = str(refused.value)
        assert str(graded) in message and "grade it again" in message, change
        assert "pack, files, limits or policy differ" in message, change


def test_rescore_returns_a_grading_that_did_not_finish_as_it_is(tmp_path, log):
    from grader.rescore import rescore
    from grader.results import GradeResult
    from grader.rubric import load_rubric

    source = submission(tmp_path / "subs", "erin", "error")
    out = tmp_path / "erin"
    out.mkdir()
    assert fake_main(["grade", str(source), "--out", str(out)]) == 2
    capped = load_rubric(rubric_variant(tmp_path, "capped", ("  cap: 5\n", "  cap: 1\n")))
    assert rescore(out, capped) == GradeResult.load(out / "results.json")
    assert rescore(out, capped).status == "error"


def test_cli_rescore_rewrites_a_grading_in_place(tmp_path, log, capsys):
    from grader import cli
    from grader.manual import ManualScores
    from grader.rescore import rescore
    from grader.results import GradeResult
    from grader.rubric import load_rubric

    graded = grade_alone(tmp_path, "alice")
    junit = (graded / "junit.xml").read_bytes()
    variant = rubric_variant(
        tmp_path,
        "variant",
        ("  cap: 5\n", "  cap: 1\n"),
        ("penalty_percent_per_day: 10", "penalty_percent_per_day: 20"),
    )
    manual = tmp_path / "manual.csv"
    manual.write_text("alice,task1.diagram,3,arrows unlabelled\n")
    expected = rescore(
        graded, load_rubric(variant), ManualScores({"task1.diagram": 3}, {"task1.diagram": "arrows unlabelled"})
    )

    assert cli.main(["rescore", str(graded), "--rubric", str(variant), "--manual", str(manual)]) == 0
    assert GradeResult.load(graded / "results.json") == expected
    assert f"{expected.score:g}/{expected.max_score:g}" in capsys.readouterr().out
    assert (graded / "junit.xml").read_bytes() == junit  # the matrix run is what was rescored: it stays
    gradescope = json.loads((graded / "gradescope.json").read_text())
    assert gradescope["score"] == pytest.approx(expected.score)
    assert "arrows unlabelled" in (graded / "summary.md").read_text()

    # A deadline given to rescore is applied too; the submission had no time, so lateness is unknown.
    assert cli.main(["rescore", str(graded), "--rubric", str(variant), "--deadline", DEADLINE]) == 0
    assert GradeResult.load(graded / "results.json").lateness.value == "unknown"

    limits = rubric_variant(tmp_path, "limits", *MATRIX_CHANGES["limits"])
    before = snapshot(graded)
    assert cli.main(["rescore", str(graded), "--rubric", str(limits)]) == 1
    assert "grade it again" in capsys.readouterr().err
    assert snapshot(graded) == before


# ----------------------------------------------------------------------------------------------
# The real grader


@pytest.mark.slow
def test_real_grader_batch_equals_grading_each_alone_and_a_rescore_runs_no_code(tmp_path, graded):
    from grader.results import GradeResult

    trees = {"a9": "reference/a9", "a9-naive": "reference/a9-naive", "template": "student_template/a9"}
    if not (REPO / trees["a9"]).is_dir():
        pytest.skip("reference/a9 is not in this checkout")
    # Each tree graded alone (once per session: tests/conftest.py), and the batch grades the same
    # snapshots, so both see the same files even if the tree is edited.
    alone = {name: graded(tree) for name, tree in trees.items() if (REPO / tree).is_dir()}
    roster = tmp_path / "roster.csv"
    roster.write_text("".join(f"{name},{grading.tree}\n" for name, grading in alone.items()))
    from grader.batch import run_batch

    out = tmp_path / "batch"
    rows = {r.student: r for r in run_batch(roster, out, jobs=2, progress=StringIO())}
    for name, grading in alone.items():
        expected = grading.result
        assert rows[name].status == "graded", rows[name].message
        assert rows[name].total == pytest.approx(expected.score)
        assert rows[name].tasks == {t.id: t.score for t in expected.tasks if not t.bonus}
        # The cache key was computed without grading, yet names exactly what was graded.
        key = json.loads((out / "students" / name / "graded" / "cache-key.json").read_text())
        assert key["submission"] == expected.submission.digest
    if "template" in rows:
        assert rows["a9"].total > rows["template"].total

    # A scoring-only change: nobody is graded again (the matrix runs' outcomes stay as they were), and
    # every result is the real grading rescored under the new rubric.
    from grader.rescore import rescore
    from grader.rubric import load_rubric

    outcomes = {name: (out / "students" / name / "batch-outcome.json").read_bytes() for name in alone}
    capped = rubric_variant(tmp_path, "capped", ("  cap: 5\n", "  cap: 1\n"))
    run_batch(roster, out, jobs=2, rubric=capped, progress=StringIO())
    for name in alone:
        assert (out / "students" / name / "batch-outcome.json").read_bytes() == outcomes[name]
        result = GradeResult.load(out / "students" / name / "results.json")
        assert result == rescore(out / "students" / name / "graded", load_rubric(capped))
        assert result.bonus_score <= 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    # A fake the batch kills (timeouts, SIGTERM) runs no cleanup: its work and intake directories are
    # the test's (beside the log, in its tmp_path), never /tmp's.  Only here, in the fake's own process:
    # set in pytest's (grade_alone), it would move every later test's temporary files there.
    tempfile.tempdir = str(Path(os.environ["FAKE_GRADER_LOG"]).parent)
    sys.exit(fake_main(sys.argv[1:]))


# ----------------------------------------------------------------------------------------------
# CSV injection: a roster name is the student's to choose


def test_a_formula_leading_name_is_written_as_text_in_the_gradebook() -> None:
    """OWASP's rule: a cell starting with =, +, -, @, tab or CR is a formula to a spreadsheet, so it
    gets a leading quote; the name itself is kept, and numbers stay numbers."""
    import csv
    from io import StringIO

    from grader.gradebook import GRADED, GradebookRow, render_gradebook

    names = ['=HYPERLINK("http://x")', "+1+1", "-2+cmd|' /C calc'!A0", "@SUM(A1)", "\tx", "\ry", "plain", "a=b"]
    rows = [GradebookRow(n, GRADED, tasks={"task1": -2.5}, total=-2.5) for n in names]
    book = list(csv.DictReader(StringIO(render_gradebook(rows, ["task1"]), newline="")))
    assert [r["student"] for r in book] == ["'" + n for n in names[:6]] + names[6:]
    assert {r["task1"] for r in book} == {"-2.5"} and {r["total"] for r in book} == {"-2.5"}
    # elsewhere the name is shown as given: HTML escapes it and adds no quote
    from html import escape

    from grader.render.class_report import render_class_report

    html = render_class_report({}, rows)
    assert escape(names[0]) in html and escape("'" + names[0]) not in html


def test_every_csv_cell_goes_through_one_rule() -> None:
    from grader.text import csv_cell, csv_rows

    assert [csv_cell(c) for c in ("-1", "+3.5", "-inf", "-nan", " -1", "-1e3", "=1")] == [
        "-1",
        "+3.5",
        "'-inf",
        "'-nan",
        " -1",
        "-1e3",
        "'=1",
    ]
    assert csv_rows([["@x", "a\rb"]]) == '\'@x,"a\rb"\r\n'
