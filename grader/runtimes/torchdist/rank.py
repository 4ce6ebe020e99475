"""Rank side: the life of one rank process.  The only place student code is imported.

A rank is forked from a group's init (see ``grader.runtimes.torchdist.zygote``).  Order matters::

    join the rank's cgroups              while the host's /sys is still visible
    isolation.prepare()                  new mount and IPC namespaces, the new root assembled
    init_process_group()                 Gloo joins the group through its FileStore
    connections()                        this rank's Gloo sockets, for the session's traffic map
    isolation.enter()                    pivot_root, rlimits, the rank's own uid, prctl
    guard, seccomp filter, audit hook    then "ready", then cases

Everything up to "ready" is the grader's own code in a process no student code has touched yet,
so what the ready frame says (layers, sockets) is a fact; everything after it is a claim the
session checks.  Student code never runs on the main thread: cases run on one thread started
before any student code, whose first frame is :func:`_student_loop`, so a student frame's
``f_back`` chain ends there instead of reaching the loop that owns the pipes (and a fork bomb
that uses up the group's tasks cannot keep the next case from running).  Every exit is ``os._exit`` with status 0 (the
session closed the control pipe) or 1 (anything else): a rank's exit status says nothing but
"it ended", and only the session declares a grader error.
"""

from __future__ import annotations

import _thread
import dataclasses
import datetime
import faulthandler
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from grader.runtimes import OUTSIDE, BadReturn, StuckThreads, collector_paused, student_line
from grader.runtimes.torchdist import guard, replies
from grader.runtimes.torchdist.torchrun_env import torchrun_env
from grader.sandbox import audit, descriptors, isolation, reaping, syscalls, wire
from grader.sandbox.parent import die_with_parent
from grader.sandbox.status import StatusSlot

MAX_CONTROL_FRAME = 1 << 30


@dataclass(frozen=True)
class RankPipes:
    """Descriptors a rank keeps; every other inherited descriptor is closed."""

    control: int  # session -> rank frames
    result: int  # rank -> session frames
    output: int  # the rank's stdout and stderr
    stacks: int  # faulthandler dumps on SIGUSR1
    status: int  # memfd of this rank's status slot


@dataclass(frozen=True)
class StudentConfig:
    """What the pack says about its student code, as the session sent it (``grader.pack``)."""

    placeholders: dict[str, list[str]]  # module -> names a placeholder offers when it failed to import
    imports_before: dict[str, list[str]]  # module -> modules imported (or replaced by a placeholder) first
    attributed: list[str]  # student functions the messages this rank sends are attributed to
    policy: dict[str, list[str]]  # the rubric's policy.allow: which built-in collectives which function may call


@dataclass(frozen=True)
class RankSetup:
    rank: int
    world_size: int
    store_path: str
    sandbox: str
    cgroups: tuple[str, ...]  # cgroup.procs files this rank joins
    isolation: isolation.IsolationConfig | None
    bodies: Any  # the pack's rank-side module: BODIES (kind -> body)
    student: StudentConfig


def setup_from(request: Any, rank: int, bodies: Any) -> RankSetup:
    """This rank's setup from the zygote's group request."""
    own = request.ranks[rank]
    cfg = None
    if request.isolation is not None:
        fields = {**request.isolation, "scratch": Path(own["scratch"]), "uid": own["uid"], "gid": own["gid"]}
        fields["sandbox"] = Path(fields["sandbox"])
        fields["allow_read"] = tuple(Path(p) for p in fields["allow_read"])
        fields["hide"] = tuple(Path(p) for p in fields["hide"])
        cfg = isolation.IsolationConfig(**fields)
    student = StudentConfig(**request.student)
    return RankSetup(
        rank, request.world_size, request.store, request.sandbox, tuple(own["cgroups"]), cfg, bodies, student
    )


def preload() -> None:
    """Zygote side, once: work every rank would otherwise repeat."""
    syscalls.preload()
    guard.preload()
    _no_lazy_device_seeding()


def _no_lazy_device_seeding() -> None:
    """``torch.manual_seed`` also seeds every accelerator backend; one that is not available queues the
    seeding with ``traceback.format_stack()``, which walks up into the rank runtime's frames, and the
    audit hook refuses that: honest student code calling ``torch.manual_seed`` would crash.  Ranks run
    on the CPU, so an absent backend's seeding is made the no-op it is meant to be."""
    for name in ("cuda", "xpu", "mtia"):
        backend = getattr(torch, name, None)
        if backend is not None and hasattr(backend, "manual_seed_all") and not backend.is_available():
            backend.manual_seed_all = backend.manual_seed = _ignore_seed


def _ignore_seed(seed: int) -> None:
    """An absent accelerator's seeding (see :func:`_no_lazy_device_seeding`)."""


class StudentImportError(Exception):
    """A student module failed to import; carries a message with the student's own frames."""


class Student:
    """Lazily imported student modules.  A module another one imports first (the pack's
    ``imports_before``) that is broken is replaced by a placeholder offering the pack's names, each
    raising with the reason, so the importing module can still be graded (A9: ``transformer.py``
    imports ``my_all_to_all`` from ``collectives.py``)."""

    def __init__(
        self, sandbox: str, status: StatusSlot, config: StudentConfig, stand_ins: dict[Any, str] | None = None
    ) -> None:
        self.sandbox = sandbox
        self.status = status
        self.config = config
        self.errors: dict[str, str] = {}
        #: the guard's registry: a body that runs a grader function in place of a student's registers
        #: its code object here, so the messages it sends are attributed to the name it stands for
        self.stand_ins: dict[Any, str] = {} if stand_ins is None else stand_ins

    def module(self, name: str) -> Any:
        if name in self.errors:
            raise StudentImportError(self.errors[name])
        if name in sys.modules:
            return sys.modules[name]
        import importlib

        self.status.set(StatusSlot.IMPORTING, f"importing {name}")
        try:
            for needed in self.config.imports_before.get(name, []):
                self.module_or_placeholder(needed)
            return importlib.import_module(name)
        except BaseException as exc:  # a student module may raise anything, SystemExit included
            self.errors[name] = describe_import_error(exc, self.sandbox)
            sys.modules.pop(name, None)
            raise StudentImportError(self.errors[name]) from None
        finally:
            self.status.set(StatusSlot.RUNNING, "")

    def module_or_placeholder(self, name: str) -> None:
        try:
            self.module(name)
        except StudentImportError as exc:
            sys.modules[name] = _placeholder(name, str(exc), self.config.placeholders.get(name, []))


def _placeholder(name: str, reason: str, names: list[str]) -> Any:
    import types

    module = types.ModuleType(name)

    def unavailable() -> Any:
        """A function of its own per name: a pack that puts its own versions in their place (A9's
        ``substituted``) finds each name's importers by identity, and one shared function made every
        name's importer look like every other's (the reference's my_allreduce was replaced with
        my_all_to_all)."""

        def call(*args: Any, **kwargs: Any) -> Any:
            # not a StudentImportError: the caller's module did import, only this call fails
            raise RuntimeError(f"{name.split('.')[-1]}.py could not be imported: {reason}")

        return call

    for fn in names:
        setattr(module, fn, unavailable())
    return module


def describe_import_error(exc: BaseException, sandbox: str) -> str:
    if isinstance(exc, SyntaxError):
        where = Path(str(exc.filename or "?")).name
        caret = ""
        if exc.text:
            caret = "\n    " + exc.text.rstrip("\n") + "\n    " + " " * max((exc.offset or 1) - 1, 0) + "^"
        return f"SyntaxError in {where} line {exc.lineno}: {exc.msg}{caret}"
    return f"{type(exc).__name__}: {exc}" + student_frames(exc, sandbox)


def student_frames(exc: BaseException, sandbox: str) -> str:
    """The traceback restricted to the student's own files: what they can act on."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(sandbox)]
    lines = [f"\n  {Path(f.filename).name}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames[-6:]]
    return "".join(lines)


def classify(exc: BaseException, sandbox: str) -> tuple[str, str]:
    """(status, message) for an exception that escaped a case body."""
    from grader.runtimes.torchdist.guard import ForbiddenCollective

    if isinstance(exc, StudentImportError):
        return "import_error", str(exc)
    if isinstance(exc, NotImplementedError):
        return "not_implemented", f"not implemented yet ({exc})" if str(exc) else "not implemented yet"
    if isinstance(exc, ForbiddenCollective):
        return "forbidden", str(exc)
    text = str(exc)
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or "DefaultCPUAllocator" in text:
        return "memory", "memory limit exceeded" + student_frames(exc, sandbox)
    if isinstance(exc, BadReturn):
        return "bad_return", text
    if isinstance(exc, StuckThreads):  # the threads runtime's harness: its student threads hung
        return "hang", text
    if isinstance(exc, SystemExit):
        return "exception", f"the code called sys.exit({exc.code!r})" + student_frames(exc, sandbox)
    return "exception", f"{type(exc).__name__}: {text[:500]}" + student_frames(exc, sandbox)


def main(setup: RankSetup, pipes: RankPipes) -> None:
    """Entry point in the forked rank.  Never returns."""
    code = 1
    try:
        _prepare_process(pipes)
        _serve(setup, pipes)
        code = 0
    except BaseException:  # reported on the rank's output; the session sees only that it ended
        traceback.print_exc()
    finally:
        os._exit(code)


def _prepare_process(pipes: RankPipes) -> None:
    die_with_parent(os.getppid(), signal.SIGKILL)
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    # SIGPIPE stays ignored (Python's default): a peer that died must surface as an exception here,
    # not kill this rank and blur which rank was the cause
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(pipes.output, 1)
    os.dup2(pipes.output, 2)
    keep = {0, 1, 2, pipes.control, pipes.result, pipes.stacks, pipes.status}
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=pipes.stacks, all_threads=True, chain=False)
    os.environ.update({"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})


def _open_fds() -> list[int]:
    try:
        return [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 256))


def _serve(setup: RankSetup, pipes: RankPipes) -> None:
    status = StatusSlot(pipes.status)
    for procs in setup.cgroups:  # first: everything this rank allocates from now on is counted
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    cfg = setup.isolation
    if cfg is not None:
        cfg = dataclasses.replace(cfg, keep_fds=(*cfg.keep_fds, pipes.status))
        isolation.prepare(cfg)  # namespaces need the single-threaded, pre-Gloo process
    dist.init_process_group(
        "gloo",
        store=dist.FileStore(setup.store_path, setup.world_size),
        rank=setup.rank,
        world_size=setup.world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    sockets = descriptors.tcp_connections()
    layers = dict(isolation.enter(cfg)) if cfg is not None else {"isolation": "off: no isolation configured"}
    rank_guard = guard.install(setup.rank, setup.sandbox, status.set, setup.student)
    layers["seccomp"] = syscalls.install()
    layers["audit_hooks"] = audit.install()
    sys.path.append(setup.sandbox)  # appended: the student's package never shadows site-packages
    student = Student(setup.sandbox, status, setup.student, rank_guard.stand_ins)
    cases = _StudentThread()
    own_uid = layers.get("uid") == "on"
    out = os.fdopen(pipes.result, "wb", buffering=0)
    out.write(wire.encode({"status": "ready", "isolation": layers, "connections": sockets}))
    control = os.fdopen(pipes.control, "rb", buffering=0)
    reader = wire.FrameReader(max_bytes=MAX_CONTROL_FRAME)
    while True:
        frame = _read_frame(control, reader)
        if frame is None or frame.header.get("op") not in ("case", "calibrate", "import"):
            return
        status.set(StatusSlot.RUNNING, "")
        if frame.header["op"] == "calibrate":  # the runtime's own code: no student thread needed
            reply = _calibrate(frame, rank_guard)
        else:
            reply = cases.run(_run_case, frame, student, rank_guard, setup)
            if own_uid:  # before the reply, so the next case never starts beside this one's leftovers
                reaping.end_strays()
        status.set(StatusSlot.DONE, "")
        out.write(reply)


def _read_frame(stream: Any, reader: wire.FrameReader) -> wire.Frame | None:
    while True:
        chunk = stream.read(1 << 20)
        if not chunk:
            return None
        frames = reader.feed(chunk)
        if frames:
            return frames[0]


class _StudentThread:
    """The one thread student code runs on; the main thread hands it one case at a time."""

    def __init__(self) -> None:
        self.box: list[Any] = []  # [job] in, [reply] out
        self.go = _thread.allocate_lock()
        self.done = _thread.allocate_lock()
        self.go.acquire()
        self.done.acquire()
        _thread.start_new_thread(_student_loop, (self.box, self.go, self.done))

    def run(self, fn: Any, *args: Any) -> bytearray:
        self.box[:] = [(fn, args)]
        self.go.release()
        self.done.acquire()
        reply = self.box[0] if len(self.box) == 1 else None
        if type(reply) is not bytearray:  # the thread's state was tampered with: whatever it left is no reply
            return wire.encode({"status": "exception", "message": "the case ended without a reply"})
        return reply


def _student_loop(box: list[Any], go: Any, done: Any) -> None:
    """The first frame of the student's thread: nothing above it but the interpreter."""
    while True:
        go.acquire()
        try:
            fn, args = box.pop()
            box.append(fn(*args))
        except BaseException:  # a reply could not even be encoded: the case says so
            box[:] = [wire.encode({"status": "exception", "message": "the case ended without a reply"})]
        finally:
            done.release()


def _calibrate(frame: wire.Frame, rank_guard: guard.Guard) -> bytearray:
    """The runtime's own allreduce of the tensor the session sent (every rank sends it to every other
    and sums what arrives).  The session times it to size each case's time budget
    (``grader.matrix.budgets``); it runs before any student module is imported."""
    rank_guard.begin_case(False, float(frame.header["t0"]))
    x = frame.tensors["x"]
    rank, world_size = dist.get_rank(), dist.get_world_size()
    received = [x if peer == rank else torch.empty_like(x) for peer in range(world_size)]
    works = []
    for peer in range(world_size):
        if peer != rank:
            works += [dist.isend(x, dst=peer), dist.irecv(received[peer], src=peer)]
    for work in works:
        if work is not None:
            work.wait()
    torch.stack(received).sum(0)
    return wire.encode({"status": "ok", "message": "", "trace": rank_guard.trace.summary(), "events": []})


def _run_case(frame: wire.Frame, student: Student, rank_guard: guard.Guard, setup: RankSetup) -> bytearray:
    """Run one case (on the student's thread) and encode its reply.  An "import" frame runs no body:
    the session asks it to learn what a module's import alone leaves running (``MatrixSession``)."""
    head = frame.header
    rank_guard.begin_case(bool(head.get("keep_events")), float(head["t0"]), str(head.get("must_use") or ""))
    for name, reason in head.get("broken", {}).items():  # failed or hung in an earlier case: never retried
        if name not in sys.modules:
            student.errors.setdefault(str(name), str(reason)[:2000])
    nodes, per_node = head.get("layout") or (1, setup.world_size)
    os.environ.update(torchrun_env(setup.rank, int(nodes), int(per_node)))  # before the import: it may read them
    tensors: dict[str, torch.Tensor] = {}
    with collector_paused():
        threads = set(sys._current_frames())
    try:
        if head.get("module"):  # the session names the student module the case needs
            student.module(str(head["module"]))
        if head["op"] == "case":
            with torch.no_grad():  # grad mode is per thread
                tensors = setup.bodies.BODIES[head["kind"]](student, head.get("params", {}), frame.tensors)
        status, message = "ok", ""
    except BaseException as exc:  # the verdict is decided by the session from this report
        status, message = classify(exc, setup.sandbox)
    trace = rank_guard.trace
    header: dict[str, Any] = {"status": status, "message": str.__str__(message)[:4000], "trace": trace.summary()}
    header["events"] = trace.events
    left = _threads_since(threads, setup.sandbox)
    if left:  # Python cannot stop a thread: one left running ends this rank
        header["threads"] = left
    try:
        return wire.encode(header, tensors)
    except (wire.WireError, TypeError, ValueError, RuntimeError) as exc:
        return wire.encode({**header, "status": "bad_return", "message": str(exc)[:4000]})


def _threads_since(before: set[int], sandbox: str) -> list[str]:
    """The threads running now that were not ``before`` the case, as a student finds them in their code
    (``'Thread-1 (_spin)' at collectives.py:22 in _spin``).  The session counts them from /proc; these
    names say which they are, and whether one runs the student's code (only such a one is charged)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    left = []
    with collector_paused():
        frames = sys._current_frames()
    for ident, frame in frames.items():
        if ident not in before:
            where = student_line(frame, sandbox) or OUTSIDE
            left.append(f"{names.get(ident, 'a thread')!r} {where}")
    return left[: replies.MAX_THREADS]
