"""Faults an instructor meets over a term, injected into ``grader batch`` (issue 39): each ends in the exact
gradebook, the faulty students flagged (and graded again where they can be), and no process left running.

Grading is not what is under test, so the grades are copies: ``tests/fixtures/copy_grader.py`` stands in
for ``grader grade`` and copies one of two real gradings of the toy pack (``right``: 10/10, ``wrong``:
0/10), made once per module with the real scoring.  The batch around it (roster, cache keys, seals,
rescoring every student, the gradebook and reports) is the real one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "toy_pack"
RUBRIC = TOY / "rubric.yaml"
COPY_GRADER = REPO / "tests" / "fixtures" / "copy_grader.py"
RIGHT = (TOY / "submission" / "ops.py").read_text()
WRONG = (TOY / "wrong" / "ops.py").read_text()
HEADER = "student,task,bonus,late_penalty,total,status,flags\r\n"


def graded(name: str, total: int = 10, flags: str = "") -> str:
    """A gradebook line of a graded toy-pack student."""
    return f"{name},{total},0,0,{total},graded,{flags}\r\n"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real toy-pack gradings, right and wrong, as `grader grade --out` writes them (scored by
    ``grader.scoring.score`` from a junit.xml of the toy pack's two cases)."""
    from grader import scoring
    from grader.intake import take
    from grader.render.outputs import write_outputs
    from grader.results import TimeSource
    from grader.rubric import load_rubric
    from grader.submission_time import given
    from tests.test_batch import write_junit

    root = tmp_path_factory.mktemp("templates")
    rubric = load_rubric(RUBRIC)
    for name, verdict in (("right", "pass"), ("wrong", "wrong")):
        out = root / name
        out.mkdir()
        source = TOY / ("submission" if name == "right" else "wrong")
        taken = take(str(source), rubric, root / f"sandbox-{name}", given(None, TimeSource.ROSTER))
        cases = [
            (case, verdict, "" if verdict == "pass" else "rank 0 returned x + x.sum()", None)
            for case in ("test_double[ws1]", "test_double[ws2]")
        ]
        write_junit(out / "junit.xml", cases, "test_toy")
        result = scoring.score(rubric, out / "junit.xml", taken.info, [], taken.sandbox, timings={"matrix": 0.0})
        write_outputs(result, out, None)
    return root


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "grades.log"
    monkeypatch.setenv("FAKE_GRADER_LOG", str(path))
    return path


def student(roster: Path, name: str, *directives: str, body: str = RIGHT) -> Path:
    """A hand-in of the toy pack, its own (by its name in a comment): no two are the same files."""
    path = roster / name
    path.mkdir(parents=True)
    (path / "ops.py").write_text("".join(f"# fake: {d}\n" for d in directives) + f"# {name}\n" + body)
    return path


def batch(roster: Path, out: Path, templates: Path, **kwargs):
    from grader.batch import run_batch

    kwargs.setdefault("progress", StringIO())
    return run_batch(roster, out, rubric=RUBRIC, grade_cmd=[sys.executable, str(COPY_GRADER), str(templates)], **kwargs)


def cli_batch(roster: Path, out: Path, templates: Path, *options: str) -> tuple[int, str, str]:
    """``grader batch`` as a command, in this process: ``(exit status, stdout, stderr)``."""
    from contextlib import redirect_stderr, redirect_stdout

    from grader import batch as module
    from grader import cli

    real = module.run_batch
    stdout, stderr = StringIO(), StringIO()
    grade_cmd = [sys.executable, str(COPY_GRADER), str(templates)]
    try:
        module.run_batch = lambda *a, **k: real(*a, **k, grade_cmd=grade_cmd, progress=StringIO())
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = cli.main(["batch", str(roster), "--out", str(out), "--rubric", str(RUBRIC), *options])
    finally:
        module.run_batch = real
    return code, stdout.getvalue(), stderr.getvalue()


#: ``grader batch`` with the copy grader in place of ``grader grade`` (argv: TEMPLATES, then batch's own)
DRIVER = f"""
import sys
from grader import batch, cli
real = batch.run_batch
batch.run_batch = lambda *a, **k: real(*a, **k, grade_cmd=[sys.executable, {str(COPY_GRADER)!r}, sys.argv[1]])
sys.exit(cli.main(["batch", *sys.argv[2:]]))
"""


def book(out: Path) -> str:
    return (out / "gradebook.csv").read_bytes().decode()


def graded_now(log: Path) -> list[str]:
    """Who was graded (by folder name) since the log was last emptied, in order; then empties it."""
    names = [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return sorted(names)


def leftovers(tmp_path: Path) -> list[int]:
    """Processes still running whose command line names this test's directory: none may outlive a batch."""
    mine = os.fsencode(tmp_path)
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mine in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def message(out: Path, name: str) -> str:
    return json.loads((out / "students" / name / "batch-outcome.json").read_text())["message"]


# ----------------------------------------------------------------------------------------------
# 1. A cached verdict is checked before it is trusted


CACHE_DAMAGE = {
    "truncated junit.xml": ("graded/junit.xml", lambda b: b[: len(b) // 2], "graded/junit.xml changed after grading"),
    "edited verdict": (
        "graded/junit.xml",
        lambda b: b.replace(b'value="wrong"', b'value="pass"'),
        "graded/junit.xml changed after grading",
    ),
    "truncated results.json": ("graded/results.json", lambda b: b[:40], "graded/results.json changed after grading"),
    "edited cache key": (
        "graded/cache-key.json",
        lambda b: b.replace(b"sha256:", b"sha256:0"),
        "graded/cache-key.json changed",
    ),
    "damaged seal": ("graded/seal.json", lambda b: b[:-30], "graded/seal.json is damaged"),
    "deleted seal": ("graded/seal.json", None, "graded/seal.json is missing"),
    "deleted junit.xml": ("graded/junit.xml", None, "graded/junit.xml is missing"),
    "damaged outcome": ("batch-outcome.json", lambda b: b"{", "batch-outcome.json changed after grading"),
}


def test_a_damaged_or_edited_cache_is_never_trusted_the_student_is_graded_again_and_flagged(tmp_path, log, templates):
    roster = tmp_path / "roster"
    student(roster, "alice")
    student(roster, "bob", body=WRONG)
    out = tmp_path / "out"
    batch(roster, out, templates)
    assert graded_now(log) == ["alice", "bob"]
    clean = HEADER + graded("alice") + graded("bob", 0)
    assert book(out) == clean
    for fault, (name, change, why) in CACHE_DAMAGE.items():
        path = out / "students" / "bob" / name
        if change is None:
            path.unlink()
        else:
            path.write_bytes(change(path.read_bytes()))
        rows = batch(roster, out, templates)
        assert graded_now(log) == ["bob"], fault
        assert book(out) == HEADER + graded("alice") + graded("bob", 0, "cache_untrusted"), fault
        assert message(out, "bob").startswith(f"graded again: the cache was not trusted: {why}"), fault
        assert rows[1].message == message(out, "bob")  # graded again, so sealed again: clean for the next fault
    assert leftovers(tmp_path) == []


def test_a_cache_sealed_under_another_key_is_graded_again(tmp_path, log, templates):
    roster = tmp_path / "roster"
    student(roster, "alice")
    out = tmp_path / "out"
    batch(roster, out, templates)
    graded_now(log)
    batch(roster, out, templates, seal_key=tmp_path / "keys" / "another.key")
    assert graded_now(log) == ["alice"]
    assert message(out, "alice").endswith("graded/seal.json was not made with this seal key")
    assert book(out) == HEADER + graded("alice", flags="cache_untrusted")
    assert (tmp_path / "keys" / "another.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "keys").stat().st_mode & 0o777 == 0o700


def test_the_seal_key_is_refused_inside_the_output_and_when_others_can_read_it(tmp_path, templates):
    from grader.errors import UserError

    roster = tmp_path / "roster"
    student(roster, "alice")
    with pytest.raises(UserError, match="must be kept outside --out"):
        batch(roster, tmp_path / "out", templates, seal_key=tmp_path / "out" / "seal.key")
    key = tmp_path / "open.key"
    key.write_text("0" * 64)
    key.chmod(0o644)
    with pytest.raises(UserError, match="readable by others"):
        batch(roster, tmp_path / "out", templates, seal_key=key)


# Forgeries by whoever else can write --out (issue 58): each refused by `grader rescore` and graded
# again, flagged with the reason, by a batch rerun.  One batch of two, graded once for them all.


@pytest.fixture(scope="module")
def sealed_class(tmp_path_factory: pytest.TempPathFactory, templates: Path) -> tuple[Path, Path]:
    """A batch's roster and --out: alice's hand-in is wrong (0/10), bob's right (10/10)."""
    root = tmp_path_factory.mktemp("sealed-class")
    student(root / "roster", "alice", body=WRONG)
    student(root / "roster", "bob")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FAKE_GRADER_LOG", str(root / "grades.log"))
        batch(root / "roster", root / "out", templates)
    return root / "roster", root / "out"


@pytest.fixture
def class_copy(sealed_class: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """The module's batch, its --out copied for one test to forge."""
    roster, out = sealed_class
    shutil.copytree(out, tmp_path / "out", symlinks=True)
    return roster, tmp_path / "out"


def _bob_s_verdicts_without_alice_s_seal(out: Path) -> None:
    """The seal deleted, bob's junit.xml copied in, and the outcome that said a batch made it deleted."""
    alice = out / "students" / "alice"
    (alice / "graded" / "seal.json").unlink()
    (alice / "batch-outcome.json").unlink()
    shutil.copyfile(out / "students" / "bob" / "graded" / "junit.xml", alice / "graded" / "junit.xml")


def _bob_s_sealed_grading_moved_in(out: Path) -> None:
    shutil.rmtree(out / "students" / "alice")
    shutil.copytree(out / "students" / "bob", out / "students" / "alice")


def _deliverables_linked_to_forged_answers(out: Path) -> None:
    forged = out.parent / "forged"
    forged.mkdir()
    (forged / "written_answers.md").write_text("## Q1\n```answers\nbytes: 20\n```\n")
    shutil.rmtree(out / "students" / "alice" / "graded" / "deliverables", ignore_errors=True)
    (out / "students" / "alice" / "graded" / "deliverables").symlink_to(forged, target_is_directory=True)


def _junit_hard_linked(out: Path) -> None:
    """A second name for junit.xml outside --out: whoever holds it rewrites the cached file in place."""
    os.link(out / "students" / "alice" / "graded" / "junit.xml", out.parent / "junit-elsewhere.xml")


FORGERIES = {
    "deleted seal, copied junit.xml": (_bob_s_verdicts_without_alice_s_seal, "graded/seal.json is missing"),
    "another student's sealed grading moved in": (
        _bob_s_sealed_grading_moved_in,
        "graded/seal.json seals the grading of 'bob', not of 'alice'",
    ),
    "graded/deliverables a symlink to forged answers": (
        _deliverables_linked_to_forged_answers,
        "graded/deliverables is a symlink",
    ),
    "junit.xml hard-linked": (_junit_hard_linked, "graded/junit.xml is hard-linked"),
}


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_cache_is_refused_by_rescore_and_graded_again_with_the_reason_by_a_batch_rerun(
    class_copy, log, templates, capsys, forgery
):
    from grader import cli

    roster, out = class_copy
    forge, why = FORGERIES[forgery]
    forge(out)
    alice = out / "students" / "alice" / "graded"
    before = _files(out)
    assert cli.main(["rescore", str(alice), "--rubric", str(RUBRIC)]) == 1
    assert f"{alice}: {why}: grade it again" in capsys.readouterr().err
    assert _files(out) == before  # nothing rescored, nothing resealed

    rows = batch(roster, out, templates)
    assert graded_now(log) == ["alice"]
    assert book(out) == HEADER + graded("alice", 0, "cache_untrusted") + graded("bob")
    assert message(out, "alice").startswith(f"graded again: the cache was not trusted: {why}")
    assert rows[0].message == message(out, "alice")
    assert cli.main(["rescore", str(alice), "--rubric", str(RUBRIC)]) == 0  # graded again: sealed, alice's
    assert capsys.readouterr().out.startswith(f"{alice}: 0/10\n")


def test_a_sealed_grading_whose_results_name_another_submission_is_refused_and_graded_again(
    class_copy, log, templates, capsys
):
    """Sealed under the right key, but its results.json is bob's: not what its cache key says was graded
    (a grade of another hand-in than the one keyed, as a push during the grade would make)."""
    from grader import cli
    from grader.seal import key_path, load_key, seal

    roster, out = class_copy
    alice = out / "students" / "alice"
    shutil.copyfile(out / "students" / "bob" / "graded" / "results.json", alice / "graded" / "results.json")
    seal(alice, "graded", load_key(key_path(None)), "alice")
    bob = json.loads((alice / "graded" / "results.json").read_text())["submission"]["digest"]
    keyed = json.loads((alice / "graded" / "cache-key.json").read_text())["submission"]
    why = f"graded/results.json names another submission ({bob}) than its seal ({keyed})"
    assert cli.main(["rescore", str(alice / "graded"), "--rubric", str(RUBRIC)]) == 1
    assert f"{alice / 'graded'}: {why}: grade it again" in capsys.readouterr().err
    batch(roster, out, templates)
    assert graded_now(log) == ["alice"]
    assert book(out) == HEADER + graded("alice", 0, "cache_untrusted") + graded("bob")
    assert message(out, "alice").startswith(f"graded again: the cache was not trusted: {why}")


def test_a_grade_out_directory_is_rescored_as_unsealed_and_still_never_through_a_link(tmp_path, templates, capsys):
    from grader import cli

    out = tmp_path / "right"
    shutil.copytree(templates / "right", out)
    assert cli.main(["rescore", str(out), "--rubric", str(RUBRIC)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: 10/10 (unsealed: a `grader grade --out` directory")
    (out / "junit.xml").rename(tmp_path / "junit.xml")
    (out / "junit.xml").symlink_to(tmp_path / "junit.xml")
    assert cli.main(["rescore", str(out), "--rubric", str(RUBRIC)]) == 1
    assert f"{out}: junit.xml is a symlink: grade it again" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# 2. One student's fault is that student's row; rescore is all or nothing


def test_a_grading_that_cannot_be_scored_is_its_students_row_and_the_class_is_written(tmp_path, log, templates):
    roster = tmp_path / "roster"
    student(roster, "alice")
    student(roster, "bob", "bad-junit")
    student(roster, "carol", body=WRONG)
    out = tmp_path / "out"
    rows = batch(roster, out, templates)
    assert book(out) == HEADER + graded("alice") + "bob,,,,,grader_error,report_failed\r\n" + graded("carol", 0)
    bob = rows[1]
    assert str(out / "students" / "bob" / "graded" / "junit.xml") in bob.message
    assert bob.message.endswith(f"remove {out / 'students' / 'bob'} and run the batch again")
    assert (out / "index.html").is_file() and (out / "students" / "carol" / "report.html").is_file()


def test_rescore_of_a_class_with_one_damaged_member_rewrites_none_and_lists_it(tmp_path, log, templates, capsys):
    from grader import cli

    roster = tmp_path / "roster"
    for name in ("alice", "bob", "carol"):
        student(roster, name)
    out = tmp_path / "out"
    batch(roster, out, templates)
    dirs = [out / "students" / name / "graded" for name in ("alice", "bob", "carol")]
    junit = dirs[1] / "junit.xml"
    junit.write_bytes(junit.read_bytes()[:100])
    before = {p: p.read_bytes() for d in dirs for p in sorted(d.rglob("*")) if p.is_file()}
    half = tmp_path / "half.yaml"
    half.write_text(RUBRIC.read_text().replace("points: 10", "points: 5"))
    assert cli.main(["rescore", *map(str, dirs), "--rubric", str(half)]) == 1
    err = capsys.readouterr().err
    assert "rescored none of the 3 grading(s): 1 could not be" in err
    assert f"{dirs[1]}: graded/junit.xml changed after grading: grade it again" in err
    assert {p: p.read_bytes() for p in before} == before  # nobody rewritten: the class is not mixed

    shutil.rmtree(out / "students" / "bob")
    assert cli.main(["rescore", str(dirs[0]), str(dirs[2]), "--rubric", str(half)]) == 0
    assert json.loads((dirs[0] / "results.json").read_text())["max_score"] == 5
    graded_now(log)
    batch(roster, out, templates)  # the rescored gradings were sealed again: still trusted
    assert graded_now(log) == ["bob"]


# ----------------------------------------------------------------------------------------------
# 3. The machine's faults are named as such


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="mounting a tmpfs needs root")
def test_a_disk_that_fills_up_mid_batch_stops_it_by_name_keeps_what_was_graded_and_a_rerun_recovers(
    tmp_path, log, templates, monkeypatch
):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "2m")
    try:
        roster = tmp_path / "roster"
        for name in ("s0", "s1", "s3"):
            student(roster, name)
        student(roster, "s2", "fill")  # something fills the disk while s2 is graded
        monkeypatch.setenv("FAKE_FILL", str(disk / "ballast"))
        out = disk / "out"
        code, _, err = cli_batch(roster, out, templates, "--jobs", "1")
        assert code == 3, err
        assert "No space left on device. This is the machine, not the grader: free some space there" in err
        assert str(out) in err and "bug" not in err
        assert graded_now(log) == ["s0", "s1", "s2"]
        assert sorted(p.name for p in (out / "students").iterdir() if not p.name.startswith(".")) == ["s0", "s1"]

        (disk / "ballast").unlink()  # space is freed; the same command again
        code, _, err = cli_batch(roster, out, templates, "--jobs", "1")
        assert code == 0, err
        assert graded_now(log) == ["s2", "s3"]
        assert book(out) == HEADER + "".join(graded(n) for n in ("s0", "s1", "s2", "s3"))

        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        student(roster, "s4")
        code, _, err = cli_batch(roster, out, templates)
        assert code == 3, err
        assert "Read-only file system. This is the machine, not the grader" in err
        assert str(out) in err
        assert leftovers(tmp_path) == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_met_by_a_write_that_names_no_file_still_names_the_output_directory(
    tmp_path, log, templates, monkeypatch
):
    """Which write of the batch meets the full disk depends on how much room was left; one to a file
    already open fails naming no file (CI met one so).  The message still says where to free space."""
    from grader.batch import workers

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write() to an open file raises it

    roster = tmp_path / "roster"
    student(roster, "s0")
    monkeypatch.setattr(workers, "seal", full)
    out = tmp_path / "out"
    code, _, err = cli_batch(roster, out, templates, "--jobs", "1")
    assert code == 3, err
    assert err.startswith(f"grader: {out}: No space left on device. This is the machine, not the grader"), err


# ----------------------------------------------------------------------------------------------
# 4. Every roster entry gets a row


def test_every_entry_of_a_submissions_folder_gets_a_row_with_a_clear_flag(tmp_path, log, templates):
    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob", "a9-dora"):
        student(roster, name)
    student(roster, "a9-eve ")  # a trailing space: refused alone
    student(roster, "a9-carl", body=WRONG)
    shutil.make_archive(str(roster / "a9-carl"), "zip", roster / "a9-carl")  # a9-carl and a9-carl.zip
    (roster / "a9-frank.py").write_text("print('I forgot the folder')\n")
    student(roster, ".a9-gus")
    (roster / "a9-hana.zip").write_text("not a zip\n")
    (roster / "a9-ivan").mkdir()  # accepted the assignment, pushed nothing
    (roster / "a9-judy").symlink_to(roster / "a9-bob")
    shutil.copytree(roster / "a9-dora", roster / "a9-kim")
    out = tmp_path / "out"
    rows = batch(roster, out, templates)
    assert book(out) == HEADER + (
        ".a9-gus,,,,,refused,hidden\r\n"
        + graded("alice")
        + graded("bob", flags="duplicate")
        + "a9-carl,,,,,refused,ambiguous\r\n"
        + "a9-carl.zip,,,,,refused,ambiguous\r\n"
        + graded("dora", flags="duplicate")
        + "a9-eve ,,,,,refused,bad_name\r\n"
        + "a9-frank.py,,,,,refused,not_a_submission\r\n"
        + "hana,,,,,unreadable,damaged_archive\r\n"
        + "ivan,,,,0,no_submission,empty\r\n"
        + graded("judy", flags="duplicate")
        + graded("kim", flags="duplicate")
    )
    why = {r.student: r.message for r in rows}
    assert why["judy"] == "the same files as bob" and why["kim"] == "the same files as dora"
    assert why["a9-carl.zip"] == "2 entries for student 'carl': keep one to grade it"
    assert "is not a readable archive" in why["hana"]
    html = (out / "index.html").read_text()  # the class report lists each with its reason
    assert (
        "keep one to grade it" in html and "put it in a folder to grade it" in html and "the same files as bob" in html
    )
    assert graded_now(log) == ["a9-alice", "a9-bob", "a9-bob", "a9-dora", "a9-kim"]  # judy's link is bob's folder
    assert sorted(p.name for p in (out / "students").iterdir()) == sorted(
        ["alice", "bob", "dora", "hana", "ivan", "judy", "kim"]
    )


def test_every_line_of_a_csv_roster_gets_a_row_and_a_bad_name_is_refused_alone(tmp_path, log, templates):
    roster = tmp_path / "roster.csv"
    student(tmp_path / "subs", "alice")
    student(tmp_path / "subs", "bob", body=WRONG)
    roster.write_text(
        "student,path_or_git_url\nalice,subs/alice\n..,subs/bob\nbob,subs/bob\nzoe,subs/none\nbob,subs/alice\n"
    )
    out = tmp_path / "out"
    rows = batch(roster, out, templates)
    assert book(out) == HEADER + (
        graded("alice")
        + ".. (line 3),,,,,refused,bad_name\r\n"
        + "bob (line 4),,,,,refused,ambiguous\r\n"
        + "zoe,,,,,unreadable,unreadable\r\n"
        + "bob (line 6),,,,,refused,ambiguous\r\n"
    )
    assert not (tmp_path / "students").exists() and sorted(os.listdir(out / "students")) == ["alice", "zoe"]
    assert rows[1].message == "'..' cannot be a student's name (a directory name): rename it to grade it"


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="runs the batch without root's rights: needs root"
)
def test_an_unreadable_folder_is_that_students_row_without_root(tmp_path, log, templates):
    """The batch runs as uid 61001 of a user namespace of its own (``tests/test_without_root.py``): no
    capability over the host's files, so bob's folder, another account's with mode 700, is unreadable,
    and so is an --out of that account's."""
    from tests.test_without_root import UNPRIVILEGED

    roster = tmp_path / "roster"
    student(roster, "alice")
    bob = student(roster, "bob")
    os.chown(bob, 61002, 61002)
    bob.chmod(0o700)
    out = tmp_path / "out"
    cmd = [*UNPRIVILEGED, "-c", DRIVER, str(templates), str(roster), "--out", str(out), "--rubric", str(RUBRIC)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert book(out) == HEADER + graded("alice") + "bob,,,,,unreadable,unreadable\r\n"
    assert f"bob: unreadable: cannot read the submission: Permission denied: {bob}" in done.stdout
    assert graded_now(log) == ["alice"]

    theirs = tmp_path / "theirs"  # an --out this account may not write: the machine's fault, named
    theirs.mkdir()
    os.chown(theirs, 61002, 61002)
    cmd[cmd.index(str(out))] = str(theirs / "class")
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert (
        f"{theirs / 'class'}: Permission denied. This is the machine, not the grader: give this account" in done.stderr
    )
    assert leftovers(tmp_path) == []


# ----------------------------------------------------------------------------------------------
# 5. Interrupted batches: the client killed mid-batch, then the same command again


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_batch_interrupted_mid_way_ends_after_a_rerun_as_an_uninterrupted_one(tmp_path, log, templates, sig):
    roster = tmp_path / "roster"
    for i in range(4):
        student(roster, f"s{i}", "sleep=0.4", body=RIGHT if i % 2 else WRONG)
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", DRIVER, str(templates), str(roster), "--out", str(out), "--rubric", str(RUBRIC)]
    proc = subprocess.Popen([*cmd, "--jobs", "1"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while not (out / "students" / "s0" / "graded" / "seal.json").exists() or len(log.read_text().split("\n")) < 3:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
    finally:
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 130)
    if sig != signal.SIGKILL:
        assert "interrupted; rerun the same command to finish" in (proc.stderr.read().decode() if proc.stderr else "")
    deadline = time.monotonic() + 10
    while leftovers(tmp_path) and time.monotonic() < deadline:  # a SIGKILLed batch's grade dies with it
        time.sleep(0.05)
    assert leftovers(tmp_path) == []
    assert not (out / "gradebook.csv").exists()
    before = graded_now(log)
    assert before[:1] == ["s0"] and len(before) >= 2
    kept = {p.parent.parent.name for p in out.glob("students/*/graded/seal.json")}
    assert "s0" in kept and len(kept) < 4

    batch(roster, out, templates, jobs=2)
    assert graded_now(log) == sorted({"s0", "s1", "s2", "s3"} - kept)  # the rest, and only the rest
    assert book(out) == HEADER + graded("s0", 0) + graded("s1") + graded("s2", 0) + graded("s3")
    batch(roster, tmp_path / "straight", templates, jobs=2)
    assert (out / "index.html").read_text() == (tmp_path / "straight" / "index.html").read_text()
    assert not [p for p in (out / "students").iterdir() if p.name.startswith(".")]
    assert leftovers(tmp_path) == []
