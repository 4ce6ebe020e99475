"""A process that grades one tree after another keeps one session host ahead (``grader.matrix.host.
keep_spare``): the next grading takes it instead of waiting for Python and torch to start.

A spare knows nothing before a grading takes it: not the salt, not the submission, at most the pack
the grading before it preloaded.  The grades are the same with and without one, and nothing outlives
the block that keeps it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.matrix.host import Host, keep_spare
from grader.pipeline import grade
from tests.processes import descendants, listdir

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux sandbox's session host")

TOY = Path(__file__).resolve().parents[1] / "tests" / "toy_pack"
RUBRIC = TOY / "rubric.yaml"


@pytest.fixture(autouse=True)
def no_outer_spare() -> Iterator[None]:
    """The suite keeps a spare of its own (``tests/conftest.py``): each test here starts from none."""
    with keep_spare(False):
        yield


def _hosts() -> set[int]:
    """This process's descendants that are session hosts or host servers (``python -m grader.matrix.host``).
    Only those: under xdist a worker has children of its own."""
    found = set()
    for pid in descendants(os.getpid()):
        try:
            if b"grader.matrix.host" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            continue
    return found


def _in_groups(leaders: set[int]) -> set[int]:
    """Every process of the machine still running in a process group these hosts lead (a host's zygote).
    One killed with its group is reparented to init when its host dies first: until init reaps it, it
    is listed with no command line left (its memory is gone, it runs nothing), and that is not counted."""
    found = set()
    for pid in listdir("/proc"):
        try:
            group = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[2])
            running = bool(Path(f"/proc/{pid}/cmdline").read_bytes())
        except (OSError, ValueError, IndexError):
            continue
        if group in leaders and running:
            found.add(int(pid))
    return found


def test_the_next_grading_takes_the_host_started_beside_the_one_before(started: list[Host], taken: list[Host]) -> None:
    alone = grade(TOY / "submission", RUBRIC).score
    started.clear()
    with keep_spare():
        first = grade(TOY / "submission", RUBRIC)
        second = grade(TOY / "wrong", RUBRIC)
        assert taken[2] is started[0]  # the second grading took the spare the first one started, not a new one
        spare = started[-1]
        assert spare.proc.poll() is None and spare.told == taken[1].told  # told the pack it graded twice
    assert (first.score, second.score) == (alone, 0)
    assert spare.proc.returncode is not None and spare.log.closed  # the block's end closed it


def test_a_spare_is_told_nothing_of_a_grading_but_its_pack(started: list[Host]) -> None:
    secret = "a-salt-no-spare-may-hold"
    with keep_spare(), pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADER_INPUT_SALT", secret)
        grade(TOY / "submission", RUBRIC)
        grade(TOY / "submission", RUBRIC)
        spare = started[-1]
        assert spare.proc.poll() is None
        environ = Path(f"/proc/{spare.proc.pid}/environ").read_bytes()
        assert secret.encode() not in environ and b"GRADER_INPUT_SALT" not in environ
        assert spare.told is not None and spare.told.side.bodies == "tests.toy_pack.bodies"


def test_a_spare_started_under_another_environment_is_not_taken(
    started: list[Host], taken: list[Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    with keep_spare():
        grade(TOY / "submission", RUBRIC)
        spare = started[-1]
        monkeypatch.setenv("PATH", f"{os.environ['PATH']}:/nonexistent")  # a host's PATH is the grading's
        grade(TOY / "submission", RUBRIC)
        assert taken[-1] is not spare and spare.proc.returncode is not None


def test_turned_off_the_spare_is_closed_and_nothing_it_started_remains(started: list[Host]) -> None:
    with keep_spare():
        grade(TOY / "submission", RUBRIC)
        (spare,) = (host for host in started if host.proc.poll() is None)  # the grading's own host has ended
        assert spare.proc.pid in descendants(os.getpid())  # ready for a next grading (forked by the host server)
        with keep_spare(False):
            leaders = {host.proc.pid for host in started}
            assert all(host.proc.returncode is not None for host in started)
            assert not _hosts() and not _in_groups(leaders)  # the host server is gone with its hosts
    assert len(started) == 2  # the grading's host and the spare: off, none is started
