"""Grading a class on a Dask cluster: ``grader batch ROSTER --out DIR --cluster SPEC``.

Dask is only the scheduler.  A task grades one student by running, on a worker, the very
``grader grade`` command the local path runs (``grader.batch.workers``: same arguments, own session,
same timeout, whole group killed), so a hostile submission still costs only its own row.  With
``--similarity`` the same task then fingerprints the student on that worker, from the worker's copy of
the submission (``grader.similarity.remote``: what is never evidence travels in the task as text, the
fingerprint comes back beside the grade's output).  Everything else stays on the client, the process
that owns DIR: cache keys, the decision to grade, unpacking the returned ``grader grade --out``
directory into a temporary directory renamed into place, scoring, and the copy check's index and pairs
(and the fingerprints of students no task graded in this run).  So cache, resume and rescoring are
exactly today's.

Submissions reach a worker by their path (a shared filesystem, as on a Slurm cluster) or, with
``send=True``, as a tar sent through Dask; the output always comes back as a tar.  The secret salt
travels inside the task, never on a command line, in a job script or a log, and the worker hands it
to the grade in its environment (``workers.start_grade``).  Each worker keeps warm servers
(``warm_workers``) that fork its grades and their session hosts, as a local batch's do.

A worker lost while grading (preemption, walltime, a dead node) makes Dask run the task again on
another worker; after ``MAX_LOSSES`` losses of the same student the row is a ``grader_error`` that
says so.  A worker that cannot import torch or the grader (or, with ``--similarity``, copydetect) stops
the batch with that message.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from grader import tempdirs
from grader.batch.roster import Student
from grader.batch.workers import BatchStop, Grader, Outcome, grade_argv, start_grade, wait_grade
from grader.errors import UserError
from grader.gradebook import GRADER_ERROR
from grader.matrix.warm import died_with_server

if TYPE_CHECKING:  # imported where used: the copy check is an optional extra (copydetect)
    from grader.similarity.check import Fingerprinted
    from grader.similarity.remote import SimilarityTask

MAX_LOSSES = 3  # times a student's worker may die under it before the row is a grader_error
MAX_IN_FLIGHT = 1024  # students submitted at once (a client thread each): more than a 20-node cluster runs
DASHBOARD = ":0"  # the dashboard on a free port: other batches may run beside this one
WORKER_CHECK = "import torch, grader"  # what a worker's Python must import before it grades anybody
SIMILARITY_CHECK = ", copydetect.utils"  # ... and, to fingerprint them too (--similarity), the copy check's extra
# How a grade ends when something outside the batch stops it: the grader's own exit on SIGTERM/SIGINT,
# or death by either.  Slurm's scancel, preemption and walltime signal every process of the job at once.
STOPPED_FROM_OUTSIDE = (130, -signal.SIGTERM, -signal.SIGINT)


@dataclass(frozen=True)
class ClusterSpec:
    """Where ``--cluster`` says the gradings run."""

    kind: str  # "local" (a LocalCluster), "scheduler" (an existing one) or "slurm"
    workers: int = 2  # LocalCluster worker processes
    address: str = ""  # an existing scheduler's

    @property
    def machine_jobs(self) -> int:
        """Gradings at once on one worker's machine, which each grade's memory share divides by
        (``ClusterGrader.machine_jobs``): a local cluster's workers all share this one; elsewhere 1,
        as nothing here knows how many of a node's workers grade beside each other."""
        return self.workers if self.kind == "local" else 1


def parse_cluster(spec: str) -> ClusterSpec:
    """``local[:N]``, ``tcp://HOST:PORT`` (or ``dask://HOST:PORT``, ``tls://...``) or ``slurm``."""
    if spec == "local" or spec.startswith("local:"):
        count = spec.partition(":")[2] or "2"
        if not count.isdigit() or int(count) < 1:
            raise UserError(f"--cluster {spec}: local:N takes a positive number of worker processes")
        return ClusterSpec("local", workers=int(count))
    if spec.startswith(("tcp://", "tls://")):
        return ClusterSpec("scheduler", address=spec)
    if spec.startswith("dask://"):
        return ClusterSpec("scheduler", address="tcp://" + spec.removeprefix("dask://"))
    if spec == "slurm":
        return ClusterSpec("slurm")
    raise UserError(f"--cluster {spec}: expected local[:N], tcp://HOST:PORT, dask://HOST:PORT or slurm")


# ----------------------------------------------------------------------------------------------
# On the worker


@dataclass(frozen=True)
class GradeTask:
    """What a worker needs to grade one student: the arguments the local path would use."""

    command: list[str] | None  # up to `grade`; None: the worker's own `python -m grader grade`
    source: str  # a path on the shared filesystem, a git URL, or the name `payload` unpacks to
    options: list[str]
    submitted_at: str | None
    timeout: float
    payload: bytes | None = field(default=None, repr=False)  # the submission as a tar, when sent
    rubric_text: str | None = field(default=None, repr=False)  # --rubric's text, when sent
    salt: str | None = field(default=None, repr=False)  # never in a repr, so never in a log
    similarity: SimilarityTask | None = None  # with --similarity: fingerprint the student here too
    warm: bool = False  # fork the grade and its hosts from the worker's servers, where it has them (warm_workers)
    jobs: int = 1  # gradings side by side on the worker's machine (a local cluster's workers): its memory share


@dataclass(frozen=True)
class GradeReply:
    """A task's answer: the grade's outcome and its output directory as a tar, or why this worker
    cannot grade anybody (an answer, not an exception: Dask would log it once per student)."""

    outcome: dict[str, Any] = field(default_factory=dict)
    output: bytes = field(default=b"", repr=False)
    unfit: str = ""
    lost: str = ""  # the grade was stopped from outside: this worker is going down (scancel, preemption)
    fingerprint: bytes = field(default=b"", repr=False)  # with --similarity: ``grader.similarity.remote``'s


_fitness: dict[str, str] = {}  # per worker process and check: "" when fit, else why not
_fitness_lock = threading.Lock()


def _unfit(check: str) -> str:
    """Once per worker process: can its Python import what every grade imports?  Checked in a child,
    as the grades will run, and so the worker itself never holds torch."""
    with _fitness_lock:
        if check not in _fitness:
            done = subprocess.run(
                [sys.executable, "-c", check], capture_output=True, text=True, timeout=600, check=False
            )
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            _fitness[check] = (
                ""
                if done.returncode == 0
                else f"worker {socket.gethostname()} ({sys.executable}) cannot `{check}`: {last}"
            )
    return _fitness[check]


def grade_on_worker(task: GradeTask) -> GradeReply:
    """Run one student's `grader grade` here; return its outcome and its output directory as a tar, and
    with ``task.similarity`` the student's fingerprint (``grader.similarity.remote``)."""
    unfit = _unfit(WORKER_CHECK + (SIMILARITY_CHECK if task.similarity else ""))
    if unfit:
        return GradeReply(unfit=unfit)
    # In the worker's own directory, which Dask removes even when the worker is killed mid-grade.
    with tempfile.TemporaryDirectory(prefix="grader-task-", dir=_worker_directory()) as tmp:
        work = Path(tmp)
        source, options = task.source, list(task.options)
        if task.payload is not None:
            _untar(task.payload, work / "submission", "tar")
            source = str(work / "submission" / task.source)
        if task.rubric_text is not None:
            rubric = work / "rubric.yaml"
            rubric.write_text(task.rubric_text, encoding="utf-8")
            options += ["--rubric", str(rubric)]
        graded = work / "graded"
        graded.mkdir()
        command = task.command or [sys.executable, "-m", "grader", "grade"]
        cmd = grade_argv(command, source, graded, options, task.submitted_at)
        start = time.monotonic()
        hosts = grades = None
        if task.warm:
            from grader.batch.warm_workers import worker_servers

            hosts, grades = worker_servers()
        with (work / "grade.log").open("wb") as log:
            proc = start_grade(cmd, log, task.salt, hosts, grades, jobs=task.jobs)
        outcome = wait_grade(proc, task.timeout)
        outcome.seconds = round(time.monotonic() - start, 3)  # the grade's, not its wait in Dask's queue
        # not the student's doing (stopped from outside, or its grade server died under it): graded again
        if outcome.returncode in STOPPED_FROM_OUTSIDE or died_with_server(proc):
            return GradeReply(lost=f"the grade on {socket.gethostname()} was stopped (exit {outcome.returncode})")
        os.replace(work / "grade.log", graded / "grade.log")
        found = b""
        if task.similarity is not None:  # from the worker's own copy of the submission, as the grade took it
            from grader.similarity.remote import fingerprint_here

            found = fingerprint_here(task.similarity, source)
        return GradeReply(vars(outcome), _tar(graded, "."), fingerprint=found)


def _worker_directory() -> str | None:
    from distributed import get_worker

    try:
        return str(get_worker().local_directory)
    except ValueError:  # not on a worker (called directly)
        return None


def _tar(path: Path, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(path, arcname=name)  # symlinks stay links: intake judges them as it would locally
    return buffer.getvalue()


def _untar(data: bytes, dest: Path, extraction: str) -> None:
    """Unpack a tar under ``dest`` and nowhere else (tarfile's extraction filters)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter=extraction)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# On the client


class ClusterGrader(Grader):
    """A ``Grader`` whose grades run as Dask tasks; the rest (cache, outcome, install) is inherited.
    With ``similarity``, each task fingerprints its student too, into ``fingerprinted``."""

    def __init__(
        self,
        *args: Any,
        client: Any,
        send: bool,
        similarity: SimilarityTask | None = None,
        warm: bool = False,
        machine_jobs: int = 1,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.machine_jobs = machine_jobs  # gradings at once on one worker machine (shares.JOBS_ENV); 1: unknown
        self.client = client
        self.send = send
        self.warm = warm  # the client was connected with warm workers (connect)
        self.similarity = similarity
        self.fingerprinted: dict[str, Fingerprinted] = {}  # per student graded in this run
        self._futures: set[Any] = set()
        self._rubric_text = self.rubric_file.read_text(encoding="utf-8") if send and self.rubric_file else None

    def _task(self, student: Student) -> GradeTask:
        local_command = None if self.command == [sys.executable, "-m", "grader", "grade"] else self.command
        source, payload, rubric_options = student.source, None, []
        if self.send and Path(source).exists():
            source, payload = Path(source).name, _tar(Path(source), Path(source).name)
        if self.rubric_file and not self.send:
            rubric_options = ["--rubric", str(self.rubric_file)]
        return GradeTask(
            command=local_command,
            source=source,
            options=[*self.options, *rubric_options],
            submitted_at=student.submitted_at,
            timeout=self.timeout,
            payload=payload,
            rubric_text=self._rubric_text,
            salt=self.salt,
            similarity=replace(self.similarity, student=student.name) if self.similarity else None,
            warm=self.warm,
            jobs=self.machine_jobs,
        )

    def run(self, student: Student, graded: Path) -> Outcome:
        """Grade on the cluster until a worker finishes the grade; each worker lost under it costs a try."""
        from distributed import KilledWorker

        lost = ""
        for _ in range(MAX_LOSSES + 1):
            try:
                reply = self._submit(student)
            except KilledWorker as exc:  # Dask ran it on MAX_LOSSES + 1 workers that died under it
                lost = f"last on {exc.last_worker}"
                break
            if not reply.lost:
                if self.similarity is not None:
                    from grader.similarity.remote import decode

                    found = decode(reply.fingerprint)
                    with self._lock:
                        self.fingerprinted[student.name] = found
                _untar(reply.output, graded, "data")  # the grader's output: plain files, nothing else
                return Outcome(**reply.outcome)
            lost = reply.lost
        why = f"its worker was lost {MAX_LOSSES + 1} times while grading it ({lost})"
        (graded / "grade.log").write_text(why + "\n", encoding="utf-8")
        return Outcome(GRADER_ERROR, why)

    def _submit(self, student: Student) -> GradeReply:
        future = self.client.submit(grade_on_worker, self._task(student), key=f"grade-{uuid.uuid4().hex}", pure=False)
        with self._lock:
            self._futures.add(future)
            stopping = self._stopping
        if stopping:
            future.cancel()
            raise KeyboardInterrupt
        try:
            reply: GradeReply = future.result()
        except ImportError as exc:  # the worker could not even load this module
            raise BatchStop(f"the cluster cannot grade: a worker cannot import the grader: {exc}") from None
        except Exception:
            if self._stopping:  # cancelled by stop(): leave nothing behind that looks like a verdict
                raise KeyboardInterrupt from None
            raise
        finally:
            with self._lock:
                self._futures.discard(future)
        if reply.unfit:
            raise BatchStop(f"the cluster cannot grade: {reply.unfit}")
        return reply

    def stop(self) -> None:
        super().stop()
        with self._lock:
            futures = list(self._futures)
        for future in futures:
            future.cancel()


@contextlib.contextmanager
def connect(
    spec: ClusterSpec, config: Path | None, students: int, progress: TextIO, warm: bool = False
) -> Iterator[Any]:
    """A Dask client on the cluster ``spec`` says, closed (and any cluster it started) on exit.  ``warm``:
    every worker keeps warm servers for its grades while the client is open (``warm_workers``)."""
    try:
        import dask
        import distributed
    except ImportError:
        raise UserError(f'--cluster {spec.kind} needs Dask: pip install "dist-grader[cluster]"') from None

    settings: dict[str, object] = {"distributed.scheduler.allowed-failures": MAX_LOSSES}
    with contextlib.ExitStack() as stack:
        if spec.kind == "local":
            # The scheduler's and workers' directories in one of ours, removed after the cluster (Dask's
            # default, /tmp/dask-scratch-space, outlives every run), and locked while this process lives:
            # after a kill -9 of the batch or the service, the next grading's sweep removes it.
            scratch, lock = tempdirs.make("grader-dask-")
            stack.callback(lock.close)
            stack.callback(shutil.rmtree, scratch, ignore_errors=True)
            settings["temporary-directory"] = str(scratch)
        stack.enter_context(dask.config.set(settings))
        if spec.kind == "local":
            cluster = distributed.LocalCluster(
                n_workers=spec.workers,
                threads_per_worker=1,  # one grade at a time per worker process, as --jobs
                processes=True,
                dashboard_address=DASHBOARD,
                silence_logs=40,
            )
            stack.enter_context(cluster)
            client = stack.enter_context(distributed.Client(cluster))
        elif spec.kind == "scheduler":
            try:
                client = stack.enter_context(distributed.Client(spec.address, timeout=30))
            except OSError as exc:
                raise UserError(f"--cluster {spec.address}: no Dask scheduler answers ({exc})") from None
        else:
            cluster = stack.enter_context(_slurm_cluster(config, students))
            client = stack.enter_context(distributed.Client(cluster))
        if warm:
            _warm_workers(client, stack)
        if _has_dashboard() and client.dashboard_link:
            progress.write(f"dashboard: {client.dashboard_link}\n")
            progress.flush()
        yield client


def _warm_workers(client: Any, stack: contextlib.ExitStack) -> None:
    """Register :class:`~grader.batch.warm_workers.WarmHosts` until ``stack`` closes.  A worker that cannot
    load it grades cold; one that cannot import the grader at all stops the batch at its first task
    with that message (``WORKER_CHECK``), so a failure here stops nothing."""
    from grader.batch.warm_workers import NAME, WarmHosts

    try:
        client.register_plugin(WarmHosts())
    except Exception:  # see above: the grades run cold, and an unfit worker says so later
        return

    def unregister() -> None:
        with contextlib.suppress(Exception):  # a cluster already gone takes its servers with it
            client.unregister_worker_plugin(NAME)

    stack.callback(unregister)


@contextlib.contextmanager
def _slurm_cluster(config: Path | None, students: int) -> Iterator[Any]:
    """A ``dask_jobqueue.SLURMCluster`` from ``--cluster-config`` (its keyword arguments as YAML, plus
    ``max_jobs``) or dask-jobqueue's own configuration, scaled to the work left."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise UserError('--cluster slurm needs dask-jobqueue: pip install "dist-grader[cluster]"') from None
    options: dict[str, Any] = {}
    if config is not None:
        try:
            options = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UserError(f"--cluster-config {config}: {exc}") from None
        if not isinstance(options, dict):
            raise UserError(f"--cluster-config {config}: expected a mapping of SLURMCluster options")
    max_jobs = options.pop("max_jobs", None)
    options.setdefault("scheduler_options", {"dashboard_address": DASHBOARD})
    try:
        cluster = SLURMCluster(**options)
    except (TypeError, ValueError) as exc:
        raise UserError(f"--cluster slurm: {exc} (see docs/instructors/cluster.md)") from None
    with cluster:
        per_job = max(1, int(getattr(cluster, "_job_kwargs", {}).get("processes") or 1))
        cluster.adapt(minimum_jobs=0, maximum_jobs=max_jobs or math.ceil(students / per_job))
        yield cluster


def _has_dashboard() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None
