"""Isolation layers of a rank process, entered before any student code runs.

Rank side, in this order (see ``grader.runtimes.torchdist.rank``)::

    prepare(cfg)                      # fresh fork, still single-threaded: new mount + IPC namespaces
    dist.init_process_group(...)      # Gloo starts its threads *inside* that namespace
    layers = enter(cfg)               # new root, rlimits, the rank's own uid, prctl; before student code

Why two calls: ``unshare(CLONE_NEWNS)`` and ``setns`` only move the *calling thread*, and Gloo
starts three threads during ``init_process_group``.  Threads created after :func:`prepare` inherit
its namespace and share its root/cwd, so the ``pivot_root`` in :func:`enter` moves every thread
of the rank, Gloo's included (a Gloo thread runs Python callbacks of ``Work.get_future().then``).
Between the two calls nothing changes for the grader: paths (the FileStore) still resolve, and
already-connected sockets and pipes are never touched.  Bubblewrap cannot do this: it needs exec,
and the rank must keep its imported torch.

The group's own layers (a PID namespace, a network namespace with only ``lo``, cgroups) are
entered by the group's leader and init before the ranks exist (``grader.runtimes.torchdist.zygote``).

Each layer is used when available and reported as ``"on"`` or ``"off: <reason>"``:

``rlimits``     RLIMIT_AS = current VmSize + memory_mb (torch alone maps ~640 MB), FSIZE, CPU, CORE=0.
                The cgroup (``grader.sandbox.cgroups``) is the bound that counts; RLIMIT_AS stops a
                plain oversized allocation early with a MemoryError the student can read, and is the
                only memory bound where no cgroup can be made.
``nproc``       RLIMIT_NPROC, which counts every task (threads too) of the rank's uid on the machine:
                the tasks that uid has when the rank enters + ``nproc``.  Each rank of a grading slot
                has a uid of its own (``grader.sandbox.slots``), so the count is this rank's.  Root
                ignores RLIMIT_NPROC, so root without a separate uid reports it off.
``prctl``       PDEATHSIG=SIGKILL (a rank dies with its init), DUMPABLE=0 (no /proc/<pid>/mem, environ,
                cwd for anyone but root), NO_NEW_PRIVS (no setuid binaries; needed by seccomp).
``uid``         root only: setgroups([]), setgid and setuid to the rank's own uid and gid, numbers no
                account uses (so ``kill(-1)`` from the rank reaches only the rank's own processes).
``filesystem``  a tmpfs root holding read-only binds of ``allow_read`` (with ``hide`` covered by
                empty directories: the installed grader package) and the sandbox, a tmpfs scratch
                (the rank's cwd, HOME, TMPDIR) and /tmp, /dev/{null,zero,random,urandom,shm} and a
                fresh /proc that shows only the rank's own processes; ``pivot_root`` into it and the
                old root detached.  Every tmpfs page is counted by the rank's memory cgroup.  As
                root this is a plain mount namespace; otherwise an unprivileged user namespace,
                where /proc is left out (the host's /proc would lead back to the host root).
``ipc``         a new IPC namespace per rank: no System V shared memory or message queue is shared
                with another rank (traffic that would never cross the measured network).
``fds``         reported only: "off" names every inherited descriptor (not in ``keep_fds``) of a file or
                directory, since one reaches past any new root through ``openat`` or /proc/self/fd.
``network``     "on" when the rank's network namespace has only ``lo`` (the group's own, or a
                container without network); otherwise off: the host network is shared.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import site
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.sandbox import libc
from grader.sandbox.descriptors import fd_targets
from grader.sandbox.libc import (
    CLONE_NEWIPC,
    CLONE_NEWNS,
    CLONE_NEWUSER,
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
)
from grader.sandbox.namespaces import in_user_namespace
from grader.sandbox.reaping import pids

try:
    import resource
except ImportError:  # Windows: the portable runtime, which reports rlimits off, never calls for it
    resource = None  # type: ignore[assignment]


_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
_OLD_ROOT = ".old-root"
_DEVICES = ("null", "zero", "random", "urandom")
NETWORK_OFF = "off: the rank shares the host's network (a network namespace needs root)"


def default_allow_read() -> tuple[Path, ...]:
    """What a rank must read for Python and torch to keep working, and nothing more.

    Deliberately not ``sys.path``: it holds the directory the grader was started from, which may
    be a checkout with ``reference/`` in it.  Nor the grader package: the zygote imported all of
    the rank runtime before any rank was forked (see :func:`default_hide`).
    """
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()]
    paths += [site.getusersitepackages(), "/usr/lib", "/usr/lib64", "/lib", "/lib64"]
    paths += ["/usr/share/zoneinfo", "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf"]
    paths += ["/etc/localtime", "/etc/ld.so.cache"]
    return tuple(dict.fromkeys(Path(p) for p in paths if os.path.exists(p)))


def default_hide() -> tuple[Path, ...]:
    """The installed grader package, wherever it lies (inside site-packages when pip installed it):
    its catalog, expected values and rubrics are the session's business, not a rank's."""
    import grader

    return (Path(grader.__file__).resolve().parent,)


@dataclass(frozen=True)
class IsolationConfig:
    sandbox: Path  # the student files; bound read-only at the same path
    scratch: Path  # private dir of this rank (created by the session): cwd, TMPDIR, HOME; a tmpfs inside
    memory_mb: int = 2048  # address space the student may add on top of what the rank already maps
    nproc: int = 64  # tasks (processes + threads) the student may add, see ``nproc`` above
    cpu_s: int = 60  # CPU seconds of the rank (SIGXCPU, then SIGKILL 5 s later)
    file_size_mb: int = 64  # largest file the rank may write; also the size of its /tmp and scratch
    uid: int | None = None  # root only: run as this uid (and ``gid``); None: keep the grader's uid
    gid: int | None = None
    allow_read: tuple[Path, ...] = field(default_factory=default_allow_read)  # bound read-only
    hide: tuple[Path, ...] = field(default_factory=default_hide)  # covered where allow_read reaches them
    keep_fds: tuple[int, ...] = ()  # descriptors above 2 the rank needs (pipes); others are reported


def _euid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1  # Windows has no uids: never root


@dataclass
class _State:
    """What :func:`prepare` did, for :func:`enter` to finish and report (one per rank process)."""

    network: str = NETWORK_OFF
    filesystem: str = "off: prepare() was not called before init_process_group"
    ipc: str = "off: prepare() was not called before init_process_group"
    host_uid: int = field(default_factory=lambda: os.getuid() if hasattr(os, "getuid") else -1)  # outside any userns
    root: bool = field(default_factory=lambda: _euid() == 0)  # root here (maybe in a rootless user namespace)
    #: privileged on the host, not only in a user namespace: only then can the rank get a uid of its own
    host_root: bool = field(default_factory=lambda: _euid() == 0 and not in_user_namespace())


_state = _State()


def prepare(cfg: IsolationConfig) -> None:
    """Rank side, before ``init_process_group``: enter a new mount (and maybe network) namespace.

    Must run while the rank is single-threaded (a fresh fork is).  Leaves every path visible.
    """
    global _state
    _state = _State()
    if _only_loopback():
        _state.network = "on"  # the group's namespace, or a container without network
    _state.filesystem = _new_mount_namespace()
    if _state.filesystem == "on":
        try:
            _state.filesystem = _build_root(cfg)
        except OSError as exc:
            _state.filesystem = f"off: building the new root failed: {exc}"


def enter(cfg: IsolationConfig) -> dict[str, str]:
    """Rank side, after ``init_process_group`` and before any student code: enter every layer.

    Returns layer -> ``"on"`` | ``"off: <reason>"``.  Irreversible.
    """
    # Everything that reads /proc or the host's /etc comes first: the new root may have neither.
    layers = {"rlimits": _set_rlimits(cfg), "fds": _check_fds(cfg)}
    account = _student_account(cfg, fs_on=_state.filesystem == "on")
    layers["nproc"] = _set_nproc(cfg, account)
    layers["filesystem"] = _pivot(cfg) if _state.filesystem == "on" else _state.filesystem
    layers["ipc"] = _state.ipc
    if isinstance(account, tuple) and layers["filesystem"] != "on":
        # No new root mounts the rank a scratch of its own (Docker's default seccomp refuses pivot_root:
        # GitHub Classroom's container), so the session's directory becomes the uid's: its cwd and TMPDIR.
        os.chown(cfg.scratch, *account, follow_symlinks=False)
    layers["uid"] = _drop_uid(account) if isinstance(account, tuple) else account
    layers["prctl"] = _set_prctl()
    layers["network"] = _state.network
    scratch = str(cfg.scratch)
    os.chdir(scratch)
    os.environ.update({"TMPDIR": scratch, "HOME": scratch})
    tempfile.tempdir = None  # recomputed from TMPDIR on next use
    return layers


def _check_fds(cfg: IsolationConfig) -> str:
    """An inherited descriptor of a file or directory reaches past any new root (``openat``,
    ``/proc/self/fd/N``).  Nothing is closed here (the caller owns its descriptors): only reported."""
    leaks = []
    for fd, target in fd_targets():
        if fd <= 2 or fd in cfg.keep_fds:
            continue
        # a memfd (the rank's status slot) is anonymous memory: no way to any file
        if target.startswith("/") and not target.startswith(("/dev/null", "/proc/", "/memfd:")):
            leaks.append(f"{fd} ({target})")
    return f"off: open descriptors reach outside the sandbox: {', '.join(leaks)}" if leaks else "on"


# --- resource limits -----------------------------------------------------------------------------


def _vm_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def _set_rlimits(cfg: IsolationConfig) -> str:
    try:
        limits = {
            resource.RLIMIT_AS: (_vm_size() + (cfg.memory_mb << 20),) * 2,
            resource.RLIMIT_FSIZE: (cfg.file_size_mb << 20,) * 2,
            resource.RLIMIT_CPU: (cfg.cpu_s, cfg.cpu_s + 5),
            resource.RLIMIT_CORE: (0, 0),
        }
        for which, (soft, hard) in limits.items():
            _, old_hard = resource.getrlimit(which)
            if old_hard != resource.RLIM_INFINITY:
                soft, hard = min(soft, old_hard), min(hard, old_hard)
            resource.setrlimit(which, (soft, hard))
    except (OSError, ValueError) as exc:
        return f"off: {exc}"
    return "on"


def _tasks_of_uid(uid: int) -> int:
    """Threads of every process whose real uid is ``uid``.  Every rank scans all of the machine's
    processes once (hundreds on a desktop), so each status file is read raw and only its two lines
    looked at: a third of the cost of parsing it as text (issue 23)."""
    count = 0
    mine = f"\nUid:\t{uid}\t".encode()  # the real uid: the first of four
    for pid in pids():
        try:
            fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
            try:
                status = os.read(fd, 1 << 14)
            finally:
                os.close(fd)
        except OSError:
            continue  # gone meanwhile
        if mine in status:
            _, _, threads = status.partition(b"\nThreads:\t")
            count += int(threads.split(b"\n", 1)[0] or b"1")
    return count


def _set_nproc(cfg: IsolationConfig, account: tuple[int, int] | str) -> str:
    if isinstance(account, tuple):  # the rank's own uid: its tasks so far (other groups') + this rank's
        limit = _tasks_of_uid(account[0]) + _threads() + cfg.nproc
    elif _state.host_root:
        return "off: root ignores RLIMIT_NPROC and no separate uid is in use"
    else:
        limit = _tasks_of_uid(_state.host_uid) + cfg.nproc
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    except (OSError, ValueError) as exc:
        return f"off: {exc}"
    return "on"


# --- prctl ---------------------------------------------------------------------------------------


def _set_prctl() -> str:
    """After the uid change, which resets both PDEATHSIG and DUMPABLE."""
    parent = os.getppid()
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.prctl(PR_SET_DUMPABLE, 0)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1)
    except OSError as exc:
        return f"off: prctl failed: {exc}"
    if os.getppid() != parent:  # the parent died before PDEATHSIG was armed
        os._exit(1)
    return "on"


# --- separate uid --------------------------------------------------------------------------------


def _student_account(cfg: IsolationConfig, fs_on: bool) -> tuple[int, int] | str:
    """(uid, gid) to switch to, or why there is none ("off: ...")."""
    if not _state.root:
        return "off: not running as root"
    if not _state.host_root:
        return "off: a rootless user namespace maps one uid (a uid per rank needs root)"
    if cfg.uid is None or cfg.gid is None:
        return "off: no uid configured for the rank"
    if cfg.uid == 0:
        return "off: the configured uid is root's"
    if not fs_on:  # without the new root, the host's permissions decide what that uid may read
        for path in (*cfg.allow_read, cfg.sandbox):
            if not _readable_by(path, cfg.uid, cfg.gid):
                return f"off: {path} is not readable by uid {cfg.uid}"
    return cfg.uid, cfg.gid


def _readable_by(path: Path, uid: int, gid: int) -> bool:
    """Mode bits only (no ACLs): may ``uid`` reach and read ``path``?"""

    def allows(st: os.stat_result, bit: int) -> bool:
        if st.st_uid == uid:
            return bool(st.st_mode & (bit << 6))
        if st.st_gid == gid:
            return bool(st.st_mode & (bit << 3))
        return bool(st.st_mode & bit)

    try:
        ancestors = [os.stat(p) for p in reversed(Path(path).parents)]
        target = os.stat(path)
    except OSError:
        return False
    is_dir = os.path.isdir(path)
    return all(allows(st, 1) for st in ancestors) and allows(target, 4) and (not is_dir or allows(target, 1))


def _drop_uid(account: tuple[int, int]) -> str:
    """glibc applies set*id to every thread of the process, Gloo's included."""
    uid, gid = account
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as exc:
        if os.geteuid() != 0:  # half-done: neither root nor the rank's uid; never run student code
            os._exit(1)
        return f"off: {exc}"
    return "on"


# --- filesystem ----------------------------------------------------------------------------------


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    kind = fstype.encode() if fstype else None
    options = data.encode() if data else None
    libc.check(libc.LIBC.mount(source.encode(), target.encode(), kind, flags, options), f"mount {target}")


def _new_mount_namespace() -> str:
    """A mount namespace of the rank's own, with a new IPC namespace alongside (``_state.ipc``)."""
    if _threads() > 1:
        return "off: multi-threaded (call prepare() before init_process_group)"
    flags = CLONE_NEWNS | CLONE_NEWIPC if _state.root else CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUSER
    uid, gid = os.getuid(), os.getgid()
    if libc.LIBC.unshare(flags) != 0:
        reason = f"off: unshare: {os.strerror(ctypes.get_errno())}"
        _state.ipc = reason
        return reason
    _state.ipc = "on"
    try:
        if flags & CLONE_NEWUSER:  # map ourselves to root of the namespace to be allowed to mount
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
            Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
        _mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing we mount reaches the host
    except OSError as exc:
        return f"off: {exc}"
    return "on"


def _root_dir(cfg: IsolationConfig) -> Path:
    # Inside scratch, so nothing is created on the host outside the rank's own directory.
    return cfg.scratch / ".root"


def _bind(source: Path, root: Path, writable: bool) -> None:
    target = root / source.relative_to("/")
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    _mount(str(source), str(target), None, MS_BIND)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY)
    _mount("none", str(target), None, flags)


def _build_root(cfg: IsolationConfig) -> str:
    """Assemble the new root in scratch/.root; :func:`_pivot` switches to it after Gloo is up."""
    root = _root_dir(cfg)
    root.mkdir(mode=0o755, exist_ok=True)
    _mount("tmpfs", str(root), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    # First /tmp, so that binds of paths under /tmp (sandbox, scratch) land on top of it.
    (root / "tmp").mkdir()
    _mount("tmpfs", str(root / "tmp"), "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={cfg.file_size_mb}m")
    real = sorted({Path(os.path.realpath(p)) for p in cfg.allow_read if os.path.exists(p)})
    for path in real:
        if not any(other in path.parents for other in real):
            _bind(path, root, writable=False)
    for path in map(Path, cfg.allow_read):  # links such as /lib -> usr/lib must resolve too
        link = root / path.relative_to("/")
        parent_is_real = os.path.realpath(path.parent) == str(path.parent)
        if path.is_symlink() and parent_is_real and not os.path.lexists(link):
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(path), link)
    for hidden in cfg.hide:  # an empty read-only directory over what an allowed path would expose
        target = root / Path(hidden).resolve().relative_to("/")
        if target.is_dir():
            _mount("tmpfs", str(target), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0555,size=4k")
    _bind(Path(cfg.sandbox).resolve(), root, writable=False)
    scratch = root / Path(cfg.scratch).resolve().relative_to("/")
    scratch.mkdir(parents=True, exist_ok=True)
    owner = f",uid={cfg.uid},gid={cfg.gid}" if _state.root and cfg.uid is not None else ""
    _mount("tmpfs", str(scratch), "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0700,size={cfg.file_size_mb}m{owner}")
    (root / "dev" / "shm").mkdir(parents=True)
    _mount("tmpfs", str(root / "dev" / "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for dev in _DEVICES:
        (root / "dev" / dev).touch()
        _mount(f"/dev/{dev}", str(root / "dev" / dev), None, MS_BIND)
    for name, dest in (("fd", "/proc/self/fd"), ("stdin", "fd/0"), ("stdout", "fd/1"), ("stderr", "fd/2")):
        os.symlink(dest, root / "dev" / name)
    (root / "proc").mkdir()
    if _state.root:
        # hidepid: once the rank is the student, only the student's own processes are visible.
        _mount("proc", str(root / "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
    (root / _OLD_ROOT).mkdir()
    return "on"


def _pivot(cfg: IsolationConfig) -> str:
    """pivot_root moves every thread of this mount namespace: Gloo's threads were born in it."""
    root = str(_root_dir(cfg))
    if _SYS_PIVOT_ROOT is None:
        return f"off: pivot_root syscall number unknown on {platform.machine()}"
    if libc.LIBC.syscall(_SYS_PIVOT_ROOT, root.encode(), f"{root}/{_OLD_ROOT}".encode()) != 0:
        # Nothing has moved yet (Docker's default seccomp profile refuses pivot_root): the rank keeps
        # the host's root, and says so.
        return f"off: pivot_root: {os.strerror(ctypes.get_errno())}"
    try:
        os.chdir("/")
        libc.check(libc.LIBC.umount2(f"/{_OLD_ROOT}".encode(), MNT_DETACH), "umount old root")
        os.rmdir(f"/{_OLD_ROOT}")
        _mount("none", "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError as exc:
        # A half-switched root cannot be trusted to hold anything back: never run student code.
        sys.stderr.write(f"isolation: {exc}\n")
        os._exit(1)
    return "on"


# --- network -------------------------------------------------------------------------------------


def _only_loopback() -> bool:
    """Only ``lo`` in this thread's network namespace (not /sys/class/net: sysfs shows the namespace
    of whoever mounted it)."""
    try:
        return [name for _, name in socket.if_nameindex()] == ["lo"]
    except OSError:
        return False
