"""Hosts forked from one warm server (``grader.matrix.warm``): a process that grades one tree after
another (``keep_spare``: a test session, a watch loop) imports torch once, in its host server, and
each grading gets a host of its own forked from it.

What isolation between gradings rests on, checked here rather than assumed: the server never holds a
grading's salt or submission (it is sent two file descriptors and nothing else), every grading has a
host of its own, and a server that dies is replaced without costing a grade.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from grader.matrix.host import Host, keep_spare
from grader.matrix.warm import HostServer
from grader.pipeline import grade
from grader.runtimes.torchdist.zygote import scrubbed_environment
from grader.salt import SALT_ENV
from tests.processes import cases_decided, descendants, listdir
from tests.test_spare_host import RUBRIC, TOY, no_outer_spare, pytestmark
from tests.test_zygote import _memory_holds

__all__ = ["no_outer_spare", "pytestmark"]  # each test starts from no spare and no server; Linux only


def _servers() -> list[int]:
    """This process's host servers: children started as ``grader.matrix.host --serve`` (the hosts they
    fork have the same command line, one generation down)."""
    found = []
    for pid in descendants(os.getpid()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"grader.matrix.host" in argv and b"--serve" in argv and _parent(pid) == os.getpid():
                found.append(pid)
        except OSError:
            continue
    return found


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_server_never_holds_a_gradings_salt_or_submission(tmp_path: Path, started: list[Host]) -> None:
    secret = f"salt-{os.urandom(8).hex()}"
    marker = f"submission-{os.urandom(8).hex()}"
    submission = tmp_path / "submission"
    shutil.copytree(TOY / "submission", submission)
    with (submission / "ops.py").open("a") as f:
        f.write(f"\nMARKER = {marker!r}\n")
    with keep_spare(), pytest.MonkeyPatch.context() as mp:
        mp.setenv(SALT_ENV, secret)
        first = grade(submission, RUBRIC)
        second = grade(submission, RUBRIC)
        (server,) = _servers()
        assert _memory_holds(os.getpid(), secret.encode()), "the scan finds the salt where it is"
        assert not _memory_holds(server, secret.encode())
        assert not _memory_holds(server, marker.encode())
        spare = started[-1]  # forked for the next grading, told at most the pack
        assert spare.proc.poll() is None and _parent(spare.proc.pid) == server
        assert not _memory_holds(spare.proc.pid, secret.encode())
        assert not _memory_holds(spare.proc.pid, marker.encode())
    assert first.score == second.score > 0


def test_every_grading_has_a_host_of_its_own_forked_by_the_one_server(started: list[Host], taken: list[Host]) -> None:
    with keep_spare():
        scores = [grade(TOY / tree, RUBRIC).score for tree in ("submission", "wrong", "submission")]
        (server,) = _servers()
        pids = [host.proc.pid for host in taken]
        assert len(set(pids)) == 3 and server not in pids
        assert all(host.parent == server for host in started)  # each dies with the server (PDEATHSIG)
        assert all(host.proc.returncode is not None for host in taken)  # and each ended with its grading
    assert scores[0] == scores[2] > scores[1]
    assert not _servers()  # the block's end took the server and its spare


def test_a_dead_server_is_replaced_and_costs_no_grade(started: list[Host]) -> None:
    alone = grade(TOY / "submission", RUBRIC).score
    with keep_spare():
        grade(TOY / "submission", RUBRIC)
        (server,) = _servers()
        os.kill(server, signal.SIGKILL)  # its spare host dies with it
        deadline = time.monotonic() + 10
        while server in _servers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert grade(TOY / "submission", RUBRIC).score == alone
        (replacement,) = _servers()
        assert replacement != server


def test_a_server_that_stops_answering_is_ended_and_its_gradings_start_cold(
    started: list[Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung server (SIGSTOP: it reads no request, not even a hang-up) would hang every grading that asks
    it for a host.  The one that asks waits ``warm.FORK_REPLY_S``, kills it and starts cold; the next
    grading forks from a new server (which may take its time to start: the limit is the real one again)."""
    from grader.matrix import warm

    alone = grade(TOY / "submission", RUBRIC).score
    with keep_spare():
        grade(TOY / "submission", RUBRIC)
        (server,) = _servers()
        real = warm.FORK_REPLY_S
        monkeypatch.setattr(warm, "FORK_REPLY_S", 1.0)  # the server has started: it answers in milliseconds
        os.kill(server, signal.SIGSTOP)
        before = len(started)
        hung = grade(TOY / "submission", RUBRIC)  # takes the spare; the next one's fork finds the server hung
        assert not _running(server)
        assert started[before].parent == os.getpid()  # that next spare was started cold
        # The spare taken was the hung server's child and died with it.  Whether its replacement is cold
        # too or forked by a new server depends on whether the kill's end was read yet: either is right.
        assert server not in {host.parent for host in started[before:]}
        monkeypatch.setattr(warm, "FORK_REPLY_S", real)
        assert grade(TOY / "submission", RUBRIC).score == hung.score == alone
        (replacement,) = _servers()
        assert replacement != server
        assert started[-1].parent == replacement


CHILD = """
import sys, time
from grader.matrix.host import Host, attach_server
attach_server()
host = Host.start()
print(host.proc.pid, host.parent, flush=True)
time.sleep(120)
"""


def test_a_host_forked_for_another_process_ends_when_that_process_dies() -> None:
    """``grader batch`` hands each of its grades a connection to its server: a grade killed on timeout
    (its process group, which its hosts are not in) must not leave its hosts running."""
    from grader.matrix.host import lend_server

    server = HostServer.start(scrubbed_environment())
    try:
        with lend_server(server) as (lent, fds):
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD], env={**os.environ, **lent}, pass_fds=fds, stdout=subprocess.PIPE
            )
        assert child.stdout is not None
        host, parent = map(int, child.stdout.readline().split())
        assert parent == server.pid and _parent(host) == server.pid  # forked by the server, not started cold
        child.kill()
        child.wait()
        deadline = time.monotonic() + 10
        while _running(host) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(host)
        assert server.alive()  # the server serves on
    finally:
        server.close()


def test_a_process_whose_hosts_would_start_otherwise_does_not_fork_them_from_the_server() -> None:
    """A grade handed a server under another ``PATH`` than the server's hosts start with (its hosts'
    only variable part) starts its host cold, with its own ``PATH``, rather than take one that runs
    programs from another ``PATH``."""
    from grader.matrix.host import lend_server

    server = HostServer.start(scrubbed_environment())
    try:
        parents = {}
        for path in (os.environ["PATH"], f"{os.environ['PATH']}:/nonexistent"):
            with lend_server(server) as (lent, fds):
                child = subprocess.Popen(
                    [sys.executable, "-c", CHILD],
                    env={**os.environ, **lent, "PATH": path},
                    pass_fds=fds,
                    stdout=subprocess.PIPE,
                )
            assert child.stdout is not None
            _, parent = map(int, child.stdout.readline().split())
            parents[path] = (child.pid, parent)
            child.kill()
            child.wait()
        (_, same), (other_child, other) = parents.values()
        assert same == server.pid
        assert other == other_child  # started cold: the grade's own child, which dies with it
    finally:
        server.close()


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


REPO = Path(__file__).resolve().parents[1]


def _kill_once_a_session_decided_a_case(server: int, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL ``server`` once a session whose host it forked has decided a case and has cases left.
    Records how many cases it had decided."""
    while not stop.is_set():
        for pid in (int(p) for task in listdir(f"/proc/{server}/task") for p in _children(server, task)):
            decided = cases_decided(pid)
            if decided:
                os.kill(server, signal.SIGKILL)
                killed.append(decided)
                return
        time.sleep(0.002)


def _children(pid: int, task: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{task}/children").read_text().split()
    except OSError:
        return []


def test_a_server_that_dies_under_a_session_costs_the_submission_nothing(
    started: list[Host], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's death kills the hosts it forked (PDEATHSIG), sessions mid-way included: the cases that
    session decided are lost, and the case it was running would have been charged as a crash.  The
    grading starts every case again instead, and gives what an undisturbed grading gives."""
    monkeypatch.setenv(SALT_ENV, "one salt for both gradings")
    tree = REPO / "reference" / "a9"
    alone = grade(tree, keyword="test_broadcast")
    killed: list[int] = []
    stop = threading.Event()
    with keep_spare():
        grade(TOY / "submission", RUBRIC)  # the server, and a spare host of it
        (server,) = _servers()
        watcher = threading.Thread(target=_kill_once_a_session_decided_a_case, args=(server, killed, stop))
        watcher.start()
        try:
            disturbed = grade(tree, keyword="test_broadcast")
        finally:
            stop.set()
            watcher.join()
        (replacement,) = _servers()
    cases = len(alone.cases)
    assert killed and killed[0] < cases, f"the server was killed after {killed} of {cases} cases"
    assert disturbed.status == "graded"
    assert [(c.id, c.verdict, c.message) for c in disturbed.cases] == [
        (c.id, c.verdict, c.message) for c in alone.cases
    ]
    assert disturbed.score == alone.score > 0
    assert "every case is graded again from the start" in capfd.readouterr().err
    assert replacement != server


def test_a_kept_server_that_died_is_started_again_for_the_next_grading() -> None:
    """A batch's or a Dask worker's server (``warm.KeptServer``): one that died is not left to make every
    later grade start cold."""
    from grader.matrix.warm import KeptServer

    kept = KeptServer(HostServer.start_here)
    try:
        first = kept.live()
        assert first is not None and first.alive()
        os.kill(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while first.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = kept.live()
        assert second is not None and second.alive() and second.pid != first.pid
        assert kept.live() is second and kept.started == 2
    finally:
        kept.close()
    assert not second.alive()


def test_a_grade_handed_a_server_that_died_starts_its_hosts_cold() -> None:
    """Between :meth:`KeptServer.live` and the grade's start a server may still die: the grade is lent
    nothing and starts cold, rather than fail on a dead connection (which made every later student of a
    batch a grader error)."""
    from grader.matrix.host import lend_server

    server = HostServer.start(scrubbed_environment())
    try:
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait()  # type: ignore[union-attr]
        with lend_server(server) as (lent, fds):
            assert (lent, fds) == ({}, ())
    finally:
        server.close()


def test_a_server_outlives_the_thread_that_asked_for_it() -> None:
    """PDEATHSIG follows the thread that forked: a server started for a batch's pool thread, or a Dask
    task's executor thread, must not die when that thread ends.  The thread ends only once the server
    has armed its PDEATHSIG (it serves a request after that), or the test could not fail."""

    servers: list[HostServer] = []

    def ask() -> None:
        servers.append(HostServer.start(scrubbed_environment()))
        assert _served(servers[0]) == 1

    asker = threading.Thread(target=ask)
    asker.start()
    asker.join()
    (server,) = servers
    try:
        time.sleep(0.5)  # PDEATHSIG is immediate: a server tied to the asker would be dead by now
        assert server.alive() and _served(server) == 1
    finally:
        server.close()


def test_every_thread_that_waits_for_a_forked_process_learns_its_end() -> None:
    """A batch's worker thread waits for its grade while Ctrl-C's handler, on the main thread, ends and
    waits for it too: the end the server reports once must reach both (the worker thread waited out
    the batch's whole timeout when the first waiter took it)."""
    server = HostServer.start(scrubbed_environment())
    try:
        control, request = os.pipe()
        with tempfile.TemporaryFile() as log:
            host = server.fork(control, log)
        os.close(control)
        assert host is not None
        codes: list[int] = []
        waiters = [threading.Thread(target=lambda: codes.append(host.wait(60))) for _ in range(2)]
        for waiter in waiters:
            waiter.start()
        time.sleep(0.2)  # both wait: the host waits for a pack
        os.close(request)  # told nothing, it exits with status 1
        for waiter in waiters:
            waiter.join(timeout=60)
        assert codes == [1, 1]
    finally:
        server.close()


def _served(server: HostServer) -> int | None:
    """How a host ``server`` forks ended: one told nothing exits with status 1 on end of file."""
    control, request = os.pipe()
    with tempfile.TemporaryFile() as log:
        host = server.fork(control, log)
    os.close(control)
    os.close(request)
    return host.wait(30) if host is not None else None


def test_a_batch_whose_servers_died_forks_its_next_grades_from_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``grader batch`` asks its kept servers (the host server, the grade server) for each grade
    (``KeptServer.live``): one found dead before a grade is replaced, once, and every student is graded
    as alone."""
    from grader.batch import run_batch
    from grader.matrix.warm import ForkServer, KeptServer

    kept: list[KeptServer[ForkServer]] = []

    class DeadOnArrival(KeptServer[ForkServer]):
        def __init__(self, start: Callable[[], ForkServer | None]) -> None:
            super().__init__(start)
            first = self.live()
            assert first is not None
            os.kill(first.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while first.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            kept.append(self)

    monkeypatch.setattr("grader.matrix.warm.KeptServer", DeadOnArrival)
    roster = tmp_path / "roster"
    for name in ("ann", "ben"):
        shutil.copytree(TOY / "submission", roster / name)
    rows = run_batch(roster, tmp_path / "out", rubric=RUBRIC, jobs=1, progress=io.StringIO())
    assert [(row.student, row.status, row.total) for row in rows] == [("ann", "graded", 10.0), ("ben", "graded", 10.0)]
    assert [server.started for server in kept] == [2, 2]  # each dead one and its replacement, kept for both
