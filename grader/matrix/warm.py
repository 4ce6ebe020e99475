"""A warm start for session hosts: one process imports torch and the rank runtime once and forks a
fresh host for each grading (issues 41 and 43).

A host started cold (``grader.matrix.host``) pays Python's start and torch's import, about 2 CPU-s of
the 7-9 an A9 grading costs on a 2-core machine; a host forked from this server pays a fork.  While
:func:`grader.matrix.host.keep_spare` is on (a test session, a watch loop), :meth:`Host.start` asks the
server of its process for a host and only starts one cold where there is none.

The server is told nothing of any grading.  A request is two file descriptors, the host's control
pipe and its log, and nothing else; the pack, the session's arguments and the configuration that
holds the salt reach the forked host alone, on its control pipe, exactly as they reach a cold one.  So
every forked host starts with the memory of a process that has imported the runtime and been told
nothing, the memory a cold host has at the same point, and no grading ever sees another's.  The server
dies with the runner that started it (PDEATHSIG), and each host with the server; the runner also ends
its hosts itself as it does cold ones (``runner._stop``, :meth:`Host.close`), by their process groups.
The server reaps its hosts and reports how each ended, which is how the runner learns a host's exit
status without being its parent (:class:`ServedProcess`).

A server that dies takes its hosts with it, so a session it served ends mid-grading through no doing
of the submission: the runner grades that submission again from the start (``runner.HostLost``), and a
process that keeps a server for many gradings (:class:`KeptServer`: a batch, a Dask worker) starts a
new one for the next.  A server that does not answer a request within :data:`FORK_REPLY_S` is hung: it
is killed (its hosts with it, graded again the same way) and the grading that asked starts cold.  Every
server is started from one thread that lives as long as the process
(:func:`_starter`): PDEATHSIG follows the thread that forked, and a server started on a batch's pool
thread or a Dask task's would die with that thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Generic, TypeVar

#: Bytes of one reply from the server: ``{"pid": N}`` to a request, ``{"exit": N, "code": C}`` when one ends.
REPLY_SIZE = 256
#: Seconds a server has to answer a fork: it forks and waits for the child's ``setsid`` (milliseconds),
#: after its own start (a torch import: seconds) for its first; one silent this long is hung, and
#: waiting longer would hang the grading
FORK_REPLY_S = 60.0


class ServedProcess:
    """A process a server forked (a host; a batch's grade, ``grader.batch.grade_server``), with what its
    caller uses of ``subprocess.Popen``: its pid (it leads its own process group, as one started with
    ``start_new_session`` does), ``poll``, ``wait`` and ``returncode`` (Popen's convention: ``-N`` for a
    signal N), from the server's report of its end."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.pid = pid
        self.args = [server.module, f"forked by {server.pid}"]
        self.returncode: int | None = None  # set by the server's reader (ForkServer._read), for every waiter
        self.lost = False  # the server died before it could report this process's end, which killed it
        self.server = server

    def poll(self) -> int | None:
        return self.server.ended(self, 0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self.server.ended(self, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


_S = TypeVar("_S", bound="ForkServer")


def died_with_server(proc: object) -> bool:
    """Whether ``proc`` is a process a server forked and that server died before it could report the
    process's end: the process was killed with it (PDEATHSIG), through nobody's doing but the grader's."""
    return isinstance(proc, ServedProcess) and proc.lost


class ForkServer:
    """One end of a connection to a server that forks on request (:func:`serve`): :meth:`fork` a child,
    learn how it ended (:meth:`ended`), :meth:`close`.  The process that started the server
    (:meth:`start`) holds one; a process it handed a connection to (``HostServer.connect``) may hold
    another.  Safe to use from several threads.  A subclass names the module the server runs as
    (``python -m MODULE --runner PID --serve FD``)."""

    module = "grader.matrix.host"
    isolated = True  # started with ``python -I``: nothing of the caller's PYTHON* variables or user site

    def __init__(
        self, pid: int, sock: socket.socket, env_digest: str, proc: subprocess.Popen[bytes] | None = None
    ) -> None:
        self.pid = pid  # the server's: the parent of every process it forks
        self.env_digest = env_digest  # of what its children start with (environment_digest)
        self.proc = proc  # the server's process, where this process started it
        self._sock = sock
        self._request = threading.Lock()  # one request and its reply at a time
        self._state = threading.Condition()
        self._forked: list[ServedProcess] = []  # replies to requests, not yet taken
        self._running: dict[int, ServedProcess] = {}  # pid -> child, until the server reports its end
        self._gone = False  # the server closed its end: its children died with it
        self._reader = threading.Thread(target=self._read, name="fork-server-replies", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls: type[_S], env: dict[str, str], cwd: str = "/") -> _S:
        """A new server whose children start with ``env``, in ``cwd``; from any thread (:func:`_starter`)."""
        return _starter().submit(cls._start, env, cwd).result()

    @classmethod
    def _start(cls: type[_S], env: dict[str, str], cwd: str) -> _S:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [sys.executable, *(["-I"] if cls.isolated else []), "-m", cls.module, "--runner", str(os.getpid())]
        cmd += ["--serve", str(theirs.fileno())]
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # it prints nothing; a child's output goes to the log it is sent
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(proc.pid, ours, environment_digest(env), proc)

    def alive(self) -> bool:
        return not self._gone and (self.proc is None or self.proc.poll() is None)

    def fork(self, control: int, log: IO[bytes], *extra: int) -> ServedProcess | None:
        """A new child reading ``control``, writing ``log`` and handed ``extra`` descriptors; None when
        the server is gone or hung (the caller starts its process cold).  A hung server is killed here,
        so that whoever keeps it (:class:`KeptServer`) starts another."""
        with self._request:
            try:
                socket.send_fds(self._sock, [b"fork"], [control, log.fileno(), *extra])
            except OSError:
                return None
            with self._state:
                if self._state.wait_for(lambda: self._forked or self._gone, FORK_REPLY_S):
                    return self._forked.pop(0) if self._forked else None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # not a connection's close: a hung server reads none
            with self._state:
                self._state.wait_for(lambda: self._gone, FORK_REPLY_S)  # its socket closes as it dies
            return None

    def ended(self, child: ServedProcess, timeout: float | None) -> int | None:
        """How ``child`` ended, waiting up to ``timeout`` seconds (None: for ever); None if it has not.
        Any number of threads may wait for one child: each learns its end.  A child of a server that
        is gone was killed with it (PDEATHSIG)."""
        with self._state:
            self._state.wait_for(lambda: child.returncode is not None or self._gone, timeout)
            if child.returncode is None and not self.alive():
                # a dead server's children are killed with it, though its socket may not have said so yet
                child.returncode, child.lost = -signal.SIGKILL, True
            return child.returncode

    def close(self) -> None:
        """Close this connection, and with it every child forked for it that is still running; where
        this process started the server, end the server too."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader's recv (a close would not) and tells the server
        self._sock.close()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        self._reader.join()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(REPLY_SIZE)
                reply = json.loads(data) if data else None
            except (OSError, ValueError):
                reply = None
            with self._state:
                if not isinstance(reply, dict):
                    self._gone = True
                    self._state.notify_all()
                    return
                if isinstance(reply.get("pid"), int):
                    child = self._running[reply["pid"]] = ServedProcess(self, reply["pid"])
                    self._forked.append(child)
                elif isinstance(reply.get("exit"), int) and isinstance(reply.get("code"), int):
                    ended = self._running.pop(reply["exit"], None)
                    if ended is not None:
                        ended.returncode = reply["code"]
                self._state.notify_all()


class HostServer(ForkServer):
    """A server of session hosts (``python -I -m grader.matrix.host --serve``): :meth:`fork` a host.  A
    process it handed a connection to (:meth:`connect`, :meth:`attach`: a batch's ``grader grade``)
    forks its hosts over that connection, and they end with it."""

    @classmethod
    def start_here(cls) -> HostServer | None:
        """A server for the grades this process starts, whose hosts start in the zygote's scrubbed
        environment: on Linux, the only system a host server runs on; else None (hosts start cold)."""
        if not sys.platform.startswith("linux"):
            return None
        from grader.runtimes.torchdist.zygote import scrubbed_environment

        return cls.start(scrubbed_environment())

    def connect(self) -> socket.socket:
        """A connection of its own for another process (passed to it, then closed here; that process
        :meth:`attach` es it): the hosts forked for it end when it closes, however it ends."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._request:
                socket.send_fds(self._sock, [b"client"], [theirs.fileno()])
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        return mine

    @classmethod
    def attach(cls, described: str) -> HostServer | None:
        """The connection :meth:`connect` made for this process, as :meth:`described` it (None when
        the description is not one)."""
        fd, pid, env_digest = [*described.split(":"), "", ""][:3]
        if not (fd.isdigit() and pid.isdigit() and env_digest):
            return None
        try:
            sock = socket.socket(fileno=int(fd))
        except OSError:
            return None
        return cls(int(pid), sock, env_digest)

    def described(self, conn: socket.socket) -> str:
        """What a process given ``conn`` (:meth:`connect`) is told in its environment,
        ``fd:server:environment``: the environment's digest lets it tell whether the server's hosts
        start as its own would (a grade run under another ``PATH`` starts its hosts cold)."""
        return f"{conn.fileno()}:{self.pid}:{self.env_digest}"

    def serves(self, env: dict[str, str]) -> bool:
        """Alive, and its hosts start with ``env``."""
        return self.alive() and self.env_digest == environment_digest(env)

    @staticmethod
    def renumbered(described: str, fd: int) -> str:
        """:meth:`described` for a process that holds the same connection as descriptor ``fd`` (a grade
        forked by ``grader.batch.grade_server``, which was handed it)."""
        return f"{fd}:{described.partition(':')[2]}"


Served = TypeVar("Served", bound=ForkServer)


class KeptServer(Generic[Served]):
    """A server kept for the gradings of a long-lived process (a batch's, a Dask worker's), made by
    ``start`` (None where none runs: not Linux): started again by :meth:`live` once the one before has
    died, so one lost server costs the grade it broke (graded again) and leaves the rest of the class
    warm."""

    def __init__(self, start: Callable[[], Served | None]) -> None:
        self._lock = threading.Lock()
        self._start = start
        self._server = start()
        self.started = int(self._server is not None)  # servers started over its life (the tests read it)

    def live(self) -> Served | None:
        """The server, alive (a new one in place of one that died); None where none runs."""
        with self._lock:
            if self._server is not None and not self._server.alive():
                self._server.close()
                self._server = self._start()
                self.started += 1
            return self._server

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()


_STARTER: ThreadPoolExecutor | None = None
_STARTER_LOCK = threading.Lock()


def _starter() -> ThreadPoolExecutor:
    """The one thread that starts this process's host servers.  A child armed with PDEATHSIG is signalled
    when the *thread* that forked it ends, not the process; this thread ends only with the process."""
    global _STARTER
    with _STARTER_LOCK:
        if _STARTER is None:
            _STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="host-server-starter")
        return _STARTER


def _forget_starter() -> None:
    """A forked child has none of its parent's threads: it starts a thread of its own if it needs one."""
    global _STARTER
    _STARTER = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_starter)


def environment_digest(env: dict[str, str]) -> str:
    """A host's environment, as a server and the processes it serves compare it."""
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]


def serve(sock: socket.socket, become: Callable[..., Any], extra: int = 0) -> None:
    """The server's loop, once it has imported what its children share (``zygote.preload_runtime``; a
    grade server's modules): fork a child per request, and report each one's end.  ``become(control_fd,
    *extra_fds)`` is what the child runs (it never returns); a request may hand up to ``extra``
    descriptors beyond the control pipe and the log."""
    _Server(sock, become, extra).run()


class _Server:
    """The server's side.  ``owner`` is the connection of the runner that started it: it may also hand
    over a connection of its own making (``b"client"``, one socket), for a process of its own, one
    ``grader grade`` of a batch (:meth:`HostServer.connect`).  Each connection is answered on itself,
    and a client's children end with its connection: a grade that dies takes its hosts with it."""

    def __init__(self, owner: socket.socket, become: Callable[..., Any], extra: int) -> None:
        self.owner = owner
        self.become = become
        self.extra = extra  # descriptors a fork request may hand beyond the control pipe and the log
        self.clients: dict[int, socket.socket] = {owner.fileno(): owner}
        self.hosts: dict[int, int] = {}  # child pid -> the connection (fd) it was forked for
        self.pid = os.getpid()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def run(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wake-up byte is written
        while True:
            ready, _, _ = select.select([*self.clients, self.wake_r], [], [])
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
                self._reap()
            for conn in [self.clients[fd] for fd in ready if fd in self.clients]:
                if self.clients.get(conn.fileno()) is conn:  # not hung up meanwhile, its number reused
                    self._request(conn)

    def _request(self, conn: socket.socket) -> None:
        try:
            message, fds, _, _ = socket.recv_fds(conn, 16, 2 + self.extra)
        except OSError:
            message, fds = b"", []
        if not message:
            self._hang_up(conn)
        elif message == b"fork" and 2 <= len(fds) <= 2 + self.extra:
            self._reply(conn, {"pid": self._fork(*fds)})
        elif message == b"client" and len(fds) == 1 and conn is self.owner:
            self.clients[fds[0]] = socket.socket(fileno=fds[0])
        else:
            for fd in fds:
                os.close(fd)

    def _fork(self, control: int, log: int, *extra: int) -> int:
        led_r, led_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (self.wake_r, self.wake_w, led_r, *(conn.detach() for conn in self.clients.values())):
                os.close(fd)  # a child holds no connection: not its own runner's, let alone another's
            os.setsid()  # its own process group, which its caller ends it by, as a cold one's
            os.close(led_w)  # the server replies only now: a caller's killpg must find the group
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            from grader.sandbox.parent import die_with_parent

            die_with_parent(self.pid, signal.SIGKILL)
            self.become(control, *extra)
        for fd in (control, log, led_w, *extra):
            os.close(fd)
        os.read(led_r, 1)  # end of file once the child leads its group (or has died)
        os.close(led_r)
        return pid

    def _hang_up(self, conn: socket.socket) -> None:
        if conn is self.owner:
            os._exit(0)  # the runner is gone: so are its hosts (PDEATHSIG), and so is this server
        fd = conn.fileno()
        for pid in [pid for pid, owner in self.hosts.items() if owner == fd]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # its session's whole group: the zygote dies with the host
            del self.hosts[pid]
        del self.clients[fd]
        conn.close()

    def _reap(self) -> None:
        from grader.sandbox.reaping import ended_children

        for pid, status in ended_children():
            fd = self.hosts.pop(pid, None)
            if fd is not None and fd in self.clients:
                self._reply(self.clients[fd], {"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    def _reply(self, conn: socket.socket, reply: dict[str, int]) -> None:
        if "pid" in reply:
            self.hosts[reply["pid"]] = conn.fileno()
        try:
            conn.send(json.dumps(reply).encode())
        except OSError:
            self._hang_up(conn)
