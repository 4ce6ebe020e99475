"""Hosts forked from one warm server (``grader.matrix.warm``): a process that grades one tree after
another (``keep_spare``: a test session, a watch loop) imports torch once, in its host server, and
each grading gets a host of its own forked from it.

What isolation between gradings rests on, checked here rather than assumed: the server never holds a
grading's salt or submission (it is sent two file descriptors and nothing else), every grading has a
host of its own, and a server that dies is replaced without costing a grade.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.matrix.host import Host, keep_spare
from grader.pipeline import grade
from grader.salt import SALT_ENV
from tests.processes import descendants
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
    from grader.matrix.warm import HostServer
    from grader.runtimes.torchdist.zygote import scrubbed_environment

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
    from grader.matrix.warm import HostServer
    from grader.runtimes.torchdist.zygote import scrubbed_environment

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
