"""A batch's grades forked by one grade server (``grader.batch.grade_server``) that imported the grader
once, instead of a new ``python -m grader grade`` per student (issue 41).

What this rests on, checked here: the server is told nothing of a grade (its command line and its
environment, salt included, reach the forked child alone), each grade is a process of its own that
leads its session and is ended with everything it started, and a command the server does not run is
started as before.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.batch import run_batch
from grader.batch.grade_server import GRADE_NAME, GradeServer
from grader.batch.workers import TIMEOUT, start_grade, wait_grade
from grader.matrix.host import keep_spare
from grader.matrix.warm import HostServer, ServedProcess
from grader.runtimes.torchdist.zygote import scrubbed_environment
from tests.processes import comm, descendants
from tests.test_spare_host import RUBRIC, TOY
from tests.test_zygote import _memory_holds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the servers fork: Linux only")

REPO = Path(__file__).resolve().parents[1]
GRADER = [sys.executable, "-m", "grader"]


@pytest.fixture(autouse=True)
def no_outer_spare() -> Iterator[None]:
    """The suite keeps a spare host of its own (``tests/conftest.py``): these grades start none."""
    with keep_spare(False):
        yield


@pytest.fixture
def grades() -> Iterator[GradeServer]:
    server = GradeServer.start_here()
    assert server is not None
    yield server
    server.close()


def _grade(grades: GradeServer, tree: Path, out: Path, salt: str, hosts: HostServer | None = None) -> int:
    """One toy grade through ``start_grade``, as the batch starts it: forked by ``grades``."""
    with tempfile.TemporaryFile() as log:
        proc = start_grade(
            [*GRADER, "grade", str(tree), "--rubric", str(RUBRIC), "--out", str(out)], log, salt, hosts, grades
        )
        assert isinstance(proc, ServedProcess) and proc.server is grades  # forked, not a new interpreter
        code = proc.wait(120)
        log.seek(0)
        assert code == 0, log.read().decode(errors="replace")[-2000:]
    return code


def test_a_forked_grade_is_the_grade_a_new_interpreter_gives_and_the_server_keeps_nothing_of_it(
    tmp_path: Path, grades: GradeServer
) -> None:
    marker = f"submission-{os.urandom(8).hex()}"
    tree = tmp_path / "submission"
    shutil.copytree(TOY / "submission", tree)
    with (tree / "ops.py").open("a") as f:
        f.write(f"\nMARKER = {marker!r}\n")
    salts = [f"salt-{os.urandom(8).hex()}" for _ in range(2)]
    hosts = HostServer.start(scrubbed_environment())
    try:
        for i, salt in enumerate(salts):
            _grade(grades, tree, tmp_path / f"forked{i}", salt, hosts)
    finally:
        hosts.close()
    assert not any(_memory_holds(grades.pid, salt.encode()) for salt in salts)
    assert not _memory_holds(grades.pid, marker.encode())
    assert _memory_holds(os.getpid(), salts[0].encode()), "the scan finds a salt where it is"
    with tempfile.TemporaryFile() as log:
        cold = start_grade(
            [*GRADER, "grade", str(tree), "--rubric", str(RUBRIC), "--out", str(tmp_path / "cold")], log, salts[0]
        )
        assert not isinstance(cold, ServedProcess) and cold.wait(120) == 0
    forked, alone = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("forked0", "cold"))
    for result in (forked, alone):
        result.pop("timings")
    assert forked == alone and forked["score"] == 10


def test_a_forked_grade_killed_on_timeout_takes_everything_it_started_with_it(
    grades: GradeServer, tmp_path: Path
) -> None:
    """The batch ends a grade by its process group (``wait_grade``): a forked one leads its own, as
    ``start_new_session`` made a new interpreter's, and its hosts end with its connection."""
    hosts = HostServer.start(scrubbed_environment())
    try:
        with tempfile.TemporaryFile() as log:
            proc = start_grade(
                [*GRADER, "grade", str(REPO / "reference" / "a9"), "--out", str(tmp_path / "out")],
                log,
                None,
                hosts,
                grades,
            )
            assert isinstance(proc, ServedProcess) and os.getpgid(proc.pid) == proc.pid
            deadline = time.monotonic() + 60
            while len(descendants(hosts.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # until its session host and the host's zygote run
            below = descendants(hosts.pid) | {proc.pid}
            assert len(below) > 2, "the grade had started its session"
            assert wait_grade(proc, 0.1).status == TIMEOUT
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in below if _alive(pid)]
        assert grades.alive() and hosts.alive()  # both serve on
    finally:
        hosts.close()


def test_a_command_the_server_does_not_run_starts_as_before(grades: GradeServer, tmp_path: Path) -> None:
    """Only this Python's ``-m grader`` is forked (the tests' fake grader, another interpreter on a
    cluster's worker are started as they are), and a server that died forks nothing."""
    with tempfile.TemporaryFile() as log:
        other = start_grade([sys.executable, "-c", "print('fake')"], log, None, None, grades)
        assert not isinstance(other, ServedProcess) and other.wait(30) == 0
        os.kill(grades.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while grades.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        cmd = [*GRADER, "grade", str(TOY / "submission"), "--rubric", str(RUBRIC), "--out", str(tmp_path / "out")]
        cold = start_grade(cmd, log, None, None, grades)
        assert not isinstance(cold, ServedProcess) and cold.wait(120) == 0


def test_a_batch_forks_every_grade_from_its_grade_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forked: list[object] = []
    grade = GradeServer.grade

    def recorded(self: GradeServer, *args: object, **kwargs: object) -> ServedProcess | None:
        proc = grade(self, *args, **kwargs)
        forked.append(proc)
        return proc

    monkeypatch.setattr(GradeServer, "grade", recorded)
    roster = tmp_path / "roster"
    for name in ("ann", "ben"):
        shutil.copytree(TOY / "submission", roster / name)
    rows = run_batch(roster, tmp_path / "out", rubric=RUBRIC, jobs=2, progress=io.StringIO())
    assert [(row.student, row.status, row.total) for row in rows] == [("ann", "graded", 10.0), ("ben", "graded", 10.0)]
    assert len(forked) == 2 and all(isinstance(proc, ServedProcess) for proc in forked)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def said(rows: list, out: Path) -> list[str]:
    """Each ungraded student's message and the end of their grade log: what a failed batch shows."""
    logs = {row.student: out / "students" / row.student / "graded" / "grade.log" for row in rows}
    return [
        f"{row.student}: {row.status}: {row.message}\n"
        + (logs[row.student].read_text()[-2000:] if logs[row.student].is_file() else "")
        for row in rows
        if row.status != "graded"
    ]


def test_a_grade_server_that_dies_under_a_grade_costs_that_student_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forked grade dies with its server (PDEATHSIG): that student is graded again from nothing, by a
    server started in the dead one's place, and the batch goes on warm."""
    import threading

    from grader.matrix.warm import KeptServer

    kept: list[KeptServer[GradeServer]] = []

    class Recorded(KeptServer[GradeServer]):
        def __init__(self, start: object) -> None:
            super().__init__(start)  # type: ignore[arg-type]
            if start == GradeServer.start_here:
                kept.append(self)

    def kill_once_it_grades(stop: threading.Event) -> None:
        while not stop.is_set():
            server = kept[0].live() if kept else None
            if server is not None and any(comm(pid) == GRADE_NAME for pid in descendants(server.pid)):
                os.kill(server.pid, signal.SIGKILL)
                return
            time.sleep(0.01)

    monkeypatch.setattr("grader.matrix.warm.KeptServer", Recorded)
    roster = tmp_path / "roster"
    for name in ("ann", "ben"):
        shutil.copytree(TOY / "submission", roster / name)
    stop = threading.Event()
    killer = threading.Thread(target=kill_once_it_grades, args=(stop,))
    killer.start()
    try:
        rows = run_batch(roster, tmp_path / "out", rubric=RUBRIC, jobs=1, progress=io.StringIO())
    finally:
        stop.set()
        killer.join()
    graded = [(row.student, row.status, row.total) for row in rows]
    assert graded == [("ann", "graded", 10.0), ("ben", "graded", 10.0)], said(rows, tmp_path / "out")
    assert kept[0].started == 2  # the one killed under ann's grade, and the one that graded her and ben
