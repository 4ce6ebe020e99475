"""Kernel-counted resources and uids: what the session writes into the cgroup hierarchy, and which
uid each rank of each concurrent grading gets."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from grader.sandbox import slots
from grader.sandbox.cgroups import HEADROOM_MB, Cgroups


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
