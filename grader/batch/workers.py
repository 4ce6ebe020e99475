"""Grading the students who need it: one ``python -m grader grade`` process each, ``--jobs`` at a time.

Each student is graded by a separate process in its own session, so a broken or hostile submission
(or a grader crash on it) costs that student a row with a status, never the batch.  A grade lands in
a temporary directory renamed into place only once complete, so an interrupted run never leaves a
mix of old and new files; a timed-out grade's whole process group is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

from grader.batch.cache import cached, read_json, submission_key
from grader.batch.roster import Student
from grader.errors import UserError, environment_fault
from grader.gradebook import CACHE_UNTRUSTED, EMPTY, GRADED, GRADER_ERROR, NO_SUBMISSION, TIMEOUT, UNREADABLE
from grader.matrix.host import lend_server
from grader.matrix.warm import died_with_server
from grader.render.outputs import write_text
from grader.results import GradeResult, TimeSource
from grader.rubric import Rubric
from grader.salt import SALT_ENV
from grader.sandbox.parent import DIE_WITH_PARENT_ENV
from grader.sandbox.shares import JOBS_ENV
from grader.seal import GRADED_DIR, KEY_FILE, OUTCOME_FILE, seal

if TYPE_CHECKING:
    from grader.batch.grade_server import GradeServer
    from grader.matrix.host import HostProcess
    from grader.matrix.warm import HostServer, KeptServer

KILL_GRACE_S = 10.0  # between SIGINT and SIGKILL when a grade is ended
GRADE_ATTEMPTS = 2  # starts of one student's grade: a grade server that dies under one costs one
LOG_TAIL = 2000  # characters of grade.log quoted as the message of a failed grade


class BatchStop(UserError):
    """The batch cannot go on for anybody (a cluster whose workers cannot grade): it stops, with this."""


@dataclass
class Outcome:
    """What grading one student produced, as recorded in ``batch-outcome.json``."""

    status: str
    message: str = ""
    returncode: int | None = None
    seconds: float = 0.0
    flag: str = ""  # a gradebook flag: why there is nothing to grade, or why the cache was not trusted


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


class Grader:
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
        rubric_file: Path | None = None,
        salt: str | None = None,
        seal_key: bytes = b"",
    ):
        self.students_dir = students_dir
        self.rubric = rubric
        self.command = command  # up to and including `grade`
        self.options = options  # --backend, --trust-commit-time: the same for every student
        self.timeout = timeout
        self.force = force
        self.trust_commit_time = trust_commit_time  # passed in options too; the cache key needs it
        self.rubric_file = rubric_file  # --rubric, kept apart: a cluster without shared files is sent its text
        self.salt = salt  # --secret-file's salt: given to each grade in its environment, never its argv
        self.seal_key = seal_key  # the instructor's HMAC key for the cache (grader.seal)
        self.hosts: KeptServer[HostServer] | None = None  # each grade's session hosts are forked from it (warm)
        self.grades: KeptServer[GradeServer] | None = None  # and each grade itself (warm)
        self.jobs = 1  # gradings side by side (grade_all): each grading's memory group is its part of the machine
        self._running: dict[int, HostProcess] = {}
        self._lock = threading.Lock()
        self._stopping = False

    def process(self, student: Student) -> tuple[str, bool]:
        """(status to report, whether a grade ran): no submission, cached, or graded now."""
        try:
            return self._process(student)
        except BatchStop:
            raise
        except Exception as exc:  # the batch's own failure on one student is that student's row ...
            if environment_fault(exc, self.students_dir.parent):  # ... but a full disk is everybody's
                raise
            record(self.students_dir / student.name, Outcome(GRADER_ERROR, f"grader batch: {exc!r}"))
            return GRADER_ERROR, False

    def _process(self, student: Student) -> tuple[str, bool]:
        final = self.students_dir / student.name
        key, why, flag = submission_key(student, self.rubric, self.students_dir, self.trust_commit_time)
        if key is None:
            status = NO_SUBMISSION if flag == EMPTY else UNREADABLE
            record(final, Outcome(status, why, flag=flag))
            return status, False
        trusted, untrusted = cached(final, GRADED_DIR, key, self.seal_key)
        if trusted and not self.force:
            return "cached", False
        outcome = self.grade(student, key, untrusted)
        return outcome.status + (f" again ({untrusted})" if untrusted else ""), True

    def grade(self, student: Student, key: dict[str, Any], untrusted: str = "") -> Outcome:
        """Grade ``student`` into place and seal it; ``untrusted`` says what was wrong with the cache."""
        tmp = self.students_dir / f".tmp-{student.name}-{uuid.uuid4().hex}"
        graded = tmp / GRADED_DIR
        graded.mkdir(parents=True)
        start = time.monotonic()
        outcome = self.run(student, graded)
        outcome.seconds = outcome.seconds or round(time.monotonic() - start, 3)  # a worker's own count wins
        if outcome.status == GRADED:
            outcome = _classify(graded, outcome)
        if outcome.status != GRADED and not outcome.message:
            outcome.message = _tail(graded / "grade.log")
        if untrusted:
            outcome.flag = CACHE_UNTRUSTED
            outcome.message = f"graded again: the cache was not trusted: {untrusted}" + (
                f"\n{outcome.message}" if outcome.message else ""
            )
        write_text(tmp / OUTCOME_FILE, json.dumps(vars(outcome), indent=2) + "\n")
        if outcome.status == GRADED:
            write_text(graded / KEY_FILE, json.dumps(key, indent=2) + "\n")
        seal(tmp, GRADED_DIR, self.seal_key, student.name)
        _install_dir(tmp, self.students_dir / student.name)
        return outcome

    def run(self, student: Student, graded: Path) -> Outcome:
        """Run `grader grade` on one student into ``graded`` (its output and ``grade.log``), here.
        ``grader.batch.cluster`` runs it on a Dask worker instead."""
        log_path = graded.parent.with_name(graded.parent.name + ".log")
        options = [*self.options, *(["--rubric", str(self.rubric_file)] if self.rubric_file else [])]
        cmd = grade_argv(self.command, student.source, graded, options, student.submitted_at)
        for attempt in range(1, GRADE_ATTEMPTS + 1):
            with log_path.open("wb") as log, self._lock:
                if self._stopping:
                    raise KeyboardInterrupt
                proc = start_grade(cmd, log, self.salt, _live(self.hosts), _live(self.grades), jobs=self.jobs)
                self._running[proc.pid] = proc
            try:
                outcome = wait_grade(proc, self.timeout)
            finally:
                with self._lock:
                    self._running.pop(proc.pid, None)
            if not died_with_server(proc) or attempt == GRADE_ATTEMPTS or self._stopping:
                break
            # its grade server died under it, and the grade with it: graded again from nothing
            shutil.rmtree(graded)
            graded.mkdir()
        os.replace(log_path, graded / "grade.log")
        if self._stopping:  # killed by stop(): leave nothing behind that looks like a verdict
            raise KeyboardInterrupt
        return outcome

    def stop(self) -> None:
        """Kill every grade in flight (Ctrl-C, SIGTERM) and refuse new ones."""
        with self._lock:
            self._stopping = True
            running = list(self._running.values())
        for proc in running:
            _kill_group(proc)


def grade_argv(command: list[str], source: str, out: Path, options: list[str], submitted_at: str | None) -> list[str]:
    """The `grader grade` command line for one student: the same on this machine and on a worker."""
    cmd = [*command, source, "--out", str(out), *options]
    if submitted_at:
        cmd += ["--submitted-at", submitted_at, "--submitted-at-source", TimeSource.ROSTER.value]
    return cmd


def start_grade(
    cmd: list[str],
    log: IO[bytes],
    salt: str | None,
    hosts: HostServer | None = None,
    grades: GradeServer | None = None,
    *,
    jobs: int = 1,
) -> HostProcess:
    """Start a grade in a session of its own, so that on timeout the whole group (ranks, pytest,
    docker client) dies; it dies with this process too.  The salt travels in the environment, which
    no other user can read, never on the command line.  ``hosts``: the grade forks its session hosts
    from this server, over a connection of its own, whose end ends them too.  ``grades``: the grade is
    forked by this server (``grade_server``) rather than started as a new interpreter, where it can be.
    ``jobs``: how many grades run side by side here, which share the machine's memory (``shares.JOBS_ENV``)."""
    env = {**os.environ, DIE_WITH_PARENT_ENV: str(os.getpid()), JOBS_ENV: str(jobs)}
    if salt:
        env[SALT_ENV] = salt
    with lend_server(hosts) as (lent, fds):
        forked = grades.grade(cmd, {**env, **lent}, log, fds) if grades is not None else None
        if forked is not None:
            return forked
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**env, **lent},
            pass_fds=fds,
        )


@contextlib.contextmanager
def warm(grader: Grader, enabled: bool) -> Iterator[None]:
    """While the block runs, ``grader``'s grades are forked by a grade server (``grade_server``: the
    grader imported once) and fork their session hosts from a host server (``grader.matrix.warm``: torch
    imported once), not once per student; a server that dies is started again for the next grade.
    ``enabled`` where they grade with the real grader here (the servers run on Linux only)."""
    from grader.batch.grade_server import GradeServer
    from grader.matrix.warm import HostServer, KeptServer

    if not enabled:
        yield
        return
    grader.hosts = KeptServer(HostServer.start_here)
    try:
        grader.grades = KeptServer(GradeServer.start_here)
        yield
    finally:
        for kept in (grader.grades, grader.hosts):
            if kept is not None:
                kept.close()
        grader.hosts = grader.grades = None


def _live(kept: KeptServer[Any] | None) -> Any:
    return kept.live() if kept is not None else None


def wait_grade(proc: HostProcess, timeout: float) -> Outcome:
    """Wait for a grade up to ``timeout``; its process group is ended whatever happens."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(TIMEOUT, f"no result after {timeout:g} s: killed")
    finally:
        _kill_group(proc)  # on timeout, and leftovers of a finished grade must not outlive it
    return Outcome(GRADED, returncode=proc.returncode)


def _kill_group(proc: HostProcess) -> None:
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
    data = read_json(out / "results.json")
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


def record(final: Path, outcome: Outcome) -> None:
    """Record an outcome that needed no grade, replacing whatever an older run left for the student."""
    if read_json(final / OUTCOME_FILE) == vars(outcome) and not (final / GRADED_DIR).exists():
        return
    tmp = final.with_name(f".tmp-{final.name}-{uuid.uuid4().hex}")
    tmp.mkdir()
    write_text(tmp / OUTCOME_FILE, json.dumps(vars(outcome), indent=2) + "\n")
    _install_dir(tmp, final)


def load_outcome(student_dir: Path) -> Outcome:
    """The outcome recorded for a student; a missing or damaged one is an error row that says so."""
    path = student_dir / OUTCOME_FILE
    data = read_json(path)
    try:
        return Outcome(**data)
    except TypeError:
        return Outcome(GRADER_ERROR, f"{path}: no outcome recorded, or a damaged one: run the batch again")


def grade_all(students: list[Student], grader: Grader, jobs: int, stream: TextIO) -> None:
    progress = Progress(len(students), stream)
    grader.jobs = jobs
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
