"""Grade a whole class: ``grader batch ROSTER --out DIR``.

Each student is graded by a separate ``python -m grader grade`` process in its own session, so a
broken or hostile submission (or a grader crash on it) costs that student a row with a status,
never the batch.  Results are cached per student under a key (submission digest, rubric digest,
grader version, the options that change a grade), computed without grading, so an interrupted
run picks up where it stopped.  Every file is written atomically and each student's grade lands
in a temporary directory that is renamed into place only once complete.

Layout of DIR::

    gradebook.csv                 one row per student (see GRADEBOOK_FIXED)
    index.html                    class report
    students/<student>/           everything `grader grade --out` writes, plus
        grade.log                 its stdout and stderr
        batch-outcome.json        status, exit code, seconds spent grading, message
        cache-key.json            only when graded: what the result is valid for
        final.json                the result with manual scores merged (what the reports show)
        report.html               the student report
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import yaml

from grader import __version__
from grader.cli import DIE_WITH_PARENT_ENV
from grader.errors import UserError
from grader.intake import materialize
from grader.manual import ManualScores, apply_manual, load_manual
from grader.render.html import fmt_points, render_class_report, render_student_report
from grader.render.outputs import write_text
from grader.results import GradeResult, ItemStatus, Lateness, TimeSource, Verdict
from grader.rubric import Rubric, default_rubric_path, load_rubric
from grader.submission_time import given, parse_time
from grader.text import shown

GRADED, TIMEOUT, GRADER_ERROR, NO_SUBMISSION = "graded", "timeout", "grader_error", "no_submission"

#: Case verdicts that become a gradebook flag.
VERDICT_FLAGS = {
    Verdict.FORBIDDEN.value: "forbidden",
    Verdict.TAMPERING.value: "tampering",
    Verdict.NOT_PARALLEL.value: "not_parallel",
    Verdict.HANG.value: "hang",
    Verdict.CRASH.value: "crash",
    Verdict.MEMORY.value: "memory",
    Verdict.IMPORT_ERROR.value: "import_error",
}

GRADEBOOK_FIXED = ("bonus", "late_penalty", "total", "status", "flags")
KILL_GRACE_S = 10.0  # between SIGINT and SIGKILL when a grade is ended
LOG_TAIL = 2000  # characters of grade.log quoted as the message of a failed grade


@dataclass(frozen=True)
class Student:
    name: str
    source: str  # absolute local path or git URL; "" when the roster lists no submission
    submitted_at: str | None = None  # from a CSV roster's optional third column


@dataclass
class Outcome:
    """What grading one student produced, as recorded in ``batch-outcome.json``."""

    status: str
    message: str = ""
    returncode: int | None = None
    seconds: float = 0.0


@dataclass
class GradebookRow:
    """One gradebook line.  Numbers are rendered from the student's (merged) ``GradeResult``."""

    student: str
    status: str
    tasks: dict[str, float] = field(default_factory=dict)  # non-bonus task id -> score
    bonus: float | None = None
    late_penalty: float | None = None
    total: float | None = None  # None when there is no grade to record (timeout, grader error)
    flags: list[str] = field(default_factory=list)
    message: str = ""


# ----------------------------------------------------------------------------------------------
# Roster


def load_roster(path: Path) -> list[Student]:
    """A directory with one entry per student (folder, archive or git repo), or a CSV roster."""
    path = Path(path)
    if path.is_dir():
        return _roster_from_dir(path)
    if path.is_file():
        return _roster_from_csv(path)
    raise UserError(f"{path}: roster not found (a directory of submissions or a CSV student,path_or_git_url)")


def _roster_from_dir(root: Path) -> list[Student]:
    entries = sorted(
        p
        for p in root.iterdir()
        if not p.name.startswith((".", "_")) and (p.is_dir() or _archive_stem(p.name) is not None)
    )
    if not entries:
        raise UserError(f"{root}: no submissions (expected one folder, .zip or .tar.gz per student)")
    names = [shown(_archive_stem(p.name) or p.name) for p in entries]  # a folder name may be any bytes
    names = strip_common_prefix(names)
    return _checked([Student(name, str(p.resolve())) for name, p in zip(names, entries, strict=True)], root)


def _roster_from_csv(path: Path) -> list[Student]:
    students = []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        try:
            rows = list(csv.reader(fh))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: not a readable CSV roster ({exc})") from None
    for lineno, row in enumerate(rows, start=1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if lineno == 1 and cells[0].lower() == "student":
            continue
        if len(cells) not in (2, 3):
            raise UserError(f"{path}:{lineno}: expected student,path_or_git_url[,submitted_at]")
        name, source = shown(cells[0]), cells[1]
        if source and not _is_git_url(source):
            source = str((path.parent / source).resolve())
        submitted_at = cells[2] if len(cells) == 3 and cells[2] else None
        if submitted_at:
            parse_time(submitted_at, f"{path}:{lineno}")
        students.append(Student(name, source, submitted_at))
    return _checked(students, path)


def _checked(students: list[Student], where: Path) -> list[Student]:
    """Names become directory names: refuse anything that could escape ``students/`` or collide."""
    seen: set[str] = set()
    for s in students:
        if not s.name or s.name.startswith(".") or any(c in s.name for c in "/\0") or s.name != s.name.strip():
            raise UserError(f"{where}: {s.name!r} is not usable as a student name")
        if s.name in seen:
            raise UserError(f"{where}: student {s.name!r} appears twice")
        seen.add(s.name)
    return students


def strip_common_prefix(names: list[str]) -> list[str]:
    """``["a9-alice", "a9-bob"] -> ["alice", "bob"]``: GitHub Classroom prefixes every repo with the
    assignment name.  The prefix is cut at its last ``-`` or ``_`` so a shared first letter stays."""
    prefix = os.path.commonprefix(names)  # noqa: RUF071 - names, not paths
    cut = max(prefix.rfind("-"), prefix.rfind("_")) + 1
    stripped = [n[cut:] for n in names]
    return stripped if cut and all(stripped) else names


def _archive_stem(name: str) -> str | None:
    for suffix in (".tar.gz", ".tgz", ".zip"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return None


def _is_git_url(source: str) -> bool:
    return "://" in source or source.startswith("git@")


# ----------------------------------------------------------------------------------------------
# Cache keys


def submission_key(
    student: Student, rubric: Rubric, scratch: Path, trust_commit_time: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """The cache key of a submission, computed without grading: ``(None, why)`` when there is nothing
    to grade.

    The digest is ``SubmissionInfo.digest`` itself: intake's ``materialize`` copies the rubric's files
    into a throw-away sandbox exactly as ``grader grade`` will, so a cached result is valid precisely
    when the files it graded are unchanged.  The submission time and its source are part of the key
    (they decide lateness).
    """
    if not student.source:
        return None, "no submission listed in the roster"
    with tempfile.TemporaryDirectory(prefix=".tmp-key-", dir=scratch) as tmp:
        try:
            taken = materialize(  # with the arguments grader.pipeline passes
                student.source,
                student_files=list(rubric.student_files),
                deliverables=list(rubric.deliverable_files),
                dest=Path(tmp) / "sandbox",
                max_file_bytes=rubric.limits.file_size_mb << 20,
                max_total_bytes=rubric.limits.submission_mb << 20,
                submitted_at=given(student.submitted_at, TimeSource.ROSTER),
                trust_commit_time=trust_commit_time,
            )
        except UserError as exc:
            return None, str(exc)
    if not taken.present:
        return None, "none of the rubric's files: " + "; ".join(taken.problems)
    key = {
        "submission": taken.info.digest,
        "submitted_at": taken.info.submitted_at,
        "submitted_at_source": taken.info.submitted_at_source.value,
        "rubric": rubric.digest,
        "grader_version": __version__,
    }
    return key, ""


def prepare_rubric(rubric: Path | None, deadline: str | None, out: Path) -> Path | None:
    """The rubric every grade runs with: ``--deadline`` is written into a copy (``DIR/rubric.yaml``)
    because `grader grade` takes the deadline from its rubric; its digest then keys the cache."""
    if deadline is None:
        return rubric
    parse_time(deadline, "--deadline")
    source = rubric or default_rubric_path()
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("late"), dict):
        raise UserError(f"{source}: --deadline needs a `late:` section (penalty per day, cap) in the rubric")
    data["late"]["deadline"] = deadline
    derived = out / "rubric.yaml"
    header = f"# {source} with the deadline set by `grader batch --deadline`; written on every run.\n"
    write_text(derived, header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000))
    return derived


# ----------------------------------------------------------------------------------------------
# Files


def _install_dir(tmp: Path, final: Path) -> None:
    """Move a completed student directory into place.  Between the two renames the student has no
    directory at all, which a rerun treats as "grade again": never a mix of old and new files."""
    if final.exists():
        old = final.with_name(f".old-{final.name}-{uuid.uuid4().hex}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """One batch per output directory: the start-up clean-up would delete another run's temp dirs.
    ``flock`` is released by the kernel when the holder dies, so a killed batch never blocks a rerun."""
    with (out / ".batch.lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"{out}: another `grader batch` is writing there") from None
        yield


# ----------------------------------------------------------------------------------------------
# Grading one student


class _Grader:
    """Brings one student up to date, from any worker thread; kills every grade in flight on request."""

    def __init__(
        self,
        students_dir: Path,
        rubric: Rubric,
        command: list[str],
        options: list[str],
        timeout: float,
        force: bool,
        trust_commit_time: bool = False,
    ):
        self.students_dir = students_dir
        self.rubric = rubric
        self.command = command  # up to and including `grade`
        self.options = options  # --rubric, --backend: the same for every student
        self.timeout = timeout
        self.force = force
        self.trust_commit_time = trust_commit_time  # passed in options too; the cache key needs it
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._stopping = False

    def process(self, student: Student) -> tuple[str, bool]:
        """(status to report, whether a grade ran): no submission, cached, or graded now."""
        try:
            return self._process(student)
        except Exception as exc:  # the batch's own failure on one student is that student's row
            _record(self.students_dir / student.name, Outcome(GRADER_ERROR, f"grader batch: {exc!r}"))
            return GRADER_ERROR, False

    def _process(self, student: Student) -> tuple[str, bool]:
        final = self.students_dir / student.name
        key, why = submission_key(student, self.rubric, self.students_dir, self.trust_commit_time)
        if key is None:
            _record(final, Outcome(NO_SUBMISSION, why))
            return NO_SUBMISSION, False
        if not self.force and _read_json(final / "cache-key.json") == key and (final / "results.json").is_file():
            return "cached", False
        return self.grade(student, key).status, True

    def grade(self, student: Student, key: dict[str, Any]) -> Outcome:
        tmp = self.students_dir / f".tmp-{student.name}-{uuid.uuid4().hex}"
        tmp.mkdir()
        log_path = tmp.with_name(tmp.name + ".log")
        cmd = [*self.command, student.source, "--out", str(tmp), *self.options]
        if student.submitted_at:
            cmd += ["--submitted-at", student.submitted_at, "--submitted-at-source", TimeSource.ROSTER.value]
        start = time.monotonic()
        with log_path.open("wb") as log:
            outcome = self._run(cmd, log)
        outcome.seconds = round(time.monotonic() - start, 3)
        os.replace(log_path, tmp / "grade.log")
        if outcome.status == GRADED:
            outcome = _classify(tmp, outcome)
        if outcome.status != GRADED and not outcome.message:
            outcome.message = _tail(tmp / "grade.log")
        write_text(tmp / "batch-outcome.json", json.dumps(vars(outcome), indent=2) + "\n")
        if outcome.status == GRADED:
            write_text(tmp / "cache-key.json", json.dumps(key, indent=2) + "\n")
        _install_dir(tmp, self.students_dir / student.name)
        return outcome

    def _run(self, cmd: list[str], log: io.BufferedWriter) -> Outcome:
        with self._lock:
            if self._stopping:
                raise KeyboardInterrupt
            # A session of its own: on timeout the whole group (ranks, pytest, docker client) dies.
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, DIE_WITH_PARENT_ENV: str(os.getpid())},  # a killed batch ends its grades
            )
            self._running[proc.pid] = proc
        try:
            proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return Outcome(TIMEOUT, f"no result after {self.timeout:g} s: killed")
        finally:
            _kill_group(proc)  # on timeout, and leftovers of a finished grade must not outlive it
            with self._lock:
                self._running.pop(proc.pid, None)
        if self._stopping:  # killed by stop(): leave nothing behind that looks like a verdict
            raise KeyboardInterrupt
        return Outcome(GRADED, returncode=proc.returncode)

    def stop(self) -> None:
        """Kill every grade in flight (Ctrl-C, SIGTERM) and refuse new ones."""
        with self._lock:
            self._stopping = True
            running = list(self._running.values())
        for proc in running:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End a grade's whole process group.  SIGINT first, so a grade still running can clean up (the
    docker backend removes its container in a ``finally``), then SIGKILL for whatever is left."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)


def _classify(out: Path, run: Outcome) -> Outcome:
    """Decide the status of a grade that exited in time, from what it left behind (``run`` keeps its
    exit code and seconds)."""
    data = _read_json(out / "results.json")
    if data is None:
        return replace(run, status=GRADER_ERROR)
    try:
        result = GradeResult.from_dict(data)
    except (TypeError, ValueError, KeyError) as exc:
        return replace(run, status=GRADER_ERROR, message=f"results.json does not match the result model: {exc}")
    if result.status != "graded":
        return replace(run, status=GRADER_ERROR, message=result.error or "the grader reported an error")
    return run


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL:].strip()


# ----------------------------------------------------------------------------------------------
# Progress


class Progress:
    """``[7/40] 1m12s elapsed, ETA 4m30s  alice: graded`` on stderr: redrawn in place on a terminal,
    one line per completion otherwise (CI logs).  The ETA counts only grades run, not cache hits."""

    def __init__(self, total: int, stream: TextIO):
        self.total, self.stream = total, stream
        self.done = self.ran = 0
        self.start = time.monotonic()
        self.tty = stream.isatty()

    def update(self, student: str, status: str, ran: bool) -> None:
        self.done += 1
        self.ran += ran
        elapsed = time.monotonic() - self.start
        remaining = self.total - self.done
        eta = _duration(elapsed / self.ran * remaining) if self.ran else "--"
        line = f"[{self.done}/{self.total}] {_duration(elapsed)} elapsed, ETA {eta}  {student}: {status}"
        if self.tty:
            self.stream.write("\r\x1b[2K" + line + ("\n" if remaining == 0 else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# ----------------------------------------------------------------------------------------------
# Gradebook


def flags_for(outcome: Outcome, result: GradeResult | None, case_verdicts: dict[str, str]) -> list[str]:
    """Problems an instructor should look at, from the batch status, case verdicts and findings."""
    flags = set()
    if outcome.status == TIMEOUT:
        flags.add("timeout")
    verdicts = set(case_verdicts.values())
    if result is not None:
        verdicts |= {f.verdict.value for item in result.items() for f in item.failures}
        if result.findings or any(item.findings for item in result.items()):
            flags.add("forbidden")
        if result.late is not None and result.late.points > 0:
            flags.add("late")
        if result.lateness is Lateness.UNKNOWN:  # no trusted submission time: the instructor decides
            flags.add("late_unknown")
        if any(item.status == ItemStatus.PENDING_REVIEW for item in result.items()):
            flags.add("review")
        if any(item.status == ItemStatus.MANUAL for item in result.items()):
            flags.add("manual")
    flags |= {VERDICT_FLAGS[v] for v in verdicts if v in VERDICT_FLAGS}
    return sorted(flags)


def gradebook_row(student: str, outcome: Outcome, result: GradeResult | None, verdicts: dict[str, str]) -> GradebookRow:
    row = GradebookRow(student, outcome.status, flags=flags_for(outcome, result, verdicts), message=outcome.message)
    if outcome.status == NO_SUBMISSION:
        row.total = 0.0
    if result is not None and outcome.status == GRADED:
        row.tasks = {t.id: t.score for t in result.tasks if not t.bonus}
        row.bonus = result.bonus_score
        row.late_penalty = result.late.points if result.late else 0.0
        row.total = result.score
    return row


def task_columns(results: Iterable[GradeResult | None]) -> list[str]:
    """Non-bonus task ids in rubric order (the union, should rubrics differ between students)."""
    columns: list[str] = []
    for result in results:
        for task in result.tasks if result else []:
            if not task.bonus and task.id not in columns:
                columns.append(task.id)
    return columns


def render_gradebook(rows: list[GradebookRow], tasks: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["student", *tasks, *GRADEBOOK_FIXED])
    for row in rows:
        writer.writerow(
            [
                row.student,
                *(fmt_points(row.tasks.get(t)) for t in tasks),
                fmt_points(row.bonus),
                fmt_points(row.late_penalty),
                fmt_points(row.total),
                row.status,
                " ".join(row.flags),
            ]
        )
    return buf.getvalue()


def case_verdicts(junit: Path) -> dict[str, str]:
    """Matrix case id -> verdict, from the ``verdict`` property the matrix puts on each testcase."""
    if not junit.is_file():
        return {}
    from junitparser import JUnitXml, Properties, TestSuite
    from junitparser.junitparser import JUnitXmlError

    try:
        xml = JUnitXml.fromfile(str(junit))
    except (JUnitXmlError, OSError, SyntaxError):  # ElementTree's ParseError is a SyntaxError
        return {}
    verdicts = {}
    for suite in [xml] if isinstance(xml, TestSuite) else list(xml):
        for case in suite:
            props = case.child(Properties)
            named = {p.name: p.value for p in props} if props is not None else {}
            if "verdict" in named:
                verdicts[case.name] = named["verdict"]
            elif not case.is_skipped:
                verdicts[case.name] = Verdict.PASS.value if case.is_passed else Verdict.ERROR.value
    return verdicts


# ----------------------------------------------------------------------------------------------
# The batch


def run_batch(
    roster: Path,
    out: Path,
    *,
    jobs: int = 2,
    backend: str = "local",
    image: str = "grader:local",
    rubric: Path | None = None,
    manual: Path | None = None,
    deadline: str | None = None,
    force: bool = False,
    timeout: float = 900.0,
    trust_commit_time: bool = False,
    grade_cmd: Sequence[str] | None = None,
    progress: TextIO | None = None,
) -> list[GradebookRow]:
    """Grade every student of ``roster`` missing or stale in ``out``, then write the gradebook and reports.

    ``grade_cmd`` replaces ``python -m grader`` (the tests inject a fake grader with it).
    """
    if jobs < 1:
        raise UserError("--jobs must be at least 1")
    if timeout <= 0:
        raise UserError("--timeout must be positive")
    students = load_roster(roster)
    manual_scores = load_manual(manual) if manual else {}
    unknown = sorted(set(manual_scores) - {s.name for s in students})
    if unknown:
        raise UserError(f"{manual}: students not in the roster: {', '.join(unknown)}")

    out = Path(out)
    students_dir = out / "students"
    students_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(out):
        rubric_path = prepare_rubric(rubric, deadline, out)
        loaded = load_rubric(rubric_path)  # a broken rubric is one error now, not one per student
        command = [*(grade_cmd or [sys.executable, "-m", "grader"]), "grade"]
        options = ["--rubric", str(rubric_path.resolve())] if rubric_path else []
        if backend == "docker":
            options += ["--backend", "docker", "--image", image]
        if trust_commit_time:
            options.append("--trust-commit-time")
        grader = _Grader(students_dir, loaded, command, options, timeout, force, trust_commit_time)
        for leftover in [*students_dir.glob(".tmp-*"), *students_dir.glob(".old-*")]:
            _remove(leftover)
        _grade_all(students, grader, jobs, progress or sys.stderr)
        return _write_reports(students, out, manual_scores)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _grade_all(students: list[Student], grader: _Grader, jobs: int, stream: TextIO) -> None:
    progress = Progress(len(students), stream)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grade")
    futures: dict[Future[tuple[str, bool]], Student] = {pool.submit(grader.process, s): s for s in students}
    try:
        pending = set(futures)
        while pending:
            # A timed wait keeps the main thread responsive to Ctrl-C and SIGTERM.
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                status, ran = future.result()
                progress.update(futures[future].name, status, ran)
    except BaseException:
        grader.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


def _record(final: Path, outcome: Outcome) -> None:
    """Record an outcome that needed no grade, replacing whatever an older run left for the student."""
    if _read_json(final / "batch-outcome.json") == vars(outcome) and not (final / "results.json").exists():
        return
    tmp = final.with_name(f".tmp-{final.name}-{uuid.uuid4().hex}")
    tmp.mkdir()
    write_text(tmp / "batch-outcome.json", json.dumps(vars(outcome), indent=2) + "\n")
    _install_dir(tmp, final)


def _load_student(student_dir: Path) -> tuple[Outcome, GradeResult | None]:
    data = _read_json(student_dir / "batch-outcome.json") or {}
    outcome = Outcome(**data) if data else Outcome(GRADER_ERROR, "no outcome recorded")
    raw = _read_json(student_dir / "results.json")
    try:
        result = GradeResult.from_dict(raw) if raw else None
    except (TypeError, ValueError, KeyError):
        result = None
    return outcome, result


def _write_reports(students: list[Student], out: Path, manual: dict[str, ManualScores]) -> list[GradebookRow]:
    rows, results, verdicts = [], {}, {}
    for student in students:
        student_dir = out / "students" / student.name
        outcome, result = _load_student(student_dir)
        if result is not None and student.name in manual:
            try:
                result = apply_manual(result, manual[student.name].scores, manual[student.name].comments)
            except UserError as exc:
                raise UserError(f"manual scores for {student.name}: {exc}") from None
        verdicts[student.name] = case_verdicts(student_dir / "junit.xml")
        if result is not None:
            write_text(student_dir / "final.json", result.to_json())
            write_text(student_dir / "report.html", render_student_report(result, student=student.name))
        results[student.name] = result
        rows.append(gradebook_row(student.name, outcome, result, verdicts[student.name]))
    write_text(out / "gradebook.csv", render_gradebook(rows, task_columns(results.values())))
    write_text(out / "index.html", render_class_report(results, rows, case_verdicts=verdicts))
    return rows


def main(args: argparse.Namespace) -> int:
    def on_sigterm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        rows = run_batch(
            args.roster,
            args.out,
            jobs=args.jobs,
            backend=args.backend,
            image=args.image,
            rubric=args.rubric,
            manual=args.manual,
            deadline=args.deadline,
            force=args.force,
            timeout=args.timeout,
            trust_commit_time=args.trust_commit_time,
        )
    except KeyboardInterrupt:
        print("grader batch: interrupted; rerun the same command to finish", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"{len(rows)} students: {summary}")
    print(f"gradebook: {args.out / 'gradebook.csv'}")
    print(f"class report: {args.out / 'index.html'}")
    return 0
