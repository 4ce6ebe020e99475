"""The matrix session's process, which forks the session's zygote before it becomes the session.

Started as ``python -I -m grader.matrix.host`` by :meth:`Host.start` for every session (the Linux
sandbox, whose zygote forks the ranks, and the portable runtime, whose zygote forks its workers on
Linux), and started first thing in a grading (``pipeline.grade``), before the rubric, the submission
or the pack are known, so that its torch import overlaps everything the grading does before its
matrix (issue 23).  Where nothing forks (macOS, Windows: ``mode.start_method``) it forks no zygote:
told the pack, it spawns the pool's workers ahead (``portable.spawn_ahead``) and becomes the session,
so that a spare's workers import torch while the student reads the last grade (issue 41).  Elsewhere
the process starts in the zygote's scrubbed environment and:

1. imports what every rank needs whatever the pack, torch and the rank runtime
   (``zygote.preload_runtime``);
2. reads the pack's rank side from the runner's pipe (:meth:`Host.preload`) and imports it;
3. forks.  The child is the zygote (``grader.runtimes.torchdist.zygote.serve``), with the memory of a
   process that has been told nothing but the pack's name, exactly as when it was a process of its
   own;
4. the parent becomes the matrix session: only now does it read, from the same pipe, the session's
   pytest arguments and environment (the path of its configuration, which holds the salt;
   :meth:`Host.begin`), and run pytest with the matrix plugin, whose ``MatrixSession`` takes the
   zygote over (``session.Zygote.forked``).

So the session and its zygote share one torch import, which each used to pay for (1.2-1.7 s of CPU a
grading on a 2-core machine), and that import no longer waits for the grading's intake.  The zygote
dies with the session (PDEATHSIG), and the session with the runner; a host never told its pack ends
when the runner closes the pipe (:meth:`Host.close`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Protocol

from grader.runtimes import RankSide

if TYPE_CHECKING:
    from grader.matrix.warm import HostServer

MAX_REQUEST = 1 << 20
SERVER_ENV = "GRADER_HOST_SERVER"  # "fd:pid": a connection to the host server of the process that started this one


class HostProcess(Protocol):
    """What the runner uses of a host's process: a cold host's ``subprocess.Popen``, or a forked one's
    ``warm.ServedProcess``.  Either leads its own process group (its pid is the group's)."""

    pid: int
    returncode: int | Any
    args: Any

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


@dataclass(frozen=True)
class Preface:
    """What a host is told before its grading (:meth:`Host.preload`): the pack's rank side and, where
    ranks are spawned rather than forked (``mode.start_method``), how many workers to spawn ahead, the
    pack's largest group.  Nothing of any grading."""

    side: RankSide
    ahead: int = 0

    def to_json(self) -> dict[str, object]:
        return {"side": self.side.to_json(), "ahead": self.ahead}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Preface:
        return cls(RankSide.from_json(data["side"]), int(data["ahead"]))


class Host:
    """The runner's handle on one session's host: started before the grading knows its pack, told the
    pack (:meth:`preload`), then the session (:meth:`begin`), or closed unused (:meth:`close`)."""

    def __init__(self, proc: HostProcess, control: int, log: IO[bytes], env: dict[str, str], parent: int) -> None:
        self.proc = proc
        self.parent = parent  # the process it dies with: this one, or the host server that forked it
        self.log = log  # the host's and then the session's output: an unnamed file, gone when closed
        self.env = env  # what it started with: a spare started under another environment is not taken
        self.told: Preface | None = None  # the pack it preloads (:meth:`preload`)
        self._control: int | None = control  # the pipe's write end; None once the request is sent

    @classmethod
    def take(cls) -> Host:
        """This grading's host: the spare :func:`keep_spare` had ready, when it is alive and was started
        as :meth:`start` would start one now, else a new one.  Where a spare is kept, the next one starts
        here, its torch import overlapping this grading."""
        return _SPARE.take()

    @classmethod
    def environment(cls) -> dict[str, str]:
        """What a host starts with here: the zygote's scrubbed environment where it forks one (Linux), a
        spawned worker's where it spawns them (``portable.worker_environment``: what Python needs on
        macOS and Windows)."""
        from grader.runtimes.torchdist.mode import start_method  # here: a zygote, forked by a host, holds no mode

        if start_method() == "spawn":
            from grader.runtimes.torchdist.portable import worker_environment

            return worker_environment(dict(os.environ))
        from grader.runtimes.torchdist.zygote import scrubbed_environment

        return scrubbed_environment()

    @classmethod
    def start(cls) -> Host:
        """A new host: forked by this process's host server where :func:`keep_spare` keeps one
        (``grader.matrix.warm``), else started cold.  Where ranks are spawned (``mode.start_method``),
        it forks nothing: its session's pool spawns them, some ahead (:class:`Preface`), and its pipe
        is its standard input, which every system passes on."""
        from grader.runtimes.torchdist.mode import start_method

        spawn = start_method() == "spawn"
        env = cls.environment()
        log = tempfile.TemporaryFile()  # noqa: SIM115 (the host's to close: Host.close)
        control, request = os.pipe()
        try:
            server = None if spawn else _SPARE.server(env)
            proc: HostProcess | None = server.fork(control, log) if server is not None else None
            if proc is None:  # no server, or it is gone: started cold, this host dies with this process
                server = None
                cmd = [sys.executable, "-I", "-m", "grader.matrix.host", "--runner", str(os.getpid())]
                cmd += ["--spawn"] if spawn else ["--control", str(control)]
                proc = subprocess.Popen(
                    cmd,
                    cwd=os.path.abspath(os.sep),  # the root of this drive, on Windows too
                    env=env,
                    pass_fds=[] if spawn else [control],
                    stdin=control if spawn else subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except BaseException:
            os.close(request)
            log.close()
            raise
        finally:
            os.close(control)
        return cls(proc, request, log, env, os.getpid() if server is None else server.pid)

    def preload(self, preface: Preface) -> None:
        """The pack's rank side (its runtime's modules, its bodies, where a pack that is not installed
        lives): the zygote is forked once they are imported, or ``preface.ahead`` workers spawned.
        Nothing of the grading but the pack's name crosses here.  A spare kept for the next grading is
        told the same now (it is likely the next one's)."""
        if self.told is not None and self.told != preface:
            raise ValueError(f"this host was told {self.told.side.bodies} already")
        if self.told is None:  # else a spare, told when the grading before preloaded it
            self.told = preface
            self._send(json.dumps(preface.to_json()).encode() + b"\n")
        if self is not _SPARE.spare():
            _SPARE.expect(preface)

    def for_pack(self, preface: Preface) -> Host:
        """This host, or a new one in its place (this one closed) when it was told another pack: a spare
        told the pack of the grading before."""
        if self.told in (None, preface):
            return self
        self.close()
        return Host.start()

    def begin(self, argv: list[str], env: dict[str, str], cwd: str) -> HostProcess:
        """The session's pytest arguments, environment and directory: the host, its zygote forked,
        becomes the session."""
        self._send(json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode())
        self._hang_up()
        return self.proc

    def lost(self) -> bool:
        """Whether a host server forked this host and died before the host ended: the host died with it
        (PDEATHSIG), so however its session ended, that was the grader's doing, not the submission's."""
        from grader.matrix.warm import died_with_server

        return died_with_server(self.proc)

    def close(self) -> None:
        """End a host the grading did not use (or whose session ended) and forget its output."""
        self._hang_up()  # a host still waiting for its pack or its request exits on the closed pipe
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if hasattr(os, "killpg"):
                    os.killpg(self.proc.pid, signal.SIGKILL)  # its group: a zygote, or workers spawned ahead
                else:  # Windows: workers it spawned ahead exit once their channels close with it
                    self.proc.kill()
        self.proc.wait()
        self.log.close()

    def _send(self, data: bytes) -> None:
        if self._control is None:
            raise ValueError("this host has been told its session already")
        with contextlib.suppress(BrokenPipeError):  # a host that died says so by its exit status
            view = memoryview(data)
            while view:
                view = view[os.write(self._control, view) :]

    def _hang_up(self) -> None:
        if self._control is not None:
            os.close(self._control)
            self._control = None


class _Spare:
    """At most one host started ahead for this process's next grading, while :func:`keep_spare` is on.
    A host knows nothing before it is taken (not the pack, not the salt), so starting it early changes
    nothing a grading sees; it dies with this process like any host.

    Where hosts fork (Linux) the next one starts as a grading takes its own: a fork of a host server,
    it costs that grading nothing.  Where they spawn (macOS, Windows) a spare costs a torch import, and
    one per worker it spawns ahead, which would slow the grading beside it down: it starts once that
    grading has ended (:func:`after_grading`), while the student reads the result."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # take() starts a host, which asks server() under it
        self._wanted: list[tuple[bool, bool]] = []  # keep_spare's blocks (on, one_pack), innermost last: it decides
        self._host: Host | None = None
        self._server: HostServer | None = None  # what Host.start forks hosts from, while kept
        self._attached: HostServer | None = None  # a server another process started (attach_server)
        self._last: Preface | None = None  # what the last grading's host was told
        self._pending = False  # a spare to start once the grading that took a host has ended (spawn)
        self._tell: Preface | None = None  # what that spare is told as it starts (expect)

    def take(self) -> Host:
        from grader.runtimes.torchdist.mode import start_method

        with self._lock:
            host, self._host = self._host, None
            if self._wanted and self._wanted[-1][0] and threading.current_thread() is threading.main_thread():
                # PDEATHSIG follows the thread that started a host: one started on a thread that ends
                # before the next grading would die under it
                if start_method() == "spawn":
                    self._pending = True
                else:
                    self._host = Host.start()
        if host is not None and (host.proc.poll() is not None or host.env != Host.environment()):
            host.close()
            host = None
        return host if host is not None else Host.start()

    def spare(self) -> Host | None:
        with self._lock:
            return self._host

    def server(self, env: dict[str, str]) -> HostServer | None:
        """The host server new hosts are forked from: the one this process was handed (:func:`attach_server`)
        while it lives, else, while a block keeps spares, this process's own, started when there is
        none, or when the one there died or started under another environment."""
        from grader.matrix.warm import HostServer

        with self._lock:
            if self._attached is not None:
                return self._attached if self._attached.serves(env) else None
            on = bool(self._wanted) and self._wanted[-1][0]
            server = self._server
            if not on or (server is not None and server.serves(env)):
                return server if on else None
            self._server = None
        if server is not None:
            server.close()
        started = HostServer.start(env)
        with self._lock:
            self._server = started
        return started

    def expect(self, preface: Preface) -> None:
        """A grading preloads this pack: when the grading before did too, or the block says every grading
        is of one pack (a watch loop's), the spare (not yet told anything) is told it now, so its zygote
        is ready if the next grading is of the same pack again (a test module's), and replaced when it is
        not.  Packs that alternate leave it untold: a spare told the wrong pack is worth nothing."""
        with self._lock:
            one_pack = bool(self._wanted) and self._wanted[-1][1]
            again, self._last = one_pack or self._last == preface, preface
            self._tell = preface if again else None
            spare = self._host if again and self._host is not None and self._host.told is None else None
        if spare is not None:
            spare.preload(preface)

    def ended(self) -> None:
        """A grading has ended: a spare that waited for it (:attr:`_pending`) starts now, told what
        :meth:`expect` found the next grading likely to be."""
        with self._lock:
            pending, self._pending = self._pending, False
            keep = bool(self._wanted) and self._wanted[-1][0]
            if not (pending and keep and threading.current_thread() is threading.main_thread()):
                return
            if self._host is None:
                self._host = Host.start()
            spare, tell = self._host, self._tell
        if tell is not None and spare.told is None:
            spare.preload(tell)

    @contextlib.contextmanager
    def kept(self, on: bool, one_pack: bool) -> Iterator[None]:
        with self._lock:
            self._wanted.append((on, one_pack))
        if not on:
            self._drop()
        try:
            yield
        finally:
            with self._lock:
                self._wanted.pop()
                still = bool(self._wanted) and self._wanted[-1][0]
            if not still:
                self._drop()

    def _drop(self) -> None:
        with self._lock:
            host, self._host = self._host, None
            server, self._server = self._server, None
            self._pending = False
        if host is not None:
            host.close()
        if server is not None:
            server.close()


_SPARE = _Spare()


def keep_spare(on: bool = True, *, one_pack: bool = False) -> contextlib.AbstractContextManager[None]:
    """While on, each grading in this process (:meth:`Host.take`) starts the next one's host, so a
    process that grades one tree after another (a test session, a student's watch loop) pays the
    host's start (Python and torch, about 3 s on a 2-core machine) beside the grading before it
    rather than in front of its own.  Off (``on=False``, inside a block that keeps one: code that
    counts this process's children), and when the block ends, the spare is closed: nothing outlives
    the block.  ``one_pack``: every grading in the block is of one pack (a watch loop grades one tree),
    so the spare is told it as soon as the first grading preloads it: the first re-grade finds its
    zygote ready too, not only the later ones."""
    return _SPARE.kept(on, one_pack)


def after_grading() -> None:
    """A grading of this process has ended (``pipeline.grade``): where a spare waits for that (hosts that
    spawn, :class:`_Spare`), it starts now."""
    _SPARE.ended()


def kept_server() -> HostServer | None:
    """This process's host server while :func:`keep_spare` keeps one (started if need be), else None."""
    return _SPARE.server(Host.environment())


@contextlib.contextmanager
def lend_server(server: HostServer | None) -> Iterator[tuple[dict[str, str], tuple[int, ...]]]:
    """What a ``grader grade`` about to start needs to fork its hosts from ``server`` over a connection
    of its own (:func:`attach_server`): an entry for its environment and the descriptor to pass it;
    nothing where there is no server, or it has died.  Start the process inside the block: this
    process's copy of the connection closes when it ends, so the hosts forked for the child end with
    the child."""
    try:
        conn = server.connect() if server is not None else None
    except OSError:  # it died since it was found alive: this grade starts its hosts cold
        conn = None
    if server is None or conn is None:
        yield {}, ()
        return
    with conn:
        yield {SERVER_ENV: server.described(conn)}, (conn.fileno(),)


def attach_server() -> None:
    """Fork this process's hosts from the host server its starter handed it a connection to (``grader
    batch``, :data:`SERVER_ENV`), for its whole life.  The variable is taken out of the environment,
    so nothing this process starts inherits it; the connection itself is inherited by nothing (Python
    opens descriptors non-inheritable, and the server's hosts close it)."""
    described = os.environ.pop(SERVER_ENV, "")
    if described:
        from grader.matrix.warm import HostServer

        _SPARE._attached = HostServer.attach(described)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runner", type=int, required=True, help="the runner's pid: this process dies with it")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--control", type=int, help="the pipe the pack and the session come on")
    what.add_argument("--serve", type=int, help="be the runner's host server (grader.matrix.warm) on this socket")
    what.add_argument("--spawn", action="store_true", help="fork nothing, spawn workers; the pipe is stdin")
    args = parser.parse_args()
    from grader.sandbox.parent import die_with_parent

    die_with_parent(args.runner, getattr(signal, "SIGKILL", signal.SIGTERM))
    if args.spawn:
        _become_spawning_session()
    from grader.runtimes.torchdist import zygote

    zygote.preload_runtime()
    if args.serve is not None:
        from grader.matrix import warm

        warm.serve(socket.socket(fileno=args.serve), _become_host)
    _become_host(args.control)


def _become_host(control_fd: int) -> None:
    """Steps 2-4 of the module's docstring, the runtime imported: in a host started cold, or in one a
    host server forked (``grader.matrix.warm``)."""
    from grader.runtimes.torchdist import heap, zygote
    from grader.runtimes.torchdist.zygote import ZYGOTE_ENV
    from grader.sandbox.parent import die_with_parent

    control = os.fdopen(control_fd, "rb")
    side = _preface(control).side
    zygote.preload_pack(side)
    session, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    host = os.getpid()
    pid = os.fork()
    if pid == 0:
        session.close()
        control.close()
        die_with_parent(host, signal.SIGKILL)
        zygote.serve(theirs, side.bodies)  # never returns
    theirs.close()
    heap.keep_freed(heap.SESSION_TRIM)  # the session, not its zygote, which keeps less
    _become_session(control, {ZYGOTE_ENV: f"{session.fileno()}:{pid}"})


def _become_spawning_session() -> None:
    """A host where nothing forks (macOS, Windows; ``mode.start_method``): it imports torch, is told the
    pack on its standard input, spawns that many workers ahead (``portable.spawn_ahead``: a spare's
    import torch while the student reads the last grade) and becomes the session, whose pool takes them."""
    import torch
    import torch.distributed  # noqa: F401 - the session's expected values, as a cold session imports them

    from grader.runtimes.torchdist import portable

    control = os.fdopen(0, "rb", closefd=False)
    preface = _preface(control)
    portable.spawn_ahead(preface.side, preface.ahead)
    _become_session(control, {})


def _become_session(control: IO[bytes], extra: dict[str, str]) -> None:
    """Step 4: read the session's request and run it, with ``extra`` added to its environment."""
    # Imported before the request, not after it: a spare waiting for its grading (a watch loop's re-grade)
    # has them ready; they hold nothing of any grading (the plugin reads its configuration only once run).
    import pytest

    import grader.matrix.plugin  # noqa: F401 - `-p grader.matrix.plugin` finds it imported

    argv, env, cwd = _request(control)
    os.environ.clear()
    os.environ.update({**env, **extra})
    tempfile.tempdir = None  # found again from the session's own environment, not the host's
    os.chdir(cwd)
    sys.argv = ["pytest", *argv]
    raise SystemExit(pytest.console_main())


def _preface(control: IO[bytes]) -> Preface:
    """The runner's first line, :meth:`Preface.to_json`: the pack the zygote preloads, or whose workers
    are spawned ahead."""
    line = control.readline(MAX_REQUEST)
    if not line.endswith(b"\n"):
        raise SystemExit("the runner sent no pack")  # it closed the pipe: this host was not needed
    return Preface.from_json(json.loads(line))


def _request(control: IO[bytes]) -> tuple[list[str], dict[str, str], str]:
    """The runner's last message, ``{"argv": [...], "env": {...}, "cwd": "..."}``, then end of file:
    the session's pytest arguments, environment and directory."""
    data = control.read(MAX_REQUEST + 1)
    control.close()
    if len(data) > MAX_REQUEST:
        raise SystemExit("the runner's request is too large")
    if not data:
        raise SystemExit("the runner sent no request")  # it is gone; PDEATHSIG ends us next
    request: dict[str, Any] = json.loads(data)
    return [str(a) for a in request["argv"]], {str(k): str(v) for k, v in request["env"].items()}, str(request["cwd"])


if __name__ == "__main__":
    main()
