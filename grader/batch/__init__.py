"""Grade a whole class: ``grader batch ROSTER --out DIR``.

Two steps.  Every student whose submission, submission time, rubric matrix part (pack, files,
limits, policy) or grader version changed since the last run is graded again, ``--jobs`` at a time,
each in a process of its own (``grader.batch.workers``; the cache key: ``grader.batch.cache``).
Then every graded student is scored from that cached matrix run under the current rubric, deadline
and manual scores (``grader.rescore``: no student code runs), and the gradebook and reports are
written from the results alone.  So changing points, weights, the late policy, the deadline or a
manual score costs seconds, never a regrade.  Every file is written atomically.

Layout of DIR::

    gradebook.csv                 one row per student (``grader.gradebook``)
    index.html                    class report
    students/<student>/
        batch-outcome.json        status, exit code, seconds spent grading, message
        graded/                   what `grader grade --out` wrote: the cache, rescored on every run
            cache-key.json        only when graded: what the matrix run is valid for
            seal.json             whose grading this is, and every entry's type, size and digest,
                                  under the instructor's key (``grader.seal``)
            grade.log             its stdout and stderr
        results.json, summary.md, gradescope.json, classroom.json
                                  the grade of record: graded/ scored under today's rubric, deadline
                                  and manual scores
        report.html               the student report
    similarity/                   with --similarity: similarity.csv, similarity.html (``grader.similarity``)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from grader import late
from grader.batch.cluster import MAX_IN_FLIGHT, ClusterGrader, connect, parse_cluster
from grader.batch.roster import Student, load_roster
from grader.batch.workers import GRADED_DIR, Grader, grade_all, load_outcome, warm
from grader.errors import UserError, environment_fault, named
from grader.gradebook import (
    BATCH_FLAGS,
    CACHE_UNTRUSTED,
    DUPLICATE,
    GRADED,
    GRADER_ERROR,
    REFUSED,
    REPORT_FAILED,
    GradebookRow,
    gradebook_row,
    render_gradebook,
    task_columns,
)
from grader.manual import ManualScores, load_manual
from grader.pack import Diagram, load_pack
from grader.pipeline import input_salt
from grader.render.class_report import render_class_report
from grader.render.outputs import write_outputs, write_text
from grader.render.similarity import Nearest
from grader.render.student_report import render_student_report
from grader.rescore import rescore
from grader.results import GradeResult
from grader.rubric import Rubric, load_rubric
from grader.seal import STUDENTS_DIR, Untrusted, key_path, load_key, open_sealed
from grader.similarity import require as require_similarity

if TYPE_CHECKING:  # imported where used: the copy check is an optional extra (copydetect)
    from grader.similarity.check import Fingerprinted
    from grader.similarity.remote import SimilarityTask

SIMILARITY_DIR = "similarity"


def run_batch(
    roster: Path,
    out: Path,
    *,
    jobs: int = 2,
    cold_hosts: bool = False,
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
    secret_file: Path | None = None,
    cluster: str | None = None,
    cluster_config: Path | None = None,
    send_submissions: bool = False,
    similarity: bool = False,
    boilerplate: Sequence[Path] = (),
    seal_key: Path | None = None,
) -> list[GradebookRow]:
    """Grade every student of ``roster`` missing or stale in ``out``, score everyone, write the reports.

    ``grade_cmd`` replaces ``python -m grader`` (the tests inject a fake grader with it).  ``cluster``
    runs the grades on Dask (``grader.batch.cluster``); ``send_submissions`` sends them their bytes.
    ``similarity`` runs the copy check over the roster after the grading, into ``out/similarity/``; on
    a cluster each student a worker grades is fingerprinted on that worker (``grader.similarity.remote``).
    ``seal_key`` is the file of the key the cache is sealed with (``grader.seal.key_path``).
    ``cold_hosts``: no warm servers, here (``workers.warm``) or on each Dask worker (``warm_workers``):
    each grade is a new ``python -m grader grade`` whose session hosts start cold, as before issue 41.
    """
    if jobs < 1:
        raise UserError("--jobs must be at least 1")
    if timeout <= 0:
        raise UserError("--timeout must be positive")
    students = load_roster(roster)
    gradable = [s for s in students if not s.refused]
    manual_scores = load_manual(manual) if manual else {}
    unknown = sorted(set(manual_scores) - {s.name for s in gradable})
    if unknown:
        raise UserError(f"{manual}: students not in the roster: {', '.join(unknown)}")
    spec = parse_cluster(cluster) if cluster else None
    if (cluster_config or send_submissions) and spec is None:
        raise UserError("--cluster-config and --send-submissions go with --cluster")
    if boilerplate and not similarity:
        raise UserError("--boilerplate goes with --similarity")
    if similarity:
        require_similarity()  # before the grading, not after an hour of it
    salt = input_salt(secret_file)[0] if secret_file else None
    loaded = load_rubric(rubric)  # a broken rubric is one error now, not one per student
    scored = late.under_deadline_option(loaded, deadline)

    out = Path(out)
    key = load_key(key_path(seal_key), out)
    students_dir = out / "students"
    students_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(out), _naming(out):
        command = [*(grade_cmd or [sys.executable, "-m", "grader"]), "grade"]
        options = ["--backend", "docker", "--image", image] if backend == "docker" else []
        if trust_commit_time:
            options.append("--trust-commit-time")
        rubric_file = Path(rubric).resolve() if rubric else None
        settings = (students_dir, loaded, command, options, timeout, force, trust_commit_time, rubric_file, salt, key)
        for leftover in [*students_dir.glob(".tmp-*"), *students_dir.glob(".old-*")]:
            _remove(leftover)
        stream = progress or sys.stderr
        fingerprinted: dict[str, Fingerprinted] = {}
        warm_up = bool(gradable) and backend == "local" and grade_cmd is None and not cold_hosts
        if spec is None:
            local = Grader(*settings)
            with warm(local, warm_up):
                grade_all(gradable, local, jobs, stream)
        elif gradable:
            task = _similarity_task(loaded, boilerplate) if similarity else None
            with connect(spec, cluster_config, len(gradable), stream, warm_up) as client:
                grader = ClusterGrader(
                    *settings,
                    client=client,
                    send=send_submissions,
                    similarity=task,
                    warm=warm_up,
                    machine_jobs=spec.machine_jobs,
                )
                grade_all(gradable, grader, min(len(gradable), MAX_IN_FLIGHT), stream)
            fingerprinted = grader.fingerprinted
        nearest = _similarity(gradable, out, loaded, boilerplate, fingerprinted) if similarity else None
        with tempfile.TemporaryDirectory(prefix="grader-batch-") as copies:
            return _write_reports(students, out, scored, manual_scores, nearest, key, Path(copies))


def _similarity_task(rubric: Rubric, boilerplate: Sequence[Path]) -> SimilarityTask:
    """What each worker needs to fingerprint its student, read before the grading: a starter missing
    here stops the batch now, not after it."""
    from grader.similarity.remote import similarity_task

    return similarity_task(rubric, load_pack(rubric.assignment.pack), boilerplate)


def _similarity(
    students: list[Student],
    out: Path,
    rubric: Rubric,
    boilerplate: Sequence[Path],
    fingerprinted: Mapping[str, Fingerprinted],
) -> dict[str, Nearest]:
    """The copy check over the batch's roster, into ``out/similarity/``: each student's highest pair.

    On a cluster, ``fingerprinted`` holds the students graded in this run, fingerprinted on their
    workers.  The others are fingerprinted here: a cached student's worker is long gone and the cache
    holds their grading, not a fingerprint (which the ``--boilerplate`` of each run changes), and a
    flagged one never had a task.  A task only to fingerprint them would cost a round trip through Dask
    (and, with ``--send-submissions``, their bytes again) for what parses here in a fraction of a second."""
    from grader.similarity.check import compare_class, write_report

    pack = load_pack(rubric.assignment.pack)
    report = compare_class(students, pack, rubric, boilerplate, done=fingerprinted)
    write_report(report, out / SIMILARITY_DIR, pack.title)
    return report.nearest()


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _naming(out: Path) -> Iterator[None]:
    """A fault of the machine that names no file (a write to a file already open) names ``out``: the
    instructor learns where to free space, whichever write of the batch met the full disk."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and environment_fault(exc, out):
            raise named(exc, out) from exc
        raise


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


def _write_reports(
    students: list[Student],
    out: Path,
    rubric: Rubric,
    manual: dict[str, ManualScores],
    nearest: dict[str, Nearest] | None,
    seal_key: bytes,
    copies: Path,
) -> list[GradebookRow]:
    """Score every graded student from the cache (``grader.rescore``), then the gradebook and reports.

    Each cached grading is read once, through the no-follow reader, into a private copy under
    ``copies`` and checked against its seal as it is read (``grader.seal.open_sealed``); scoring and the
    reports read that copy.  A seal broken since the grading step (a neighbour editing ``--out`` while
    the batch runs) is that student's row, flagged ``cache_untrusted``: the next run grades them again.

    Everyone is scored before anything is written: manual scores refused for one student (an unknown
    item, points out of range) leave every file as the last run wrote it, never some students'
    results under the new scores beside a gradebook under the old.  Any other failure on one student
    (a cached file that cannot be read, a report that cannot be rendered) is that student's row,
    flagged ``report_failed`` with the reason; a full or read-only disk stops the batch (exit 3)."""
    diagram = load_pack(rubric.assignment.pack).diagram
    rows: list[GradebookRow] = []  # in roster order; a refused entry's label may be any text
    row_of: dict[str, int] = {}  # a gradable student's row (their names are unique)
    results: dict[str, GradeResult | None] = {}
    keys: dict[str, dict[str, Any] | None] = {}  # each graded student's cache key, as sealed
    junits: dict[str, Path] = {}  # and the matrix run, as checked
    for student in students:
        if student.refused:
            rows.append(gradebook_row(student.name, REFUSED, None, student.why, [student.refused]))
            continue
        row_of[student.name] = len(rows)
        student_dir = out / STUDENTS_DIR / student.name
        outcome = load_outcome(student_dir)
        result: GradeResult | None = None
        if outcome.status == GRADED:
            copy = copies / str(len(rows))
            try:
                keys[student.name] = open_sealed(student_dir, GRADED_DIR, seal_key, copy)
                outcome = load_outcome(copy)  # the outcome as sealed
                result = rescore(copy / GRADED_DIR, rubric, manual.get(student.name))
                junits[student.name] = copy / GRADED_DIR / "junit.xml"
            except Untrusted as exc:
                why = f"the cache was not trusted: {exc}: run the batch again to grade them again"
                rows.append(gradebook_row(student.name, GRADER_ERROR, None, why, [CACHE_UNTRUSTED]))
                continue
            except UserError as exc:
                raise UserError(f"{student.name}: {exc}") from None
            except Exception as exc:
                rows.append(_report_failed(student.name, exc, out, copy))
                continue
        results[student.name] = result
        rows.append(gradebook_row(student.name, outcome.status, result, outcome.message, [outcome.flag]))
    _flag_duplicates([rows[i] for i in row_of.values()], keys)
    for name, result in results.items():
        if result is not None:
            try:
                write_student(result, out / STUDENTS_DIR / name, name, diagram, junits[name])
            except Exception as exc:
                rows[row_of[name]] = _report_failed(name, exc, out, copies / str(row_of[name]))
                results[name] = None
    write_text(out / "gradebook.csv", render_gradebook(rows, task_columns(results.values())))
    write_text(out / "index.html", render_class_report(results, rows, nearest, SIMILARITY_DIR))
    return rows


def write_student(
    result: GradeResult, student_dir: Path, student: str, diagram: Diagram | None, junit: Path | None = None
) -> None:
    """The grade of record's files of one student from their rescored ``result``, beside the cached
    grading (``graded/``): results.json and its renderings, junit.xml and report.html.  The batch's
    and the service's (``grader.service.workers``) alike.  ``junit``: the matrix run as its seal was
    checked (``grader.seal.open_sealed``'s copy), else the cached one."""
    junit = junit or student_dir / GRADED_DIR / "junit.xml"
    # the matrix run rescoring never changes: copied when it is new, not again on every run
    write_outputs(result, student_dir, None if _same_bytes(student_dir / "junit.xml", junit) else junit)
    write_text(student_dir / "report.html", render_student_report(result, student=student, diagram=diagram))


def _report_failed(student: str, exc: Exception, out: Path, copy: Path) -> GradebookRow:
    """The row of a student whose cached grading could not be scored or reported: the reason and the
    path (in the cache, not in its private ``copy``), never the class stopped.  A fault of the machine
    (no space, read-only) is re-raised."""
    if environment_fault(exc, out):
        raise exc
    where = getattr(exc, "filename", None)
    why = f"{where}: {exc}" if where and str(where) not in str(exc) else str(exc)
    again = out / STUDENTS_DIR / student
    why = why.replace(str(copy), str(again))
    message = f"could not be scored or reported ({type(exc).__name__}: {why}): remove {again} and run the batch again"
    return gradebook_row(student, GRADER_ERROR, None, message, [REPORT_FAILED])


def _flag_duplicates(rows: list[GradebookRow], keys: Mapping[str, dict[str, Any] | None]) -> None:
    """Flag students whose graded files are the same as another's (a copy, or a symlink to another's
    folder), by their sealed cache keys: each is graded, as their own, and the instructor is told
    whose files they share."""
    by_digest: dict[str, list[GradebookRow]] = {}
    for row in rows:
        key = keys.get(row.student) if row.status == GRADED else None
        if isinstance(key, dict) and isinstance(key.get("submission"), str):
            by_digest.setdefault(key["submission"], []).append(row)
    for same in by_digest.values():
        for row in same if len(same) > 1 else []:
            note = "the same files as " + ", ".join(other.student for other in same if other is not row)
            row.flags = sorted({*row.flags, DUPLICATE})
            row.message = f"{row.message}\n{note}" if row.message else note


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def main(args: argparse.Namespace) -> int:
    def on_sigterm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        rows = run_batch(
            args.roster,
            args.out,
            jobs=args.jobs,
            cold_hosts=args.cold_hosts,
            backend=args.backend,
            image=args.image,
            rubric=args.rubric,
            manual=args.manual,
            deadline=args.deadline,
            force=args.force,
            timeout=args.timeout,
            trust_commit_time=args.trust_commit_time,
            secret_file=args.secret_file,
            cluster=args.cluster,
            cluster_config=args.cluster_config,
            send_submissions=args.send_submissions,
            similarity=args.similarity,
            boilerplate=args.boilerplate,
            seal_key=args.seal_key,
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
    for row in rows:  # what the batch itself could not take at face value, one line each
        flagged = [f for f in row.flags if f in BATCH_FLAGS]
        if flagged:
            print(f"  {row.student}: {' '.join(flagged)}: {row.message.splitlines()[0] if row.message else ''}")
    print(f"gradebook: {args.out / 'gradebook.csv'}")
    print(f"class report: {args.out / 'index.html'}")
    if args.similarity:
        print(f"similarity: {args.out / SIMILARITY_DIR / 'similarity.html'}")
    return 0
