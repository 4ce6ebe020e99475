"""Every way out of ``grade`` and ``batch`` leaves no process behind (issue 11, class 6).

The submission is ``tests/corpus/hostile/escape_time_bound``: importing it leaves a setsid
double-forked grandchild sleeping forever, and one broadcast case starts another and never returns
(a rank ends such leftovers after each case, so the second is the one that lives long enough to be
seen).  Each test starts a grading, waits until a grandchild exists (so the grading is well under
way), ends the grading
one way, and then requires that every process the grading ever started (the matrix session, the
zygote, every group's leader, init and ranks, and the detached grandchildren) is gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from grader import tempdirs
from tests.processes import descendants, listdir

REPO = Path(__file__).resolve().parents[1]
ENTRY = REPO / "tests" / "corpus" / "hostile" / "escape_time_bound"
MARKER = b"hostile-corpus"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="PID namespaces need root")]


def marked() -> set[int]:
    pids = set()
    for name in listdir("/proc"):
        if name.isdigit():
            try:
                if MARKER in Path(f"/proc/{name}/cmdline").read_bytes():
                    pids.add(int(name))
            except OSError:
                continue
    return pids


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Grading:
    """``grader <args>`` running, with every process it started so far (sampled every 0.1 s)."""

    def __init__(self, args: list[str], tmpdir: Path | None = None) -> None:
        self.before = marked()
        env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir else None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grader", *args],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.seen: set[int] = set()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while self.proc.poll() is None:
            self.seen |= descendants(self.proc.pid) | (marked() - self.before)
            time.sleep(0.1)

    def under_way(self) -> Grading:
        """Wait until the submission's detached grandchild exists (the grading is well under way)."""
        deadline = time.monotonic() + 240
        while not (marked() - self.before):
            assert self.proc.poll() is None, self.proc.stderr.read().decode() if self.proc.stderr else ""
            assert time.monotonic() < deadline, "the submission never started its grandchild"
            time.sleep(0.2)
        time.sleep(1.0)  # let the group reach its cases
        self.seen |= descendants(self.proc.pid) | (marked() - self.before)
        return self

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        self._sampler.join()
        return code


def assert_all_gone(pids: set[int], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:120] for p in pids if alive(p)}
    assert not left, f"processes outlived the grading: {left}"


def grade_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["grade", str(ENTRY), "--out", str(tmp_path / "out"), "--format", "json", *extra]


@pytest.mark.parametrize(
    ("how", "sig", "codes"),
    [
        ("SIGTERM", signal.SIGTERM, {130}),
        ("SIGINT", signal.SIGINT, {130}),
        ("SIGKILL", signal.SIGKILL, {-signal.SIGKILL}),
    ],
)
def test_a_grade_ended_by_a_signal_leaves_nothing(
    tmp_path: Path, scratch: Path, how: str, sig: int, codes: set[int]
) -> None:
    """Nothing but, after SIGKILL (no ``finally`` runs), its directories: the next grading sweeps them,
    and while it ran, a sweep found every one of them locked."""
    grading = Grading(grade_args(tmp_path), tmpdir=scratch).under_way()
    assert len(grading.seen) > 5  # session, zygote, leaders, inits, ranks, the grandchild
    assert _both_made(scratch), "no grading or rank-group directory in the grading's TMPDIR"
    assert tempdirs.sweep(scratch, grace_s=1.0) == []  # older than a second: locked since
    grading.proc.send_signal(sig)
    assert grading.wait(timeout=60) in codes
    assert_all_gone(grading.seen)
    left = sorted(scratch.iterdir())
    if sig == signal.SIGKILL:
        assert left and sorted(tempdirs.sweep(scratch, grace_s=0)) == left
    else:
        assert left == []


def _both_made(scratch: Path, within: float = 60.0) -> bool:
    """Whether the grading's directory and a rank group's are both in ``scratch`` at one moment, waiting
    for it: between one group's end and the next one's start (long on a loaded machine) there is none."""
    deadline = time.monotonic() + within
    while True:
        made = [p.name for p in scratch.iterdir()]
        if any(n.startswith("grader-work-") for n in made) and any(n.startswith("grader-ws") for n in made):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """The grading's TMPDIR: its own, so that only its directories are there; traversable by the ranks
    (as /tmp is; pytest's tmp_path is not)."""
    path = Path(tempfile.mkdtemp(prefix="lifecycle-"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_batch_ended_by_sigkill_leaves_nothing(tmp_path: Path) -> None:
    roster = tmp_path / "roster"
    roster.mkdir()
    shutil.copytree(ENTRY, roster / "alice")
    grading = Grading(["batch", str(roster), "--out", str(tmp_path / "class"), "--jobs", "1"]).under_way()
    grading.proc.kill()
    grading.wait(timeout=60)
    assert_all_gone(grading.seen)


def test_a_batch_ended_by_sigterm_leaves_nothing(tmp_path: Path) -> None:
    roster = tmp_path / "roster"
    roster.mkdir()
    shutil.copytree(ENTRY, roster / "alice")
    grading = Grading(["batch", str(roster), "--out", str(tmp_path / "class"), "--jobs", "1"]).under_way()
    grading.proc.terminate()
    grading.wait(timeout=90)
    assert_all_gone(grading.seen)


def short_rubric(tmp_path: Path, total_timeout_s: float, case_timeout_s: float) -> Path:
    """The default rubric with a total time limit, and every case's budget (the hanging one's too) fixed."""
    data = yaml.safe_load((REPO / "rubrics" / "a9.yaml").read_text())
    data["limits"]["total_timeout_s"] = total_timeout_s
    data["limits"]["case_timeout_s"] = data["limits"]["case_timeout_floor_s"] = case_timeout_s
    path = tmp_path / "rubric.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_total_timeout_ends_the_grading_with_results_and_nothing_left(tmp_path: Path) -> None:
    # Too short for the matrix (its one hanging case alone would take 60 s), long enough for the
    # submission's cases to start on a loaded machine: a session stopped before any had is the
    # grader's failure, not the submission's time (tests/test_session_ends.py).
    grading = Grading(grade_args(tmp_path, "--rubric", str(short_rubric(tmp_path, 25, case_timeout_s=60))))
    assert grading.wait(timeout=120) == 0
    assert grading.seen
    assert_all_gone(grading.seen)
    results = (tmp_path / "out" / "results.json").read_text()
    assert "the submission used up the total time limit before this case" in results
    assert '"verdict": "not_run"' in results


def test_a_grader_crash_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file where the output directory should be")
    grading = Grading(grade_args(tmp_path))
    assert grading.wait(timeout=240) not in (0, -signal.SIGKILL)  # it failed by itself, after grading
    assert grading.seen
    assert_all_gone(grading.seen)


def test_success_leaves_nothing(tmp_path: Path) -> None:
    grading = Grading(grade_args(tmp_path))
    assert grading.wait(timeout=240) == 0
    assert marked() - grading.before == set() or grading.seen
    assert_all_gone(grading.seen)


def test_a_group_close_cut_short_by_the_runners_sigterm_is_finished_by_the_sessions(
    tmp_path: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SIGTERM that stops a session can land in a group's close (a hung case's group is closed
    after it).  The session's own close then closes that group again: its ranks end and its directory
    goes, and no descriptor the first close let go of is closed again, since by then it may be another
    file's (stop 51's CI left a ``grader-ws8-*`` directory so)."""
    from grader.limits import Limits
    from grader.pack import load_pack
    from grader.runtimes.torchdist.launcher import RankGroup
    from grader.runtimes.torchdist.session import Sandboxing, Zygote, student_config

    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    pack = load_pack("a9")
    sandbox = tmp_path / "sandbox"
    shutil.copytree(REPO / "reference" / "a9", sandbox)
    zygote = Zygote.start(pack.rank_side)
    sandboxing = Sandboxing(None, network=True, pid_namespace=True)
    group = RankGroup(2, sandbox, Limits(), zygote, sandboxing, student_config(pack, {}))
    try:
        group.start()
        ranks = [rk.pid for rk in group._ranks]
        assert len(ranks) == 2 and all(map(alive, ranks)) and list(scratch.iterdir()) == [group._dir]

        def sigterm(pids: list[int], timeout: float = 5.0) -> None:
            raise KeyboardInterrupt  # what the session's SIGTERM handler raises

        with monkeypatch.context() as cut:
            cut.setattr(RankGroup, "_wait_gone", staticmethod(sigterm))
            with pytest.raises(KeyboardInterrupt):
                group.close()
        other = os.open(os.devnull, os.O_RDONLY)  # the lowest free number: one the first close let go of
        try:
            group.close()
            os.fstat(other)  # still open: the second close closed nothing twice
        finally:
            os.close(other)
        assert_all_gone(set(ranks), within=10.0)
        assert list(scratch.iterdir()) == []
    finally:
        group.close()
        zygote.close()
