"""Rank side: the life of one forked rank process.  The only place student code is imported.

Order matters: join the Gloo group while the process is still the grader's, then enter the
isolation layers, install the guard, and only then import student modules, lazily, per case.
Every exit is ``os._exit``: a forked child must never run the parent's pytest or atexit code.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from grader.packs.a9.bodies import BODIES, MODULE_OF, BadReturn
from grader.sandbox import wire
from grader.sandbox.status import StatusBoard

STUDENT_MODULES = ("src.collectives", "src.transformer")
COLLECTIVE_NAMES = ("my_broadcast", "my_allreduce", "my_allgather", "my_reduce_scatter", "my_all_to_all")


@dataclass(frozen=True)
class RankPipes:
    """File descriptors a rank keeps; every other inherited descriptor is closed."""

    control: int  # runner -> rank frames
    result: int  # rank -> runner frames
    output: int  # the rank's stdout and stderr
    stacks: int  # faulthandler dumps on SIGUSR1


@dataclass(frozen=True)
class RankSetup:
    rank: int
    world_size: int
    store_path: str
    sandbox: str
    scratch: str
    isolation: Any  # grader.sandbox.isolation.IsolationConfig, or None where that module is absent


class StudentImportError(Exception):
    """A student module failed to import; carries a message with the student's own frames."""


class Student:
    """Lazily imported student modules.  A broken ``collectives.py`` is replaced by a placeholder
    so that ``transformer.py`` (which imports ``my_all_to_all`` from it) can still be graded."""

    def __init__(self, sandbox: str, status: StatusBoard, rank: int) -> None:
        self.sandbox = sandbox
        self.status = status
        self.rank = rank
        self.errors: dict[str, str] = {}

    def module(self, name: str) -> Any:
        if name in self.errors:
            raise StudentImportError(self.errors[name])
        if name in sys.modules:
            return sys.modules[name]
        import importlib

        self.status.set(self.rank, StatusBoard.IMPORTING, f"importing {name}")
        try:
            if name == "src.transformer":
                self.module_or_placeholder("src.collectives")
            return importlib.import_module(name)
        except BaseException as exc:  # a student module may raise anything, SystemExit included
            self.errors[name] = describe_import_error(exc, self.sandbox)
            sys.modules.pop(name, None)
            raise StudentImportError(self.errors[name]) from None
        finally:
            self.status.set(self.rank, StatusBoard.RUNNING, "")

    def module_or_placeholder(self, name: str) -> None:
        try:
            self.module(name)
        except StudentImportError as exc:
            sys.modules[name] = _placeholder(name, str(exc))


def _placeholder(name: str, reason: str) -> Any:
    import types

    module = types.ModuleType(name)

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        # not a StudentImportError: the caller's module did import, only this call fails
        raise RuntimeError(f"{name.split('.')[-1]}.py could not be imported: {reason}")

    for fn in COLLECTIVE_NAMES:
        setattr(module, fn, unavailable)
    return module


def describe_import_error(exc: BaseException, sandbox: str) -> str:
    if isinstance(exc, SyntaxError):
        where = Path(exc.filename or "?").name
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
    from grader.sandbox.guard import ForbiddenCollective

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
    if isinstance(exc, SystemExit):
        return "exception", f"the code called sys.exit({exc.code!r})" + student_frames(exc, sandbox)
    return "exception", f"{type(exc).__name__}: {text[:500]}" + student_frames(exc, sandbox)


#: Exit status of a rank whose *grader* code failed; the runner reports it as a grader error.
GRADER_FAILURE = 70


def main(setup: RankSetup, pipes: RankPipes, status: StatusBoard) -> None:
    """Entry point in the forked child.  Never returns."""
    code = 0
    try:
        _prepare_process(setup, pipes)
        _serve(setup, pipes, status)
    except BaseException:  # anything here is a grader failure inside the rank: report on stderr
        traceback.print_exc()
        code = GRADER_FAILURE
    finally:
        os._exit(code)


def _prepare_process(setup: RankSetup, pipes: RankPipes) -> None:
    os.setsid()  # own session: the terminal's Ctrl-C goes to the grader, which tears ranks down
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    # SIGPIPE stays ignored (Python's default): a peer that died must surface as an exception here,
    # not kill this rank and blur which rank was the cause
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(pipes.output, 1)
    os.dup2(pipes.output, 2)
    keep = {0, 1, 2, pipes.control, pipes.result, pipes.stacks}
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=pipes.stacks, all_threads=True, chain=False)
    torch.set_num_threads(1)
    for key in [k for k in os.environ if k.startswith("GRADER_")]:
        del os.environ[key]  # the input salt and paths are the runner's business
    os.environ.update(
        {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "HOME": setup.scratch, "TMPDIR": setup.scratch}
    )


def _open_fds() -> list[int]:
    try:
        return [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 256))


def _serve(setup: RankSetup, pipes: RankPipes, status: StatusBoard) -> None:
    from grader.sandbox import guard as guard_mod

    if setup.isolation is not None:
        from grader.sandbox import isolation

        isolation.prepare(setup.isolation)  # namespaces need the single-threaded, pre-Gloo process
    store = dist.FileStore(setup.store_path, setup.world_size)
    dist.init_process_group(
        "gloo",
        store=store,
        rank=setup.rank,
        world_size=setup.world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    layers = _isolate(setup)
    guard = guard_mod.install(setup.rank, setup.sandbox, lambda state, text: status.set(setup.rank, state, text))
    os.chdir(setup.scratch)
    sys.path.append(setup.sandbox)  # appended: the student's package never shadows site-packages
    student = Student(setup.sandbox, status, setup.rank)
    out = os.fdopen(pipes.result, "wb", buffering=0)
    out.write(wire.encode({"status": "ready", "isolation": layers}))
    control = os.fdopen(pipes.control, "rb", buffering=0)
    reader = wire.FrameReader(max_bytes=1 << 30)
    while True:
        frame = _read_frame(control, reader)
        if frame is None or frame.header.get("op") != "case":
            return
        status.set(setup.rank, StatusBoard.RUNNING, "")
        header, tensors = _run_case(frame, student, guard, setup.sandbox)
        status.set(setup.rank, StatusBoard.DONE, "")
        try:
            payload = wire.encode(header, tensors)
        except wire.WireError as exc:
            payload = wire.encode({**header, "status": "bad_return", "message": str(exc)})
        out.write(payload)


def _isolate(setup: RankSetup) -> dict[str, str]:
    if setup.isolation is None:
        return {"isolation": "off: grader.sandbox.isolation is not available"}
    from grader.sandbox import isolation

    return dict(isolation.enter(setup.isolation))


def _read_frame(stream: Any, reader: wire.FrameReader) -> wire.Frame | None:
    while True:
        chunk = stream.read(1 << 20)
        if not chunk:
            return None
        frames = reader.feed(chunk)
        if frames:
            return frames[0]


def _run_case(
    frame: wire.Frame, student: Student, guard: Any, sandbox: str
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    head = frame.header
    guard.begin_case(frozenset(head.get("allowed", [])), bool(head.get("keep_events")), float(head["t0"]))
    kind = head["kind"]
    for name, reason in head.get("broken", {}).items():  # failed or hung in an earlier case: never retried
        if name not in sys.modules:
            student.errors.setdefault(str(name), str(reason)[:2000])
    tensors: dict[str, torch.Tensor] = {}
    try:
        student.module(MODULE_OF[kind])
        with torch.no_grad():
            tensors = BODIES[kind](student, head.get("params", {}), frame.tensors)
        status, message = "ok", ""
    except BaseException as exc:  # the verdict is decided by the runner from this report
        status, message = classify(exc, sandbox)
    trace = guard.trace
    return (
        {"status": status, "message": message[:4000], "trace": trace.summary(), "events": trace.events},
        tensors,
    )
