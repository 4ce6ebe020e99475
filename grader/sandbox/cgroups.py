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

A grading (``grader.runner.run_matrix``) makes one group of its own around all of that (issue 58,
:class:`GradingCgroup`): its session's host, the zygote, every rank and whatever they fork live in it,
``setsid()`` children too (a cgroup holds a process whatever its session or autogroup), so the CPU
is shared between gradings, each weighted as every other, however many processes one of them runs;
and the memory of its ranks is counted in it too, limited to the grading's part of the machine, so
an out-of-memory kill lands in the grading that caused it::

    cgroup v2   <root>/dist-grader/<grading>/          cpu.weight, memory.max; +cpu +memory +pids
                <root>/dist-grader/<grading>/main/     the session's host and its zygote
                <root>/dist-grader/<grading>/<group>/  the session's groups, as above, nested
    cgroup v1   cpu/dist-grader/<grading>/             cpu.shares: the host, zygote, ranks
                memory/dist-grader/<grading>/          memory.limit_in_bytes: the host, zygote; the
                                                       groups' rank<r> nested
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
#: the session's grading group (:class:`GradingCgroup`), a directory name under ``dist-grader``: its
#: groups nest in it.  Set by the runner in the session's environment, never seen by a rank.
GRADING_ENV = "GRADER_GRADING_CGROUP"
#: set by the docker backend in the container it grades in (one grading a container): the container is the
#: grading's group, its CPUs and memory capped and its CPU weight docker's default, as every other container's;
#: its /sys/fs/cgroup is read-only, and no group of the grading's own is made in it
CONTAINER_ENV = "GRADER_CONTAINER_GROUP"
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
        grading = os.environ.get(GRADING_ENV, "")  # the groups nest in the grading's, where it has one
        for found in (cls._v2(ROOT, grading), cls._v1(ROOT / "memory", ROOT / "pids", grading)):
            if found is not None:
                found.sweep()
                return found
        mounted = cls._mount_private()
        if isinstance(mounted, str):
            return cls(0, None, None, mounted)
        mounted.sweep()
        return mounted

    @classmethod
    def _v2(cls, root: Path, grading: str = "") -> Cgroups | None:
        """``grading``: the grading group the session's groups nest in (:data:`GRADING_ENV`), made already."""
        controllers = root / "cgroup.controllers"
        if not controllers.exists() or not {"memory", "pids"} <= set(controllers.read_text().split()):
            return None
        base = root / NAME / grading
        try:
            (root / NAME).mkdir(exist_ok=True)
            for level in (root, root / NAME, base):
                _write(level / "cgroup.subtree_control", "+memory +pids")
        except OSError:
            return None
        return cls(2, base, base)

    @classmethod
    def _v1(cls, memory: Path, pids: Path, grading: str = "") -> Cgroups | None:
        """``grading``: as for :meth:`_v2`; its ranks' memory groups nest in it, the task groups do not."""
        if not (memory / "memory.limit_in_bytes").exists() or not (pids / "cgroup.procs").exists():
            return None
        try:
            for hierarchy in (memory, pids):
                (hierarchy / NAME).mkdir(exist_ok=True)
            if not (memory / NAME / grading).is_dir():
                return None
        except OSError:
            return None
        return cls(1, memory / NAME / grading, pids / NAME)

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
            _sweep(base)

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


def cpu_weight(version: int) -> tuple[str, str]:
    """The file that weighs a CPU group against its siblings, and what every grading's holds: the kernel's
    default, a nice-0 process's weight (``cpu.weight`` 100 on v2, ``cpu.shares`` 1024 on v1).  One value
    for every grading, whatever its world size or number of processes: that is what makes the shares equal."""
    return ("cpu.weight", "100") if version == 2 else ("cpu.shares", "1024")


def parent_weight(version: int, gradings: int) -> str:
    """What ``dist-grader`` itself weighs against the machine's other programs while ``gradings`` run in
    it: as many nice-0 processes, so that each grading weighs what one such program does, as when each
    grading was an autogroup of its own (the kernel's largest weight at most)."""
    _, value = cpu_weight(version)
    return str(min(int(value) * max(1, gradings), 10_000 if version == 2 else 262_144))


@dataclass
class GradingCgroup:
    """One grading's group (issue 58): one CPU share, weighted as every other grading's, and one memory
    limit around all of its ranks.  The runner makes it (:meth:`make`) before the grading's first session,
    moves each session's host into it before the host becomes the session (:meth:`join`: the host and
    the zygote it forked; everything they fork later is born in it), tells the session its name
    (:data:`GRADING_ENV`) so that the session's groups nest in it, and closes it with the grading."""

    version: int
    cpu: Path  # v2: the grading's one directory; v1: its directory in the cpu hierarchy
    memory: Path  # v2: the same directory; v1: its directory in the memory hierarchy
    memory_mb: int

    @property
    def name(self) -> str:
        return self.cpu.name

    @classmethod
    def make(cls, memory_mb: int, root: Path = ROOT) -> GradingCgroup | str:
        """A new grading group under ``root`` whose ranks may hold ``memory_mb`` in all, or the isolation
        map's line where none is made: the container that stands for it (:data:`CONTAINER_ENV`), or why
        there is none (``"off: ..."``; the grading's processes then share the machine as any others do)."""
        container = os.environ.get(CONTAINER_ENV)
        if container:
            return f"on: the grading's container is its one group ({container}), weighted as every other container's"
        if not hasattr(os, "geteuid"):
            return (
                "off: no cgroups on this system: the grading's processes share the CPU and memory with its neighbours'"
            )
        if os.geteuid() != 0:
            return "off: cgroups need root: the grading's processes share the CPU and memory with its neighbours'"
        name = f"{os.getpid()}-grading-{next(_counter)}"
        controllers = root / "cgroup.controllers"
        try:
            if controllers.exists():
                if not {"cpu", "memory", "pids"} <= set(controllers.read_text().split()):
                    return "off: the cgroup v2 root does not offer the cpu, memory and pids controllers"
                return cls._make_v2(root, name, memory_mb)
            if (root / "cpu" / "cpu.shares").exists() and (root / "memory" / "memory.limit_in_bytes").exists():
                return cls._make_v1(root, name, memory_mb)
        except OSError as exc:
            return f"off: {exc}"
        return "off: no writable cgroup hierarchy with the cpu and memory controllers here"

    @classmethod
    def _make_v2(cls, root: Path, name: str, memory_mb: int) -> GradingCgroup:
        base = root / NAME
        base.mkdir(exist_ok=True)
        _sweep(base)
        for level in (root, base):
            _write(level / "cgroup.subtree_control", "+cpu +memory +pids")
        group = base / name
        group.mkdir()
        made = cls(2, group, group, memory_mb)
        try:
            weight, value = cpu_weight(2)
            _write(group / weight, value)
            _write(group / "memory.max", str(memory_mb << 20))
            _write(group / "cgroup.subtree_control", "+cpu +memory +pids")
            (group / "main").mkdir()
        except OSError:
            made.close()
            raise
        _weigh(base, 2)
        return made

    @classmethod
    def _make_v1(cls, root: Path, name: str, memory_mb: int) -> GradingCgroup:
        cpu, memory = root / "cpu" / NAME, root / "memory" / NAME
        for base in (cpu, memory):
            base.mkdir(exist_ok=True)
            _sweep(base)
        (cpu / name).mkdir()
        made = cls(1, cpu / name, memory / name, memory_mb)
        try:
            (memory / name).mkdir()
            weight, value = cpu_weight(1)
            _write(cpu / name / weight, value)
            _write(memory / name / "memory.limit_in_bytes", str(memory_mb << 20))
        except OSError:
            made.close()
            raise
        _weigh(cpu, 1)
        return made

    def layer(self) -> str:
        """The isolation map's line for this group."""
        weight, value = cpu_weight(self.version)
        return (
            f"on: one CPU group for the grading's processes, forks and setsid() children included, weighted "
            f"as every other grading's ({weight} {value}); its ranks' memory {self.memory_mb} MiB in all"
        )

    def procs(self) -> list[Path]:
        """Where the grading's own processes go: v2 allows none in a group whose children have controllers;
        v1 has a hierarchy per controller."""
        if self.version == 2:
            return [self.cpu / "main" / "cgroup.procs"]
        return [self.cpu / "cgroup.procs", self.memory / "cgroup.procs"]

    def join(self, pid: int) -> None:
        """Move ``pid`` and every process it has forked so far into the group, each before its children: a
        child forked meanwhile is born in the group, or found when its parent's children are read."""
        todo = [pid]
        while todo:
            now = todo.pop()
            for procs in self.procs():
                with contextlib.suppress(OSError):  # gone meanwhile: nothing of it is left to move
                    _write(procs, str(now))
            todo += _children(now)

    def close(self, timeout: float = 5.0) -> None:
        """Kill whatever of the grading is left in the group (its sessions closed their own groups), then
        remove it."""
        trees = [self.cpu] if self.memory == self.cpu else [self.cpu, self.memory]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = [pid for tree in trees for pid in _procs(tree, recursive=True)]
            if not alive:
                break
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        for tree in trees:
            _remove_tree(tree)
        _weigh(self.cpu.parent, self.version)


def _weigh(base: Path, version: int) -> None:
    """Weigh ``dist-grader`` as the gradings now in it (:func:`parent_weight`).  Two gradings that start or
    end together may both count: the last to write counts what is there, which is right."""
    gradings = sum(1 for group in base.iterdir() if "-grading-" in group.name and group.is_dir())
    with contextlib.suppress(OSError):
        _write(base / cpu_weight(version)[0], parent_weight(version, gradings))


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


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (none once it is gone)."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    return found


def _sweep(base: Path) -> None:
    """Remove the groups under ``base`` whose owner (the pid their name starts with) no longer runs."""
    for group in base.iterdir() if base.is_dir() else []:
        owner = group.name.split("-", 1)[0]
        if group.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
            _remove_tree(group)


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
