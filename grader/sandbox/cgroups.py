"""Session side: a cgroup per rank group, so that the kernel counts what a group uses.

Memory is counted per rank (``memory_mb`` plus :data:`HEADROOM_MB` for what the rank's own runtime
touches after the fork), swap included, and it counts what RLIMIT_AS never sees: pages of memfd
files, /dev/shm and every tmpfs the rank writes.  Tasks are counted per group (``pids.max``), so
a fork bomb stops at the group's limit whatever uid it runs under.  An OOM kill is read back per
rank from the kernel's own counter, so a rank the kernel killed for memory is a ``memory`` verdict.

Layout (one ``dist-grader`` directory per hierarchy, one group directory per live group)::

    cgroup v2   <root>/dist-grader/<group>/            pids.max; +memory +pids for its children
                <root>/dist-grader/<group>/init/       the group's leader and init
                <root>/dist-grader/<group>/rank<r>/    memory.max, memory.swap.max
    cgroup v1   memory/dist-grader/<group>/rank<r>/    memory.limit_in_bytes, memory.memsw.limit_in_bytes
                pids/dist-grader/<group>/              pids.max; the leader joins, ranks inherit it

Where the host's hierarchy is read-only (a container: Docker mounts /sys/fs/cgroup read-only) the
controllers are mounted afresh under a private directory; in a private cgroup namespace that
mount's root is the container's own cgroup, so the groups nest inside the container's limits.
A group's name starts with the session's pid: groups left by a session that was killed are
removed by the next one (:meth:`Cgroups.sweep`).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

HEADROOM_MB = 256
ROOT = Path("/sys/fs/cgroup")
NAME = "dist-grader"
_counter = itertools.count()


@dataclass(frozen=True)
class Cgroups:
    """The cgroup layer of a session: where groups are made, or why there are none (``off``)."""

    version: int  # 1 or 2; 0 when off
    memory: Path | None  # v1: the memory hierarchy's dist-grader dir; v2: the one dist-grader dir
    pids: Path | None
    off: str = ""

    @classmethod
    def detect(cls) -> Cgroups:
        if os.geteuid() != 0:
            return cls(0, None, None, "off: cgroups need root")
        for found in (cls._v2(ROOT), cls._v1(ROOT / "memory", ROOT / "pids")):
            if found is not None:
                found.sweep()
                return found
        mounted = cls._mount_private()
        if isinstance(mounted, str):
            return cls(0, None, None, mounted)
        mounted.sweep()
        return mounted

    @classmethod
    def _v2(cls, root: Path) -> Cgroups | None:
        controllers = root / "cgroup.controllers"
        if not controllers.exists() or not {"memory", "pids"} <= set(controllers.read_text().split()):
            return None
        base = root / NAME
        try:
            base.mkdir(exist_ok=True)
            _write(root / "cgroup.subtree_control", "+memory +pids")
            _write(base / "cgroup.subtree_control", "+memory +pids")
        except OSError:
            return None
        return cls(2, base, base)

    @classmethod
    def _v1(cls, memory: Path, pids: Path) -> Cgroups | None:
        if not (memory / "memory.limit_in_bytes").exists() or not (pids / "cgroup.procs").exists():
            return None
        try:
            for hierarchy in (memory, pids):
                (hierarchy / NAME).mkdir(exist_ok=True)
        except OSError:
            return None
        return cls(1, memory / NAME, pids / NAME)

    @classmethod
    def _mount_private(cls) -> Cgroups | str:
        """Mount the controllers under a private directory (a container's read-only /sys/fs/cgroup)."""
        libc = ctypes.CDLL(None, use_errno=True)
        where = Path(tempfile.mkdtemp(prefix="dist-grader-cgroups-"))
        v2 = where / "unified"
        v2.mkdir()
        if libc.mount(b"none", str(v2).encode(), b"cgroup2", 0, None) == 0:
            found = cls._v2_leaf_first(v2)
            if found is not None:
                return found
            libc.umount2(str(v2).encode(), 2)  # MNT_DETACH: a hybrid host's empty v2 hierarchy
        memory, pids = where / "memory", where / "pids"
        memory.mkdir()
        pids.mkdir()
        for path, option in ((memory, b"memory"), (pids, b"pids")):
            if libc.mount(b"none", str(path).encode(), b"cgroup", 0, option) != 0:
                return f"off: cannot mount the {option.decode()} controller: {os.strerror(ctypes.get_errno())}"
        return cls._v1(memory, pids) or "off: the mounted cgroup hierarchies are not writable"

    @classmethod
    def _v2_leaf_first(cls, root: Path) -> Cgroups | None:
        """cgroup v2 allows controllers for children only in a cgroup without processes of its own:
        move every process of the (container's) root cgroup into a leaf first."""
        if not (root / "cgroup.procs").exists():
            return None
        leaf = root / "grader-init"
        try:
            leaf.mkdir(exist_ok=True)
            for pid in (root / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    _write(leaf / "cgroup.procs", pid)
        except OSError:
            return None
        return cls._v2(root)

    def sweep(self) -> None:
        """Remove the groups of sessions that no longer run."""
        for base in {self.memory, self.pids} - {None}:
            assert base is not None
            for group in base.iterdir() if base.is_dir() else []:
                owner = group.name.split("-", 1)[0]
                if group.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                    _remove_tree(group)

    def group(self, world_size: int, memory_mb: int) -> GroupCgroups | None:
        if self.version == 0:
            return None
        name = f"{os.getpid()}-ws{world_size}-{next(_counter)}"
        limit = (memory_mb + HEADROOM_MB) << 20
        assert self.memory is not None and self.pids is not None
        if self.version == 2:
            group = self.memory / name
            group.mkdir()
            _write(group / "cgroup.subtree_control", "+memory +pids")
            (group / "init").mkdir()
            ranks = [group / f"rank{r}" for r in range(world_size)]
            for rank in ranks:
                rank.mkdir()
                _write(rank / "memory.max", str(limit))
                if (rank / "memory.swap.max").exists():  # absent without swap accounting
                    _write(rank / "memory.swap.max", "0")
            return GroupCgroups(self.version, group, group, ranks, [group / "init"])
        memory_group, pids_group = self.memory / name, self.pids / name
        memory_group.mkdir()
        pids_group.mkdir()
        ranks = [memory_group / f"rank{r}" for r in range(world_size)]
        for rank in ranks:
            rank.mkdir()
            _write(rank / "memory.limit_in_bytes", str(limit))  # before memsw, which may not be below it
            if (rank / "memory.memsw.limit_in_bytes").exists():  # absent without swap accounting
                _write(rank / "memory.memsw.limit_in_bytes", str(limit))
        return GroupCgroups(self.version, memory_group, pids_group, ranks, [pids_group])


class MemoryEvents(NamedTuple):
    """A rank's memory counters (``GroupCgroups.memory_events``)."""

    oom_kills: int  # processes the kernel killed for memory
    limit_hits: int  # times the memory reached its limit (v2: ``memory.events`` max + oom; v1: ``memory.failcnt``),
    # the pressure a rank that fills its memory slowly records before any OOM kill


@dataclass
class GroupCgroups:
    """The cgroups of one live group."""

    version: int
    memory: Path  # the group's directory in the memory hierarchy
    pids: Path  # the group's directory in the pids hierarchy (the same directory in v2)
    ranks: list[Path]  # one memory cgroup per rank
    leader: list[Path]  # what the leader joins (its children, init and the ranks, inherit it)

    def rank_procs(self, rank: int) -> list[str]:
        return [str(self.ranks[rank] / "cgroup.procs")]

    def leader_procs(self) -> list[str]:
        return [str(path / "cgroup.procs") for path in self.leader]

    def limit_tasks(self, more: int) -> None:
        """Allow the group ``more`` tasks beyond what it runs now (its ranks and their threads)."""
        current = int((self.pids / "pids.current").read_text())
        _write(self.pids / "pids.max", str(current + more))

    def memory_events(self, rank: int) -> MemoryEvents:
        """The rank's memory counters, cumulative since its cgroup was made; 0 for a counter the
        kernel does not keep (never an error).  One file on v2, two on v1: the session reads them
        once per rank per case (issue 23)."""
        if self.version == 2:
            events = _counters(f"{self.ranks[rank]}/memory.events")
            return MemoryEvents(events.get("oom_kill", 0), events.get("max", 0) + events.get("oom", 0))
        kills = _counters(f"{self.ranks[rank]}/memory.oom_control").get("oom_kill", 0)
        try:
            hits = int(_read_counters(f"{self.ranks[rank]}/memory.failcnt"))
        except (OSError, ValueError):
            hits = 0
        return MemoryEvents(kills, hits)

    def peak_mb(self, rank: int) -> int | None:
        """The most memory the rank's cgroup held so far, in MiB (None where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.ranks[rank] / name).read_text()) >> 20
        except (OSError, ValueError):
            return None

    def rank_pids(self, rank: int) -> list[int]:
        """Host pids in the rank's cgroup (the rank and whatever it started)."""
        return _procs(self.ranks[rank])

    def close(self, timeout: float = 5.0) -> None:
        """Kill whatever is left in the group, then remove its cgroups."""
        deadline = time.monotonic() + timeout
        while True:
            alive = _procs(self.pids, recursive=True)
            if not alive or time.monotonic() > deadline:
                break
            if self.version == 2 and (self.pids / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(self.pids / "cgroup.kill", "1")
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        _remove_tree(self.memory)
        if self.pids != self.memory:
            _remove_tree(self.pids)


def _read_counters(path: str) -> str:
    """A small counter file, read with two system calls: the session reads one or two per rank per case."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 12).decode()
    finally:
        os.close(fd)


def _counters(path: str) -> dict[str, int]:
    """A flat keyed file (``key value`` lines) as numbers; empty where it cannot be read."""
    found = {}
    with contextlib.suppress(OSError, ValueError):
        for line in _read_counters(path).splitlines():
            key, _, value = line.partition(" ")
            found[key] = int(value)
    return found


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _subgroups(path: Path) -> list[Path]:
    """Every cgroup below ``path``, deepest first.  Another session may be removing the same tree
    (two gradings starting together sweep the same dead session's groups): a group gone meanwhile is
    passed over (``os.walk`` ignores what it cannot list), never an error in this session."""
    return [Path(top) for top, _, _ in os.walk(path, topdown=False) if top != str(path)]


def _procs(path: Path, recursive: bool = False) -> list[int]:
    found = []
    for group in [path, *_subgroups(path)] if recursive else [path]:
        with contextlib.suppress(OSError, ValueError):
            found += [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    return found


def _remove_tree(path: Path) -> None:
    """rmdir a cgroup and its children, deepest first (cgroupfs refuses anything but rmdir)."""
    if not path.is_dir():
        return
    for child in _subgroups(path):
        with contextlib.suppress(OSError):
            child.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()
