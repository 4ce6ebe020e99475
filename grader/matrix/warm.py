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
new one for the next.  Every server is started from one thread that lives as long as the process
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
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

#: Bytes of one reply from the server: ``{"pid": N}`` to a request, ``{"exit": N, "code": C}`` when one ends.
REPLY_SIZE = 256


class ServedProcess:
    """A host the server forked, with what the runner uses of ``subprocess.Popen``: its pid (it leads
    its own process group, as a cold host does), ``poll``, ``wait`` and ``returncode`` (Popen's
    convention: ``-N`` for a signal N), from the server's report of its end."""

    def __init__(self, server: HostServer, pid: int) -> None:
        self.pid = pid
        self.args = ["grader.matrix.host", f"forked by {server.pid}"]
        self.returncode: int | None = None
        self.server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class HostServer:
    """One end of a connection to a server: :meth:`fork` a host, learn how it ended (:meth:`exit_code`),
    :meth:`close`.  The runner that started the server (:meth:`start`) holds one; a process it handed a
    connection to (:meth:`connect`, :meth:`attach`: a batch's ``grader grade``) holds another.  Safe to
    use from several threads."""

    def __init__(
        self, pid: int, sock: socket.socket, env_digest: str, proc: subprocess.Popen[bytes] | None = None
    ) -> None:
        self.pid = pid  # the server's: the parent of every host it forks
        self.env_digest = env_digest  # of what its hosts start with (environment_digest)
        self.proc = proc  # the server's process, where this process started it
        self._sock = sock
        self._request = threading.Lock()  # one request and its reply at a time
        self._state = threading.Condition()
        self._forked: list[int] = []  # replies to requests, not yet taken
        self._ended: dict[int, int] = {}  # pid -> exit code, of hosts not yet asked for it
        self._gone = False  # the server closed its end: its hosts died with it
        self._reader = threading.Thread(target=self._read, name="host-server-replies", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, env: dict[str, str]) -> HostServer:
        """A new server whose hosts start with ``env``; from any thread (:func:`_starter`)."""
        return _starter().submit(cls._start, env).result()

    @classmethod
    def _start(cls, env: dict[str, str]) -> HostServer:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [sys.executable, "-I", "-m", "grader.matrix.host", "--runner", str(os.getpid())]
        cmd += ["--serve", str(theirs.fileno())]
        try:
            proc = subprocess.Popen(
                cmd,
                cwd="/",
                env=env,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # it prints nothing; a host's output goes to the log it is sent
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(proc.pid, ours, environment_digest(env), proc)

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

    def alive(self) -> bool:
        return not self._gone and (self.proc is None or self.proc.poll() is None)

    def fork(self, control: int, log: IO[bytes]) -> ServedProcess | None:
        """A new host reading ``control`` and writing ``log``; None when the server is gone (the caller
        starts one cold, and a later grading a new server)."""
        with self._request:
            try:
                socket.send_fds(self._sock, [b"fork"], [control, log.fileno()])
            except OSError:
                return None
            with self._state:
                while not self._forked and not self._gone:
                    self._state.wait()
                return ServedProcess(self, self._forked.pop(0)) if self._forked else None

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """How host ``pid`` ended, waiting up to ``timeout`` seconds (None: for ever); None if it has not.
        A host of a server that is gone was killed with it (PDEATHSIG)."""
        with self._state:
            self._state.wait_for(lambda: pid in self._ended or self._gone, timeout)
            if pid in self._ended:
                return self._ended.pop(pid)
        # a dead server's hosts are killed with it, though its socket may not have said so yet
        return -signal.SIGKILL if not self.alive() else None

    def close(self) -> None:
        """Close this connection, and with it every host forked for it that is still running; where
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
                    self._forked.append(reply["pid"])
                elif isinstance(reply.get("exit"), int) and isinstance(reply.get("code"), int):
                    self._ended[reply["exit"]] = reply["code"]
                self._state.notify_all()


class KeptServer:
    """A host server kept for the gradings of a long-lived process (a batch's, a Dask worker's): started
    again by :meth:`live` once the one before has died, so one lost server costs the grade it broke
    (graded again by its own process) and never warms nothing for the rest of the class."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: HostServer | None = HostServer.start_here()
        self.started = int(self._server is not None)  # servers started over its life (the tests read it)

    def live(self) -> HostServer | None:
        """The server, alive (a new one in place of one that died); None where none runs (not Linux)."""
        with self._lock:
            if self._server is not None and not self._server.alive():
                self._server.close()
                self._server = HostServer.start_here()
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


def serve(sock: socket.socket, become_host: Any) -> None:
    """The server's loop, after ``zygote.preload_runtime``: fork a host per request, and report each
    one's end.  ``become_host(control_fd)`` is what the forked child runs (never returns)."""
    _Server(sock, become_host).run()


class _Server:
    """The server's side.  ``owner`` is the connection of the runner that started it: it may also hand
    over a connection of its own making (``b"client"``, one socket), for a process of its own, one
    ``grader grade`` of a batch (:meth:`HostServer.connect`).  Each connection is answered on itself,
    and a client's hosts end with its connection: a grade that dies takes its hosts with it."""

    def __init__(self, owner: socket.socket, become_host: Any) -> None:
        self.owner = owner
        self.become_host = become_host
        self.clients: dict[int, socket.socket] = {owner.fileno(): owner}
        self.hosts: dict[int, int] = {}  # host pid -> the connection (fd) it was forked for
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
            message, fds, _, _ = socket.recv_fds(conn, 16, 2)
        except OSError:
            message, fds = b"", []
        if not message:
            self._hang_up(conn)
        elif message == b"fork" and len(fds) == 2:
            self._reply(conn, {"pid": self._fork(*fds)})
        elif message == b"client" and len(fds) == 1 and conn is self.owner:
            self.clients[fds[0]] = socket.socket(fileno=fds[0])
        else:
            for fd in fds:
                os.close(fd)

    def _fork(self, control: int, log: int) -> int:
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (self.wake_r, self.wake_w, *(conn.detach() for conn in self.clients.values())):
                os.close(fd)  # a host holds no connection: not its own runner's, let alone another's
            os.setsid()  # its own process group, which the runner ends it by, as a cold host's
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            from grader.sandbox.parent import die_with_parent

            die_with_parent(self.pid, signal.SIGKILL)
            self.become_host(control)
        os.close(control)
        os.close(log)
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
