"""Kernel-counted resources and uids: what the session writes into the cgroup hierarchy, the group each
grading's processes share (one CPU share and one memory limit per grading, issue 58), and which uid
each rank of each concurrent grading gets."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grader.sandbox import slots
from grader.sandbox.cgroups import (
    CONTAINER_ENV,
    HEADROOM_MB,
    Cgroups,
    GradingCgroup,
    cpu_weight,
    parent_weight,
)
from grader.sandbox.shares import RESERVE_MB, memory_share_mb


def fake_v2(tmp_path: Path) -> Path:
    """The files a cgroup v2 root offers (a directory standing in for cgroupfs)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def test_on_cgroup_v2_each_rank_gets_a_memory_limit_and_the_group_a_task_limit(tmp_path: Path) -> None:
    layer = Cgroups._v2(fake_v2(tmp_path))
    assert layer is not None and layer.version == 2
    group = layer.group(world_size=3, memory_mb=2048)
    assert group is not None
    assert (group.memory / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert [p.name for p in group.ranks] == ["rank0", "rank1", "rank2"]
    for rank in group.ranks:
        assert int((rank / "memory.max").read_text()) == (2048 + HEADROOM_MB) << 20
    assert group.leader_procs() == [str(group.memory / "init" / "cgroup.procs")]
    assert group.rank_procs(1) == [str(group.ranks[1] / "cgroup.procs")]
    (group.pids / "pids.current").write_text("40\n")
    group.limit_tasks(128)
    assert (group.pids / "pids.max").read_text() == "168"
    (group.ranks[2] / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert [group.memory_events(r).oom_kills for r in range(3)] == [0, 0, 1]


def test_a_v2_root_without_the_memory_controller_is_not_used(tmp_path: Path) -> None:
    root = fake_v2(tmp_path)
    (root / "cgroup.controllers").write_text("cpu io\n")
    assert Cgroups._v2(root) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_this_host_gets_a_cgroup_layer_and_groups_are_removed_when_closed() -> None:
    layer = Cgroups.detect()
    assert layer.version in (1, 2), layer.off
    group = layer.group(world_size=2, memory_mb=64)
    assert group is not None
    made = [*group.ranks, group.memory, group.pids]
    assert all(p.is_dir() for p in made)
    group.close()
    assert not any(p.exists() for p in made)


def test_groups_of_a_killed_session_are_swept(tmp_path: Path) -> None:
    layer = Cgroups._v2(fake_v2(tmp_path))
    assert layer is not None and layer.memory is not None
    dead = layer.memory / "999999999-ws2-0"  # no such pid
    dead.mkdir()
    mine = layer.memory / f"{os.getpid()}-ws2-0"
    mine.mkdir()
    layer.sweep()
    assert not dead.exists() and mine.exists()


def fake_v1(tmp_path: Path) -> Path:
    """The hierarchies a cgroup v1 host mounts, as this machine does (a directory standing in for each)."""
    root = tmp_path / "cgroup"
    for hierarchy, probe in (("cpu", "cpu.shares"), ("memory", "memory.limit_in_bytes"), ("pids", "cgroup.procs")):
        (root / hierarchy).mkdir(parents=True)
        (root / hierarchy / probe).write_text("")
    return root


def test_the_weight_is_the_same_for_every_grading_in_the_file_each_version_reads() -> None:
    """A grading's weight does not follow its world size or how many processes it runs: every grading's
    is a nice-0 process's, the kernel's default for a new group."""
    assert cpu_weight(2) == ("cpu.weight", "100")
    assert cpu_weight(1) == ("cpu.shares", "1024")


def test_the_memory_limits_of_jobs_gradings_together_fit_the_machine() -> None:
    for machine_mb, jobs in itertools.product((4096, 24 * 1024, 256 * 1024), (1, 2, 3, 8)):
        share = memory_share_mb(machine_mb, jobs)
        assert jobs * share + RESERVE_MB <= machine_mb
        assert share > (machine_mb - RESERVE_MB) / jobs - 1  # and no more is held back than that
    assert memory_share_mb(1024, 4) == HEADROOM_MB  # a machine too small for its reserve still grades


def test_on_cgroup_v2_a_grading_is_one_cpu_and_memory_group_and_its_sessions_groups_nest_in_it(tmp_path: Path) -> None:
    root = fake_v2(tmp_path)
    first, second = GradingCgroup._make_v2(root, "1-grading-0", 4096), GradingCgroup._make_v2(root, "1-grading-1", 4096)
    for grading in (first, second):
        assert grading.cpu == grading.memory == root / "dist-grader" / grading.name
        assert (grading.cpu / "cpu.weight").read_text() == "100"
        assert (grading.cpu / "memory.max").read_text() == str(4096 << 20)
        assert (grading.cpu / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
        # a group whose children have controllers may hold no process: the host and zygote go to a leaf
        assert grading.procs() == [grading.cpu / "main" / "cgroup.procs"]
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (root / "dist-grader" / "cpu.weight").read_text() == "200"  # two gradings weigh as two programs
    session = Cgroups._v2(root, first.name)  # the session's view, told the grading's name (GRADING_ENV)
    assert session is not None
    group = session.group(world_size=2, memory_mb=64)
    assert group is not None
    assert group.memory.parent == first.cpu  # leader, init and ranks: all inside the grading's CPU group
    assert [p.parent.parent for p in group.ranks] == [first.cpu, first.cpu]
    assert group.leader_procs() == [str(group.memory / "init" / "cgroup.procs")]
    assert "cpu.weight 100" in first.layer()


def test_a_v2_root_without_the_cpu_controller_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_v2(tmp_path)
    (root / "cgroup.controllers").write_text("memory pids\n")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    made = GradingCgroup.make(4096, root)
    assert isinstance(made, str) and made.startswith("off: ") and "cpu" in made


def test_without_root_no_grading_group_is_made_and_the_isolation_map_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    made = GradingCgroup.make(4096)
    assert isinstance(made, str) and made.startswith("off: cgroups need root")


def test_in_the_docker_backends_container_the_container_is_the_grading_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """One grading a container, its CPUs and memory capped and its CPU weight docker's default, as every other
    container's: the isolation map says so, and no group is made under its read-only /sys/fs/cgroup."""
    from grader.backends.docker import container_options

    options = container_options(Path("/s"), Path("/r"), None, memory_mb=6144, cpus=2.0, pids=4096, group_add=[])
    monkeypatch.setenv(CONTAINER_ENV, options["environment"][CONTAINER_ENV])
    made = GradingCgroup.make(4096, Path("/nonexistent"))
    assert made == (
        "on: the grading's container is its one group (2 CPUs and 6144 MiB at most), "
        "weighted as every other container's"
    )
    monkeypatch.delenv(CONTAINER_ENV)
    assert str(GradingCgroup.make(4096, Path("/nonexistent"))).startswith("off: ")


def test_on_cgroup_v1_a_grading_has_a_cpu_group_and_a_memory_group_its_ranks_nest_in(tmp_path: Path) -> None:
    root = fake_v1(tmp_path)
    grading = GradingCgroup._make_v1(root, "1-grading-0", 4096)
    assert grading.cpu == root / "cpu" / "dist-grader" / "1-grading-0"
    assert (grading.cpu / "cpu.shares").read_text() == "1024"
    assert grading.procs() == [grading.cpu / "cgroup.procs", grading.memory / "cgroup.procs"]  # v1: the groups hold it
    assert (grading.memory / "memory.limit_in_bytes").read_text() == str(4096 << 20)
    session = Cgroups._v1(root / "memory", root / "pids", grading.name)
    assert session is not None
    group = session.group(world_size=2, memory_mb=64)
    assert group is not None
    assert [p.parent.parent for p in group.ranks] == [grading.memory] * 2  # the grading's memory counts them
    assert group.pids.parent == root / "pids" / "dist-grader"  # task limits stay per group, as before
    assert Cgroups._v1(root / "memory", root / "pids", "2-grading-9") is None  # a grading that was never made
    assert (root / "cpu" / "dist-grader" / "cpu.shares").read_text() == "1024"


def test_gradings_together_weigh_as_many_programs_against_the_rest_of_the_machine() -> None:
    """Each grading weighs what one nice-0 program does beside whatever else the machine runs, as when
    each was an autogroup of its own; among themselves they share ``dist-grader`` equally."""
    assert [parent_weight(1, n) for n in (0, 1, 2, 3)] == ["1024", "1024", "2048", "3072"]
    assert [parent_weight(2, n) for n in (1, 2)] == ["100", "200"]
    assert parent_weight(2, 1000) == "10000" and parent_weight(1, 1000) == "262144"  # the kernel's largest


def _spinning_on_their_own(pid: int, count: int) -> bool:
    children = _children(pid)
    try:
        return len(children) == count and all(os.getsid(child) == child for child in children)
    except ProcessLookupError:
        return False


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_a_graded_process_and_its_setsid_children_stay_in_the_grading_group_until_it_closes() -> None:
    """What a rank that forks setsid() spinners does, on this host's own hierarchy: the child it had
    before the join is moved with it, the one it forks after is born in the group, both whatever their
    session; closing the group kills them and removes it."""
    grading = GradingCgroup.make(memory_share_mb(4096, 1))
    if isinstance(grading, str):
        pytest.skip(grading)
    spin = "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    while True: pass\nsys.stdin.readline()\n"
    spin += "if os.fork() == 0:\n    os.setsid()\n    while True: pass\ntime.sleep(60)\n"
    parent = subprocess.Popen([sys.executable, "-I", "-c", spin], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while len(_children(parent.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        grading.join(parent.pid)
        assert parent.stdin is not None
        parent.stdin.write(b"\n")
        parent.stdin.flush()
        while not _spinning_on_their_own(parent.pid, 2) and time.monotonic() < deadline:
            time.sleep(0.01)  # forked, and past their setsid()
        members = {int(pid) for procs in grading.procs() for pid in procs.read_text().split()}
        children = _children(parent.pid)
        assert len(children) == 2 and {parent.pid, *children} <= members
        assert all(os.getsid(child) == child for child in children)  # sessions of their own, as attackers make
        made = [grading.cpu, grading.memory]
        grading.close()
        assert parent.wait(timeout=10) == -signal.SIGKILL
        assert not any(p.exists() for p in made)
    finally:  # nothing left spinning, whatever failed: the spinners are no children of this process
        with contextlib.suppress(ProcessLookupError):
            os.kill(parent.pid, signal.SIGSTOP)  # it forks no more while its children are killed
        for child in _children(parent.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
        grading.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_an_out_of_memory_kill_lands_in_the_grading_that_took_the_memory() -> None:
    """A grading's processes together hold at most its share: past it, the kernel kills inside the
    grading's group, not whatever is largest on the machine."""
    grading = GradingCgroup.make(256)
    if isinstance(grading, str):
        pytest.skip(grading)
    hog = "import sys\nsys.stdin.readline()\nheld = [b'x' * (64 << 20) for _ in range(16)]\n"
    proc = subprocess.Popen([sys.executable, "-I", "-c", hog], stdin=subprocess.PIPE)
    try:
        grading.join(proc.pid)
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == -signal.SIGKILL
        events = "memory.events" if grading.version == 2 else "memory.oom_control"
        kills = dict(line.split() for line in (grading.memory / events).read_text().splitlines())
        assert int(kills["oom_kill"]) >= 1
    finally:
        proc.kill()
        proc.wait()
        grading.close()


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class _Listing:
    """What ``os.scandir`` returns: an iterator that is its own context manager."""

    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self._entries = iter(entries)

    def __iter__(self) -> _Listing:
        return self

    def __next__(self) -> os.DirEntry[str]:
        return next(self._entries)

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_dead_sessions_group_another_grading_removes_meanwhile_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gradings starting together sweep the same dead session's groups: the other one's rmdir can
    land between this sweep's listing of a group and its descent into it (found in a --jobs 2 batch:
    the session died of FileNotFoundError and the student's row was a grader error)."""
    layer = Cgroups._v2(fake_v2(tmp_path))
    assert layer is not None and layer.memory is not None
    dead = layer.memory / "999999999-ws4-3"
    for r in range(4):
        (dead / f"rank{r}").mkdir(parents=True)
    real = os.scandir

    def racing(path: Any = ".") -> _Listing:
        entries = list(real(path))
        if Path(path) == dead:  # listed; now the other sweep removes a rank before this one gets to it
            (dead / "rank2").rmdir()
        return _Listing(entries)

    monkeypatch.setattr(os, "scandir", racing)
    layer.sweep()
    monkeypatch.undo()
    assert not dead.exists()


def test_concurrent_gradings_hold_different_slots_and_every_rank_has_its_own_uid(tmp_path: Path) -> None:
    first = slots.acquire(tmp_path)
    second = slots.acquire(tmp_path)  # another grading while the first runs
    try:
        assert first.index != second.index
        uids = [s.uid(ws, r) for s in (first, second) for ws in range(1, 11) for r in range(ws)]
        assert len(set(uids)) == len(uids)
        assert min(uids) >= slots.UID_BASE
    finally:
        first.release()
        second.release()
    again = slots.acquire(tmp_path)  # released slots are free again
    assert again.index == 0
    again.release()


def test_no_uid_beyond_the_largest_world_size() -> None:
    slot = slots.Slot(0, -1)
    with pytest.raises(ValueError):
        slot.uid(slots.MAX_WORLD_SIZE + 1, 0)
    assert all(
        slot.uid(ws, r) < slots.UID_BASE + slots.UIDS_PER_SLOT
        for ws, r in itertools.product(range(1, 11), range(10))
        if r < ws
    )
