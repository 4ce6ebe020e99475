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
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import IO, Any

#: Bytes of one reply from the server: ``{"pid": N}`` to a request, ``{"exit": N, "code": C}`` when one ends.
REPLY_SIZE = 256


class ServedProcess:
    """A host the server forked, with what the runner uses of ``subprocess.Popen``: its pid (it leads
    its own process group, as a cold host does), ``poll``, ``wait`` and ``returncode`` (Popen's
    convention: ``-N`` for a signal N), from the server's report of its end."""

    def __init__(self, server: HostServer, pid: int) -> None:
        self.pid = pid
        self.args = ["grader.matrix.host", f"forked by {server.proc.pid}"]
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class HostServer:
    """The runner's end of one server: :meth:`fork` a host, learn how it ended (:meth:`exit_code`),
    :meth:`close`.  Safe to use from several threads; started only on the main thread (its PDEATHSIG
    follows the thread that started it)."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket, env: dict[str, str]) -> None:
        self.proc = proc
        self.env = env  # what its hosts start with: a server of another environment is replaced
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
        return cls(proc, ours, env)

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._gone

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
        return -signal.SIGKILL if self._gone or self.proc.poll() is not None else None

    def close(self) -> None:
        """End the server, and with it every host it forked that is still running."""
        self._sock.close()  # with the reader's recv failing, _gone is set
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
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


def serve(sock: socket.socket, become_host: Any) -> None:
    """The server's loop, after ``zygote.preload_runtime``: fork a host per request, and report each
    one's end.  ``become_host(control_fd)`` is what the forked child runs (never returns)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wake-up byte is written
    server = os.getpid()
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock.fileno() not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 16, 2)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the runner closed its end
        if message != b"fork" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        control, log = fds
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w, sock.detach()):
                os.close(fd)
            os.setsid()  # its own process group, which the runner ends it by, as a cold host's
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            from grader.sandbox.parent import die_with_parent

            die_with_parent(server, signal.SIGKILL)
            become_host(control)
        os.close(control)
        os.close(log)
        _reply(sock, {"pid": pid})


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _reply(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _reply(sock: socket.socket, reply: dict[str, int]) -> None:
    try:
        sock.send(json.dumps(reply).encode())
    except OSError:
        os._exit(0)  # the runner is gone: so are its hosts (PDEATHSIG), and so is this server
