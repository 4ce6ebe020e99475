"""Isolation layers: a forked rank (from this torch-importing process) enters them, then tries the
forbidden things and reports back over a pipe.  Each test checks what one layer promises, and
asserts on the status the layer reports, so a layer that is off cannot pass as working."""

from __future__ import annotations

import datetime
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from grader.matrix.host import keep_spare
from grader.sandbox import descriptors, isolation, libc, namespaces, reaping
from grader.sandbox.isolation import IsolationConfig

ROOT = os.geteuid() == 0
REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "a9" / "src" / "collectives.py"
Probe = Callable[[IsolationConfig], dict[str, Any]]
NO_REPORT = {"crash": "no report"}


def _mount_namespaces_work() -> bool:
    return subprocess.run(["unshare", "-m", "true"] if ROOT else ["unshare", "-U", "-r", "-m", "true"]).returncode == 0


FS = _mount_namespaces_work()


@pytest.fixture(autouse=True)
def no_spare_host() -> Iterator[None]:
    """These tests count and reap this process's children: a spare session host is not one of theirs."""
    with keep_spare(False):
        yield


@pytest.fixture
def student() -> int:
    """A rank's own uid (also its gid): a number no account and no process has, as a grading uses."""
    return _unused_uid()


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """A sandbox, a host secret outside it, and the parent of the ranks' scratch dirs."""
    (tmp_path / "sandbox" / "src").mkdir(parents=True)
    (tmp_path / "sandbox" / "src" / "collectives.py").write_text("X = 1\n")
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret.txt").write_text("answer key")
    for path in [tmp_path, *tmp_path.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tmp_path


def config(world: Path, rank: int = 0, **overrides: Any) -> IsolationConfig:
    scratch = world / f"scratch{rank}"
    scratch.mkdir(mode=0o700, exist_ok=True)
    return IsolationConfig(sandbox=world / "sandbox", scratch=scratch, **overrides)


def run_ranks(
    world: Path,
    probe: Probe,
    world_size: int = 1,
    gloo: bool = True,
    prepare: bool = True,
    uid: int | None = None,
    netns: int | None = None,
    **overrides: Any,
) -> list[dict[str, Any]]:
    """Fork ``world_size`` ranks that prepare, join Gloo, enter, run ``probe``; return their reports.
    With ``uid``, rank r runs as uid + r (its own uid, as in a grading); with ``netns``, the ranks
    are born in that network namespace (as a group's leader arranges)."""
    store = world / f"store{time.monotonic_ns()}"
    children = []
    for rank in range(world_size):
        ids = {"uid": uid + rank, "gid": uid + rank} if uid is not None else {}
        cfg = config(world, rank, **ids, **overrides)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            report: dict[str, Any]
            try:
                if netns is not None:
                    namespaces.join_network_namespace(netns)
                if prepare:
                    isolation.prepare(cfg)
                if gloo:
                    dist.init_process_group(
                        "gloo",
                        store=dist.FileStore(str(store), world_size),
                        rank=rank,
                        world_size=world_size,
                        timeout=datetime.timedelta(seconds=60),
                    )
                report = {"layers": isolation.enter(cfg), **probe(cfg)}
            except BaseException as exc:
                report = {"crash": repr(exc)}
            send(write, report)
            os._exit(0)
        os.close(write)
        children.append((pid, read))
    reports = [receive(read) for _, read in children]
    for (pid, _), report in zip(children, reports, strict=True):
        status = os.waitpid(pid, 0)[1]
        if report == NO_REPORT:  # how the rank ended says what cut it short: a signal, or an exit before its report
            report["status"] = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {status >> 8}"
    assert all("crash" not in rep for rep in reports), reports
    return reports


def send(fd: int, report: dict[str, Any]) -> None:
    data = json.dumps(report).encode()
    os.write(fd, len(data).to_bytes(4, "big") + data)


def receive(fd: int) -> dict[str, Any]:
    """One length-prefixed report: EOF never comes while a process the probe left holds the pipe."""
    with os.fdopen(fd, "rb") as pipe:
        size = int.from_bytes(pipe.read(4) or b"\0", "big")
        return json.loads(pipe.read(size)) if size else dict(NO_REPORT)


def attempt(action: Callable[[], object]) -> str:
    try:
        action()
    except BaseException as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the listing's own descriptor, closed by now
        return ""


def on_or_off(expected_on: bool, status: str) -> None:
    assert status == "on" if expected_on else status.startswith("off: "), status


# --- resource limits -----------------------------------------------------------------------------


def test_memory_limit_stops_a_3_gib_allocation_but_not_a_modest_one(world: Path) -> None:
    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        return {
            "big": attempt(lambda: torch.empty(3 << 30, dtype=torch.uint8).fill_(1)),
            "modest": attempt(lambda: torch.empty(256 << 20, dtype=torch.uint8).fill_(1)),
        }

    (rep,) = run_ranks(world, probe, memory_mb=2048)
    assert rep["layers"]["rlimits"] == "on"
    assert "can't allocate memory" in rep["big"] or rep["big"].startswith("MemoryError"), rep["big"]
    assert rep["modest"] == "ok"


def test_core_dumps_off_and_file_size_bounded(world: Path) -> None:
    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # report EFBIG instead of dying
        with open(cfg.scratch / "big.bin", "wb") as f:
            grew = attempt(lambda: f.write(b"\0" * (2 << 20)) and f.flush())
        return {"core": resource.getrlimit(resource.RLIMIT_CORE), "grew": grew}

    (rep,) = run_ranks(world, probe, gloo=False, file_size_mb=1)
    assert rep["layers"]["rlimits"] == "on"
    assert rep["core"] == [0, 0]
    assert "File too large" in rep["grew"]


# --- separate uid and nproc ----------------------------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="a separate uid needs root")
def test_rank_runs_as_its_own_uid_and_cannot_signal_the_grader(world: Path, student: int) -> None:
    grader_pid = os.getpid()

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        return {
            "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()],
            "kill_grader": attempt(lambda: os.kill(grader_pid, 0)),
            "kill_everyone": attempt(lambda: os.kill(-1, 0)),  # reaches only this uid's processes
            "scratch_owner": os.stat(cfg.scratch).st_uid,
        }

    (rep,) = run_ranks(world, probe, uid=student)
    assert rep["layers"]["uid"] == "on"
    assert rep["ids"] == [student, student, student, []]
    assert rep["kill_grader"].startswith("PermissionError")
    assert rep["kill_everyone"] == "ok"  # itself
    assert rep["scratch_owner"] == student


def test_without_a_uid_the_uid_layer_says_why(world: Path) -> None:
    (rep,) = run_ranks(world, lambda cfg: {"uid": os.getuid()}, gloo=False)
    assert rep["layers"]["uid"] == ("off: no uid configured for the rank" if ROOT else "off: not running as root")
    assert rep["uid"] == os.getuid()
    if ROOT:
        assert rep["layers"]["nproc"] == "off: root ignores RLIMIT_NPROC and no separate uid is in use"


@pytest.mark.skipif(not ROOT, reason="a process of another uid needs root")
def test_the_tasks_of_a_uid_are_every_thread_of_its_processes_and_nothing_else(student: int) -> None:
    """What a rank's RLIMIT_NPROC is raised by: the threads its uid already runs elsewhere."""
    code = (
        "import threading, time\n"
        "for _ in range(3): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "print(flush=True)\n"
        "time.sleep(60)"
    )
    theirs = subprocess.Popen(["python3", "-c", code], user=student, group=student, stdout=subprocess.PIPE)
    try:
        assert theirs.stdout is not None and theirs.stdout.readline() == b"\n"  # its threads run
        assert isolation._tasks_of_uid(student) == 4  # main thread and three more
        assert isolation._tasks_of_uid(student + 1) == 0
    finally:
        theirs.kill()
        theirs.wait()


@pytest.mark.skipif(not ROOT, reason="a separate uid needs root")
def test_fork_bomb_is_bounded_and_its_children_reaped(world: Path, student: int) -> None:
    namespaces.become_subreaper()
    # what this test process already runs (an earlier test's fixture, an orphan it adopted) is not the bomb's
    before = frozenset(reaping.descendants(os.getpid()))

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        forked: list[int] = []
        while len(forked) < 10_000:
            try:
                pid = os.fork()
            except OSError as exc:
                return {"forked": forked, "stopped": exc.strerror}
            if pid == 0:
                time.sleep(300)
                os._exit(0)
            forked.append(pid)
        return {"forked": forked, "stopped": "never"}

    (rep,) = run_ranks(world, probe, uid=student, nproc=32)
    assert rep["layers"]["nproc"] == "on"
    assert rep["stopped"] == "Resource temporarily unavailable"
    assert len(rep["forked"]) == 32  # the rank's own uid: nothing else counts against it
    assert reaping.reap_descendants(spare=before) == len(rep["forked"])
    assert not [pid for pid in rep["forked"] if _alive(pid)]


@pytest.mark.skipif(not ROOT, reason="a separate uid needs root")
def test_what_a_case_leaves_running_ends_with_the_case_and_the_rank_lives_on(world: Path, student: int) -> None:
    """A fork bomb's processes would otherwise slow every later case of the group: a verdict of one
    case must not depend on what an earlier one left behind."""
    namespaces.become_subreaper()

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        left: list[int] = []
        for _ in range(3):  # children that would sleep through every later case
            if (pid := os.fork()) == 0:
                time.sleep(300)
                os._exit(0)
            left.append(pid)
        read, write = os.pipe()
        if os.fork() == 0:  # a setsid double fork: the grandchild is nobody's child of ours
            os.setsid()
            if (grandchild := os.fork()) == 0:
                time.sleep(300)
                os._exit(0)
            os.write(write, str(grandchild).encode())
            os._exit(0)
        left.append(int(os.read(read, 32)))
        reaping.end_strays()
        return {"left": left}

    (rep,) = run_ranks(world, probe, uid=student)  # the rank reports back: end_strays spared it
    assert rep["layers"]["uid"] == "on" and len(rep["left"]) == 4
    time.sleep(0.2)  # SIGKILL is delivered at once; exiting takes a moment
    try:
        assert [pid for pid in rep["left"] if _alive(pid)] == []
    finally:
        reaping.reap_descendants()


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                pids.append(int(name))
        except FileNotFoundError:
            pass
    return pids


# --- filesystem ----------------------------------------------------------------------------------


def test_rank_reads_only_its_sandbox_and_the_python_environment(world: Path, student: int) -> None:
    secret = world / "host" / "secret.txt"
    import grader

    catalog = Path(grader.__file__).parent / "packs" / "a9" / "catalog.py"
    targets = {"secret": secret, "reference": REFERENCE, "shadow": Path("/etc/shadow"), "grader": catalog}

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        import email.mime.text  # noqa: F401 - a lazy stdlib import still works

        out = {name: attempt(path.read_text) for name, path in targets.items()}
        out["sandbox"] = (cfg.sandbox / "src" / "collectives.py").read_text()
        return out

    assert secret.read_text() == "answer key"  # readable by everyone on the host
    (rep,) = run_ranks(world, probe, uid=student if ROOT else None)
    on_or_off(FS, rep["layers"]["filesystem"])
    assert rep["sandbox"] == "X = 1\n"
    if FS:
        for name in targets:  # the installed grader package too, wherever it lies
            assert rep[name].startswith("FileNotFoundError"), (name, rep[name])


def test_rank_writes_only_scratch_and_a_private_tmp(world: Path, student: int) -> None:
    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        def write(path: Path) -> str:
            return attempt(lambda: path.write_text("forged 100/100"))

        return {
            "scratch": write(cfg.scratch / "results.json"),
            "tmp": write(Path("/tmp/results.json")),
            "sandbox": write(cfg.sandbox / "junit.xml"),
            "beside": write(cfg.sandbox.parent / "results.json"),
            "root": write(Path("/results.json")),
            "cwd": os.getcwd(),
            "tmpdir": os.environ["TMPDIR"],
        }

    (rep,) = run_ranks(world, probe, uid=student if ROOT else None)
    on_or_off(FS, rep["layers"]["filesystem"])
    assert rep["cwd"] == rep["tmpdir"] == str(world / "scratch0")
    assert rep["scratch"] == "ok"
    if FS:
        assert not (world / "scratch0" / "results.json").exists()  # scratch is a tmpfs of the rank's own
        assert rep["tmp"] == "ok" and not (Path("/tmp/results.json").exists())  # a private /tmp
        for where in ("sandbox", "beside", "root"):
            assert rep[where].startswith(("OSError", "PermissionError", "FileNotFoundError")), rep[where]
        assert not (world / "sandbox" / "junit.xml").exists() and not (world / "results.json").exists()


@pytest.mark.skipif(not FS, reason="mount namespaces are not available here")
def test_gloo_threads_moved_to_the_new_root_with_the_rank(world: Path) -> None:
    """Gloo starts its threads in init_process_group, between prepare() and enter()."""

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        tasks = os.listdir("/proc/self/task")
        roots = {tid: tuple(os.stat(f"/proc/self/task/{tid}/root")[1:3]) for tid in tasks}
        work = dist.all_reduce(torch.ones(2), async_op=True)
        seen: list[str] = []
        work.get_future().then(lambda fut: seen.append(attempt((world / "host" / "secret.txt").read_text))).wait()
        return {"tasks": len(tasks), "roots": len(set(roots.values())), "callback": seen}

    reports = run_ranks(world, probe, world_size=2)
    for rep in reports:
        assert rep["layers"]["filesystem"] == "on"
        assert rep["tasks"] > 1  # Gloo's threads exist
        assert rep["roots"] == 1  # and share the rank's root
        assert rep["callback"][0].startswith("FileNotFoundError")


def test_enter_without_prepare_reports_the_filesystem_layer_off(world: Path) -> None:
    (rep,) = run_ranks(world, lambda cfg: {"secret": attempt((world / "host" / "secret.txt").read_text)}, prepare=False)
    assert rep["layers"]["filesystem"] == "off: prepare() was not called before init_process_group"
    assert rep["secret"] == "ok"


@pytest.fixture
def open_world(world: Path, student: int) -> Any:
    """``world`` where a non-root student can reach it (pytest's own tmp dir is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="isolation-"))
    base.chmod(0o755)
    shutil.copytree(world / "sandbox", base / "sandbox")
    shutil.copytree(world / "host", base / "host")
    (base / "scratch0").mkdir()
    os.chown(base / "scratch0", student, student)
    yield base
    shutil.rmtree(base)


@pytest.mark.skipif(not ROOT, reason="needs root to become a non-root user first")
def test_without_root_an_unprivileged_user_namespace_hides_the_host(open_world: Path, student: int) -> None:
    """The path a non-root grader takes: user + mount namespace, no /proc."""
    secret = open_world / "host" / "secret.txt"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(student)
            os.setuid(student)
            # What a rank of a non-root grader starts as (setuid made us non-dumpable).
            libc.prctl(libc.PR_SET_DUMPABLE, 1)
            isolation._state = isolation._State()
            cfg = IsolationConfig(
                sandbox=open_world / "sandbox",
                scratch=open_world / "scratch0",
                allow_read=tuple(Path(p) for p in ("/usr/lib", "/lib", "/etc/passwd") if os.path.exists(p)),
            )
            assert secret.read_text() == "answer key"  # the student can read it on the host
            isolation.prepare(cfg)
            report = {"layers": isolation.enter(cfg), "secret": attempt(secret.read_text)}
            report["proc"] = os.path.exists("/proc/1")
            report["sandbox"] = (cfg.sandbox / "src" / "collectives.py").read_text()
        except BaseException as exc:
            report = {"crash": repr(exc)}
        send(write, report)
        os._exit(0)
    os.close(write)
    rep = receive(read)
    os.waitpid(pid, 0)
    assert "crash" not in rep, rep
    if subprocess.run(["unshare", "-U", "-r", "true"]).returncode != 0:
        assert rep["layers"]["filesystem"].startswith("off: ")
        return
    assert rep["layers"]["filesystem"] == "on"
    assert rep["layers"]["uid"] == "off: not running as root"
    assert rep["layers"]["nproc"] == "on"
    assert rep["sandbox"] == "X = 1\n"
    assert rep["secret"].startswith("FileNotFoundError")
    assert rep["proc"] is False


# --- network -------------------------------------------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="a network namespace others can join needs root")
def test_making_a_groups_namespace_leaves_the_session_in_its_own() -> None:
    """As root the session's own thread makes the namespace (no helper process) and comes back."""
    from grader.sandbox import netns

    home = os.readlink("/proc/thread-self/ns/net")
    network = netns.loopback_namespace()
    try:
        assert os.readlink("/proc/thread-self/ns/net") == home
        assert os.readlink(f"/proc/self/fd/{network.netns}") != home
    finally:
        network.close()


def test_a_rank_lists_its_established_tcp_connections_and_no_other_socket() -> None:
    """What the ready frame says of the rank's sockets: [local port, remote port] of each connected
    TCP socket, read from the sockets themselves; a listener, a UDP socket and a Unix pair are left out."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    others = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM), *socket.socketpair()]
    try:
        here, there = client.getsockname()[1], server.getsockname()[1]
        assert descriptors.tcp_connections() == sorted([[here, there], [there, here]])
        assert client.getpeername() == accepted.getsockname()  # each descriptor is left open, as it was
    finally:
        for sock in (server, client, accepted, *others):
            sock.close()


@pytest.mark.skipif(not ROOT, reason="a network namespace others can join needs root")
def test_a_group_in_a_loopback_namespace_reaches_its_peers_and_nothing_else(world: Path) -> None:
    from grader.sandbox import netns

    network = netns.loopback_namespace()
    server = socket.create_server(("127.0.0.1", 0))  # a host service a rank must not reach
    port = server.getsockname()[1]

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        total = torch.ones(2)
        dist.all_reduce(total)  # Gloo joined the group inside the namespace

        def connect(address: tuple[str, int]) -> None:
            socket.create_connection(address, timeout=5).close()

        return {
            "sum": total.tolist(),
            "interfaces": [name for _, name in socket.if_nameindex()],
            "host_port": attempt(lambda: connect(("127.0.0.1", port))),
            "outside": attempt(lambda: connect(("192.0.2.1", 80))),
        }

    try:
        reports = run_ranks(world, probe, world_size=2, netns=network.netns)
    finally:
        network.close()
        server.close()
    for rep in reports:
        assert rep["layers"]["network"] == "on"
        assert rep["sum"] == [2.0, 2.0]
        assert rep["interfaces"] == ["lo"]
        assert rep["host_port"].startswith("ConnectionRefusedError")
        assert rep["outside"] == "OSError: [Errno 101] Network is unreachable"


def test_after_gloo_connected_a_rank_can_make_no_traffic_of_its_own(world: Path) -> None:
    """The seccomp filter: no socket of any kind, no connection, no socket option and no urgent data
    on Gloo's sockets; Gloo's own streams keep working."""
    from grader.sandbox import syscalls

    syscalls.preload()  # as the zygote does: built before the new root hides libseccomp

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        filtered = syscalls.install()
        gloo = [int(fd) for fd in os.listdir("/proc/self/fd") if _link(f"/proc/self/fd/{fd}").startswith("socket:")]
        sock = socket.socket(fileno=gloo[0])  # one of Gloo's: the student can find them too
        tries = {
            "udp": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
            "empty datagram": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"", ("127.0.0.1", 9)),
            "tcp": lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),
            "raw": lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP),
            "unix pair": lambda: socket.socketpair(),
            "ip options": lambda: sock.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([7, 4, 4, 0])),
            "tos": lambda: sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x20),
            "urgent data": lambda: sock.send(b"x", socket.MSG_OOB),
        }
        results = {name: attempt(action) for name, action in tries.items()}
        sock.detach()
        total = torch.ones(2)
        dist.all_reduce(total)
        return {"seccomp": filtered, "tries": results, "sum": total.tolist()}

    for rep in run_ranks(world, probe, world_size=2):
        assert rep["seccomp"] == "on"
        assert rep["tries"] == dict.fromkeys(rep["tries"], "PermissionError: [Errno 1] Operation not permitted")
        assert rep["sum"] == [2.0, 2.0]


def test_without_a_namespace_the_network_layer_says_why(world: Path) -> None:
    (rep,) = run_ranks(world, lambda cfg: {}, gloo=False)
    assert rep["layers"]["network"] == isolation.NETWORK_OFF


# --- prctl, /proc ------------------------------------------------------------------------------


def test_other_ranks_memory_environ_and_cwd_are_out_of_reach(world: Path, student: int) -> None:
    grader_pid = os.getpid()

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        peer_pid = torch.tensor([os.getpid()])
        pids = [torch.zeros(1, dtype=torch.int64) for _ in range(2)]
        dist.all_gather(pids, peer_pid)
        peer = next(int(p) for p in pids if int(p) != os.getpid())
        out = {}
        for who, pid in (("peer", peer), ("grader", grader_pid)):
            out[f"{who}_mem"] = attempt(lambda pid=pid: Path(f"/proc/{pid}/mem").open("rb").read(1))  # noqa: SIM115
            out[f"{who}_environ"] = attempt(lambda pid=pid: Path(f"/proc/{pid}/environ").read_bytes())
            out[f"{who}_cwd"] = attempt(lambda pid=pid: os.listdir(f"/proc/{pid}/cwd"))
            out[f"{who}_root"] = attempt(lambda pid=pid: os.listdir(f"/proc/{pid}/root"))
        dist.barrier()
        return out

    reports = run_ranks(world, probe, world_size=2, uid=student if ROOT else None)
    for rep in reports:
        assert rep["layers"]["prctl"] == "on"
        for key, value in rep.items():
            if key != "layers":
                assert value.startswith(("PermissionError", "FileNotFoundError")), (key, value)


def test_rank_dies_with_its_parent(world: Path) -> None:
    read, write = os.pipe()
    parent = os.fork()
    if parent == 0:  # the rank's parent: forks the rank and waits to be killed
        os.close(read)
        if os.fork() == 0:
            isolation.enter(config(world))
            send(write, {"rank": os.getpid()})
            time.sleep(300)
            os._exit(0)
        time.sleep(300)
        os._exit(0)
    os.close(write)
    rank = receive(read)["rank"]
    assert _alive(rank)
    os.kill(parent, signal.SIGKILL)
    os.waitpid(parent, 0)
    deadline = time.monotonic() + 30
    while _alive(rank) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(rank)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for us to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    if state == "Z":
        try:
            os.waitpid(pid, os.WNOHANG)  # ours (we are a subreaper): reap it
        except ChildProcessError:
            pass
        return False
    return True


# --- parent side -------------------------------------------------------------------------------


def test_detached_setsid_grandchild_is_reparented_and_reaped(world: Path) -> None:
    namespaces.become_subreaper()

    def probe(cfg: IsolationConfig) -> dict[str, Any]:
        read, write = os.pipe()
        if os.fork() == 0:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                time.sleep(300)
                os._exit(0)
            os.write(write, str(grandchild).encode())
            os._exit(0)  # the grandchild is orphaned
        os.close(write)
        return {"detached": int(os.read(read, 32))}

    (rep,) = run_ranks(world, probe, gloo=False)
    detached = rep["detached"]
    deadline = time.monotonic() + 30  # its parent is still exiting
    while _alive(detached) and _parent(detached) != os.getpid() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _alive(detached) and _parent(detached) == os.getpid()  # reparented to us, the subreaper
    assert reaping.reap_descendants() >= 1
    assert not _alive(detached)
    assert reaping.reap_descendants() == 0


def _parent(pid: int) -> int | None:
    st = reaping.state_of(pid)
    return st[1] if st else None


def test_reaping_spares_the_given_processes_and_their_children() -> None:
    namespaces.become_subreaper()
    read, write = os.pipe()
    spared = os.fork()
    if spared == 0:  # a rank of a group still in use, with a child of its own
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
        send(write, {"ready": True})
        time.sleep(300)
        os._exit(0)
    os.close(write)
    doomed = subprocess.Popen(["sleep", "300"])
    assert receive(read) == {"ready": True}
    assert reaping.reap_descendants(spare=frozenset({spared})) == 1
    assert not _alive(doomed.pid)  # killed and reaped (Popen can no longer see its status)
    assert _alive(spared) and len(reaping.descendants(spared)) == 1
    assert reaping.reap_descendants() == 2
    assert not _alive(spared)


def _unused_uid() -> int:
    """A uid (and the next one) no account and no process has: the ranks' own uids in a grading are such numbers."""
    busy = {p.pw_uid for p in pwd.getpwall()}
    for uid in range(61000, 62000, 2):
        if {uid, uid + 1}.isdisjoint(busy) and not _pids_of_uid(uid) and not _pids_of_uid(uid + 1):
            return uid
    raise AssertionError("no free uid")
