"""What a grading killed by SIGKILL leaves in the temporary directory, the next grading removes; a
live grading's directories, other users' and anything reached through a symlink stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grader import tempdirs


def orphan(root: Path, prefix: str = "grader-work-") -> Path:
    """A directory whose maker has died: made in a process that is killed with SIGKILL."""
    maker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from grader import tempdirs; print(tempdirs.make({prefix!r})[0], flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(root)},
    )
    assert maker.stdout is not None
    path = Path(maker.stdout.readline().decode().strip())
    (path / "matrix").mkdir()
    (path / "matrix" / "junit.xml").write_text("<testsuites/>")
    maker.send_signal(signal.SIGKILL)
    maker.wait()
    return path


def test_the_directories_of_a_killed_grading_are_swept(temp_dir: Path) -> None:
    dead = [orphan(temp_dir), orphan(temp_dir, "grader-ws4-"), orphan(temp_dir, "grader-dask-")]
    assert sorted(tempdirs.sweep(grace_s=0)) == sorted(dead)
    assert not any(path.exists() for path in dead)


def test_a_live_gradings_directory_is_never_swept(temp_dir: Path) -> None:
    live, lock = tempdirs.make("grader-work-")  # another open file description: flock conflicts as across processes
    try:
        assert tempdirs.sweep(grace_s=0) == []
        assert live.is_dir()
    finally:
        lock.close()
    assert tempdirs.sweep(grace_s=0) == [live]


def test_a_directory_younger_than_the_grace_may_be_unlocked_yet_and_stays(temp_dir: Path) -> None:
    young = temp_dir / "grader-work-justmade"
    young.mkdir()
    assert tempdirs.sweep() == [] and young.is_dir()


def test_a_symlink_is_never_followed(temp_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    victim = tmp_path_factory.mktemp("victim")
    (victim / "precious").write_text("keep me")
    (temp_dir / "grader-work-planted").symlink_to(victim, target_is_directory=True)
    dead = orphan(temp_dir)
    (dead / "inside").symlink_to(victim, target_is_directory=True)  # a link inside a swept dir
    assert tempdirs.sweep(grace_s=0) == [dead]
    assert (victim / "precious").read_text() == "keep me"
    assert (temp_dir / "grader-work-planted").is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another uid needs temp_dir")
def test_another_users_directory_stays(temp_dir: Path) -> None:
    theirs = orphan(temp_dir)
    os.chown(theirs, 65534, 65534)
    assert tempdirs.sweep(grace_s=0) == [] and theirs.is_dir()


def test_names_the_grader_did_not_lock_are_never_swept(temp_dir: Path) -> None:
    for name in ("grader-out-results", "grader-intake-x", "grader-student-out-x", "grader-wsx-"):
        (temp_dir / name).mkdir()
    assert tempdirs.sweep(grace_s=0) == []


def test_without_flock_directories_are_made_and_nothing_is_swept(
    temp_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows (faked here): no flock, so a live grading's directory cannot be told from an orphan."""
    dead = orphan(temp_dir)
    monkeypatch.setattr(tempdirs, "fcntl", None)
    made, lock = tempdirs.make("grader-ws2-")
    lock.close()
    assert made.is_dir()
    assert tempdirs.sweep(grace_s=0) == [] and dead.is_dir()
