"""Isolation layers of a rank process, and the parent-side clean-up of whatever a case left behind.

Rank side, in this order (see ``grader.sandbox.rank``)::

    prepare(cfg)                      # fresh fork, still single-threaded: new mount namespace
    dist.init_process_group(...)      # Gloo starts its threads *inside* that namespace
    layers = enter(cfg)               # new root, rlimits, student uid, prctl; before student code

Why two calls: ``unshare(CLONE_NEWNS)`` and ``setns`` only move the *calling thread*, and Gloo
starts three threads during ``init_process_group``.  Threads created after :func:`prepare` inherit
its namespace and share its root/cwd, so the ``pivot_root`` in :func:`enter` moves every thread
of the rank, Gloo's included (a Gloo thread runs Python callbacks of ``Work.get_future().then``).
Between the two calls nothing changes for the grader: paths (the FileStore) still resolve, and
already-connected sockets and pipes are never touched.  Bubblewrap cannot do this: it needs exec,
and the rank must keep its imported torch.

Each layer is used when available and reported as ``"on"`` or ``"off: <reason>"``:

``rlimits``     RLIMIT_AS = current VmSize + memory_mb (torch alone maps ~640 MB), FSIZE, CPU, CORE=0.
``nproc``       RLIMIT_NPROC, which counts every task (threads too) of the rank's uid on the machine.
                The limit is the tasks that uid has when the rank enters + ``nproc``: the ranks of
                every live group (Gloo threads included) already hold dozens, so an absolute limit
                would leave the student nothing, or everything.  It binds only the rank and its
                descendants, so the grader itself never hits it.  Root ignores RLIMIT_NPROC, so root
                without a separate uid reports it off.
``prctl``       PDEATHSIG=SIGKILL (a rank dies with its parent), DUMPABLE=0 (other ranks of the same
                uid cannot read its /proc/<pid>/mem, environ, cwd), NO_NEW_PRIVS (no setuid binaries).
``uid``         root only: setgroups([]), setgid, setuid to ``student_user`` (the image's ``student``;
                :func:`default_student_user` falls back to ``nobody``).  Scratch is handed to that uid.
``filesystem``  a tmpfs root holding read-only binds of ``allow_read`` and the sandbox, scratch and a
                fresh /tmp (rw), /dev/{null,zero,random,urandom,shm} and a fresh /proc that hides other
                uids' processes; ``pivot_root`` into it and the old root detached.  As root this is a
                plain mount namespace; otherwise an unprivileged user namespace, where /proc is left
                out (the host's /proc would lead back to the host root via /proc/<ppid>/root).
``fds``         reported only: "off" names every inherited descriptor (not in ``keep_fds``) of a file or
                directory, since one reaches past any new root through ``openat`` or /proc/self/fd.
``network``     ``netns`` given (root only: see :func:`loopback_namespace`): the rank joins that network
                namespace, where only loopback is up, before Gloo starts, in :func:`prepare`; a group's
                ranks share it and see no other network.  Otherwise off: the host network is shared.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import pwd
import resource
import signal
import site
import socket
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
_OLD_ROOT = ".old-root"
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_DEVICES = ("null", "zero", "random", "urandom")
NETWORK_OFF = "off: local backend shares the host network; use --backend docker"


def default_allow_read() -> tuple[Path, ...]:
    """What a rank must read for Python and torch to keep working, and nothing more.

    Deliberately not ``sys.path``: it holds the directory the grader was started from, which may
    be a checkout with ``reference/`` in it.
    """
    import grader

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()]
    paths += [site.getusersitepackages()]
    paths += [str(Path(grader.__file__).parent), "/usr/lib", "/usr/lib64", "/lib", "/lib64"]
    paths += ["/usr/share/zoneinfo", "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf"]
    paths += ["/etc/localtime", "/etc/ld.so.cache"]
    return tuple(dict.fromkeys(Path(p) for p in paths if os.path.exists(p)))


def default_student_user() -> str | None:
    """``student`` (the Docker image's user) when it exists, else ``nobody``, else None.

    ``nobody`` is shared with other daemons on some hosts: :func:`kill_by_uid` must not be used then.
    """
    for name in ("student", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            pass
    return None


@dataclass(frozen=True)
class IsolationConfig:
    sandbox: Path  # the student files; bound read-only at the same path
    scratch: Path  # private writable dir of this rank (created by the parent): cwd, TMPDIR, HOME
    memory_mb: int = 2048  # address space the student may add on top of what the rank already maps
    nproc: int = 64  # tasks (processes + threads) the student may add, see ``nproc`` above
    cpu_s: int = 60  # CPU seconds of the rank (SIGXCPU, then SIGKILL 5 s later)
    file_size_mb: int = 64  # largest file the rank may write; also the size of its /tmp
    student_user: str | None = None  # run as this user when root; None: stay the grader's uid
    allow_read: tuple[Path, ...] = field(default_factory=default_allow_read)  # bound read-only
    keep_fds: tuple[int, ...] = ()  # descriptors above 2 the rank needs (pipes); others are reported
    netns: Path | None = None  # a network namespace to join, e.g. /proc/<holder>/ns/net


@dataclass
class _State:
    """What :func:`prepare` did, for :func:`enter` to finish and report (one per rank process)."""

    network: str = NETWORK_OFF
    filesystem: str = "off: prepare() was not called before init_process_group"
    host_uid: int = field(default_factory=os.getuid)  # the uid outside any user namespace
    root: bool = field(default_factory=lambda: os.geteuid() == 0)  # privileged on the host


_state = _State()


def prepare(cfg: IsolationConfig) -> None:
    """Rank side, before ``init_process_group``: enter a new mount (and maybe network) namespace.

    Must run while the rank is single-threaded (a fresh fork is).  Leaves every path visible.
    """
    global _state
    _state = _State()
    if cfg.netns is not None:
        _state.network = _join_netns(cfg.netns)
    elif _only_loopback():
        _state.network = "on"  # no interface but lo exists here: a container without network
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
    layers["uid"] = _drop_uid(cfg, account) if isinstance(account, pwd.struct_passwd) else account
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
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd in cfg.keep_fds:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, already closed
        if target.startswith("/") and not target.startswith(("/dev/null", "/proc/")):
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
    count = 0
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1 0").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


#: Tasks the grader's own rank processes may add under the student uid after a rank has set its
#: limit: every world size's group alive at once (23 ranks) with their threads, and a second grading.
GRADER_TASKS_RESERVE = 512


def _set_nproc(cfg: IsolationConfig, account: pwd.struct_passwd | str) -> str:
    if isinstance(account, pwd.struct_passwd):  # this rank's own threads join that uid's count
        # RLIMIT_NPROC is checked against the uid's *total* when any of its tasks clones, including
        # the Gloo threads of ranks of groups started later: leave room for those, or an honest
        # rank's thread creation fails (seen as aborts and stalls) once enough groups are alive.
        limit = _tasks_of_uid(account.pw_uid) + _threads() + GRADER_TASKS_RESERVE + cfg.nproc
    elif _state.root:
        return "off: root ignores RLIMIT_NPROC and no separate uid is in use"
    else:
        limit = _tasks_of_uid(_state.host_uid) + cfg.nproc
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    except (OSError, ValueError) as exc:
        return f"off: {exc}"
    return "on"


# --- prctl ---------------------------------------------------------------------------------------


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _set_prctl() -> str:
    """After the uid change, which resets both PDEATHSIG and DUMPABLE."""
    parent = os.getppid()
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(PR_SET_DUMPABLE, 0)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    except OSError as exc:
        return f"off: prctl failed: {exc}"
    if os.getppid() != parent:  # the parent died before PDEATHSIG was armed
        os._exit(1)
    return "on"


# --- separate uid --------------------------------------------------------------------------------


def _student_account(cfg: IsolationConfig, fs_on: bool) -> pwd.struct_passwd | str:
    """The account to switch to, or why there is none ("off: ...")."""
    if not _state.root:
        return "off: not running as root"
    if cfg.student_user is None:
        return "off: no student user configured"
    try:
        account = pwd.getpwnam(cfg.student_user)
    except KeyError:
        return f"off: user {cfg.student_user!r} does not exist"
    if account.pw_uid == 0:
        return f"off: user {cfg.student_user!r} is root"
    if not fs_on:  # without the new root, the host's permissions decide what that uid may read
        for path in (*cfg.allow_read, cfg.sandbox):
            if not _readable_by(path, account):
                return f"off: {path} is not readable by {cfg.student_user}"
    return account


def _readable_by(path: Path, account: pwd.struct_passwd) -> bool:
    """Mode bits only (no ACLs): may ``account`` reach and read ``path``?"""

    def allows(st: os.stat_result, bit: int) -> bool:
        if st.st_uid == account.pw_uid:
            return bool(st.st_mode & (bit << 6))
        if st.st_gid == account.pw_gid:
            return bool(st.st_mode & (bit << 3))
        return bool(st.st_mode & bit)

    try:
        ancestors = [os.stat(p) for p in reversed(Path(path).parents)]
        target = os.stat(path)
    except OSError:
        return False
    is_dir = os.path.isdir(path)
    return all(allows(st, 1) for st in ancestors) and allows(target, 4) and (not is_dir or allows(target, 1))


def _drop_uid(cfg: IsolationConfig, account: pwd.struct_passwd) -> str:
    """glibc applies set*id to every thread of the process, Gloo's included."""
    try:
        os.chmod(cfg.scratch, 0o700)  # before the chown: root without CAP_FOWNER cannot chmod it after
        os.chown(cfg.scratch, account.pw_uid, account.pw_gid)
        os.setgroups([])
        os.setgid(account.pw_gid)
        os.setuid(account.pw_uid)
    except OSError as exc:
        if os.geteuid() != 0:  # half-done: neither root nor the student; never run student code
            os._exit(70)
        return f"off: {exc}"
    return "on"


# --- filesystem ----------------------------------------------------------------------------------


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    kind = fstype.encode() if fstype else None
    options = data.encode() if data else None
    _check(_libc.mount(source.encode(), target.encode(), kind, flags, options), f"mount {target}")


def _new_mount_namespace() -> str:
    if _threads() > 1:
        return "off: multi-threaded (call prepare() before init_process_group)"
    flags = CLONE_NEWNS if _state.root else CLONE_NEWNS | CLONE_NEWUSER
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(flags) != 0:
        return f"off: unshare: {os.strerror(ctypes.get_errno())}"
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
    _bind(Path(cfg.sandbox).resolve(), root, writable=False)
    _bind(Path(cfg.scratch).resolve(), root, writable=True)
    (root / "dev" / "shm").mkdir(parents=True)
    _mount("tmpfs", str(root / "dev" / "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for dev in _DEVICES:
        (root / "dev" / dev).touch()
        _mount(f"/dev/{dev}", str(root / "dev" / dev), None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "fd/0"), ("stdout", "fd/1"), ("stderr", "fd/2")):
        os.symlink(target, root / "dev" / name)
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
    try:
        _check(_libc.syscall(_SYS_PIVOT_ROOT, root.encode(), f"{root}/{_OLD_ROOT}".encode()), "pivot_root")
        os.chdir("/")
        _check(_libc.umount2(f"/{_OLD_ROOT}".encode(), MNT_DETACH), "umount old root")
        os.rmdir(f"/{_OLD_ROOT}")
        _mount("none", "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError as exc:
        # A half-switched root cannot be trusted to hold anything back: never run student code.
        sys.stderr.write(f"isolation: {exc}\n")
        os._exit(70)
    return "on"


# --- network -------------------------------------------------------------------------------------


def _only_loopback() -> bool:
    try:
        return os.listdir("/sys/class/net") == ["lo"]
    except OSError:
        return False


def _join_netns(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return f"off: {exc}"
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            return f"off: setns: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # the only interface there
    return "on"


# --- parent side ---------------------------------------------------------------------------------


def loopback_namespace() -> int:
    """Parent side, root only: fork a holder of a new network namespace where only ``lo`` is up.

    Returns the holder's pid: give its ``/proc/<pid>/ns/net`` as ``netns`` to every rank of one
    group, and kill the holder once the group has started (the ranks keep the namespace alive).
    The holder dies with this process.  Raises OSError when namespaces are not permitted.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                request = struct.pack("16sH14x", b"lo", 0)
                flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
                fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
            os.write(write, b"ok")
        except BaseException as exc:
            os.write(write, str(exc).encode()[:500])
            os._exit(1)
        os.close(write)
        while True:
            signal.pause()
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    if answer != b"ok":
        os.waitpid(pid, 0)
        raise OSError(f"no network namespace: {answer.decode(errors='replace')}")
    return pid


def become_subreaper() -> None:
    """Parent side, once: orphans of our descendants (``setsid`` + double fork) come back to us."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def _descendants(ancestor: int, spare: frozenset[int] = frozenset()) -> dict[int, tuple[str, int]]:
    """Descendants of ``ancestor``, leaving out the ``spare`` processes and everything below them."""
    table = {pid: st for pid in _pids() if (st := _stat(pid)) is not None}
    found: dict[int, tuple[str, int]] = {}
    frontier = [ancestor]
    while frontier:
        parent = frontier.pop()
        for pid, (state, ppid) in table.items():
            if ppid == parent and pid not in found and pid not in spare:
                found[pid] = (state, ppid)
                frontier.append(pid)
    return found


def reap_descendants(timeout: float = 2.0, spare: frozenset[int] = frozenset()) -> int:
    """Parent side: SIGKILL every descendant of this process and reap the ones that become ours.

    Kills all descendants but the ``spare`` ones (the ranks of other live groups) and their
    subtrees: call it once the ranks' exit statuses have been collected.  Needs
    :func:`become_subreaper` to catch processes that detached.  Returns how many were killed.
    """
    me = os.getpid()
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        found = _descendants(me, spare)
        for pid, (state, _) in found.items():
            if state != "Z":
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
        for pid, (_, ppid) in found.items():
            if ppid == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        if not found or time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.01)


def kill_by_uid(uid: int) -> None:
    """Root only: SIGKILL every process of ``uid`` (``kill(-1)`` from a child that became it).

    Only for a uid no one else uses (the image's ``student``): it also ends other gradings
    running under that uid at the same time.
    """
    if uid == 0:
        raise ValueError("refusing to kill every process of root")
    for _ in range(10):  # a fork bomb may outrun one pass
        pid = os.fork()
        if pid == 0:  # kill(-1) reaches exactly the processes this uid may signal: its own
            try:
                os.setgroups([])
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            except OSError as exc:
                os._exit(0 if exc.errno == errno.ESRCH else 1)
            os._exit(0)
        os.waitpid(pid, 0)
        if not any(_uid_of(p) == uid for p in _pids()):
            return


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
