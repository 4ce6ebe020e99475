"""Rank side: the runtime half of the communication policy, and the rank's claimed trace.

Installed in every rank process after the Gloo group is up and before student code loads.
Every route to a built-in collective we know of (module functions, ``distributed_c10d``, the
``ProcessGroup``/``Backend`` methods, the c10d and functional-collective dispatcher ops, the
functional and autograd wrappers) is replaced by a stub that raises :class:`ForbiddenCollective`
naming the call and the student's line: the feedback a student needs.  Names the case's policy
allows are recorded and passed through.  Point-to-point operations are passed through and
recorded; while one blocks, the rank's status slot says so, which is how the session tells a
deadlock (every rank blocked in communication) from a slow computation.

None of this is trusted.  Student code runs in this process and can patch the guard, unwrap a
stub (its closure holds the original) or reach Gloo through a route no stub covers.  What decides
points is measured by the session on the wire (``grader.runtimes.torchdist.traffic``): a built-in collective
shows there whatever route reached it, and a record that does not match the measured traffic is
a ``tampering`` verdict.  The records remain for what only this process can see: which student
function a message was sent under, and the time-vs-rank diagram.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._C import _distributed_c10d as _c10d_ext

from grader.runtimes.torchdist.policy import COLLECTIVES, PROCESS_GROUP_METHODS, Policy

MAX_EVENTS = 20_000
_OP_KEYWORDS = ("reduce", "gather", "scatter", "broadcast", "all_to_all", "alltoall", "barrier")


class ForbiddenCollective(RuntimeError):
    """Raised in place of a built-in collective that the policy forbids."""


@dataclass
class Trace:
    """What one rank did on the wire during one case."""

    rank: int = 0
    t0: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)
    sends: int = 0
    recvs: int = 0
    bytes_sent: int = 0
    bytes_recv: int = 0
    sent_to: dict[int, int] = field(default_factory=dict)  # peer -> messages
    sent_bytes_to: dict[int, int] = field(default_factory=dict)  # peer -> payload bytes
    recv_from: dict[int, int] = field(default_factory=dict)
    collectives: list[str] = field(default_factory=list)  # built-in collectives reached (allowed ones)
    violations: list[str] = field(default_factory=list)
    student_functions: set[str] = field(default_factory=set)

    def summary(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "sends": self.sends,
            "recvs": self.recvs,
            "bytes_sent": self.bytes_sent,
            "bytes_recv": self.bytes_recv,
            "sent_to": {str(k): v for k, v in sorted(self.sent_to.items())},
            "sent_bytes_to": {str(k): v for k, v in sorted(self.sent_bytes_to.items())},
            "recv_from": {str(k): v for k, v in sorted(self.recv_from.items())},
            "collectives": sorted(set(self.collectives)),
            "violations": self.violations[:20],
            "student_functions": sorted(self.student_functions),
        }


@dataclass
class _Context:
    """The student's place on the stack when a rank communicates."""

    function: str | None = None  # the innermost student function
    file: str = ""  # its file, relative to the sandbox ("src/transformer.py"): the policy's key
    where: str = ""  # "file:line" of its frame
    collective: str | None = None  # the innermost my_* collective, the student's or a stand-in's
    stand_in: str = ""  # set when that collective is the grader's known-good one
    within: set[str] = field(default_factory=set)  # every my_* collective on the stack

    def describe(self) -> str:
        """ " at collectives.py:17 in my_allreduce", or where the grader's stand-in was called from: a
        wait inside grader code is never reported as the student's own line."""
        called = (f" at {self.where}" if self.where else "") + (f" in {self.function}" if self.function else "")
        if self.stand_in:
            return f" in the grader's known-good {self.stand_in}" + (f", called{called}" if called else "")
        return called


@dataclass
class _Call:
    """One point-to-point call, from its start until it returns and is recorded."""

    op: str
    peer: int
    tensors: list[torch.Tensor]
    context: _Context
    description: str  # what the rank's status slot says while it waits on this call
    started: float


class Guard:
    """The installed guard of one rank process.  ``begin_case`` resets the trace and policy."""

    def __init__(
        self, rank: int, sandbox: str, status: Callable[[int, str], None], attributed: list[str], policy: Policy
    ) -> None:
        self.rank = rank
        self.sandbox = sandbox
        self.status = status  # (StatusSlot state, description) -> None; writes the rank's slot
        self.attributed = frozenset(attributed)  # the student functions a message is attributed to
        self.policy = policy  # which built-in collectives which student function may call
        self.trace = Trace(rank=rank)
        self.keep_events = False
        #: "" or the one student function data may reach this rank through in this case (a case's
        #: ``must_use``): whatever arrives any other way is NaN (see :meth:`poisons`)
        self.only_through = ""
        self.pending: dict[int, str] = {}  # id(work) -> what waiting on it means
        self._local = threading.local()  # per thread: depth inside traced ops, so nested calls count once
        #: code object of a grader function standing in for a student's Task 1 function -> its name
        self.stand_ins: dict[Any, str] = {}

    def begin_case(self, keep_events: bool, t0: float, only_through: str = "") -> None:
        """Reset for a new case; ``t0`` is the runner's monotonic clock at case start."""
        self.keep_events = keep_events
        self.only_through = only_through
        self.trace = Trace(rank=self.rank, t0=t0)
        self.pending.clear()

    def nested(self) -> bool:
        """Inside a traced op on this thread (torch's send calls isend calls ProcessGroup.send)."""
        return bool(getattr(self._local, "depth", 0))

    @contextlib.contextmanager
    def nesting(self) -> Iterator[None]:
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield
        finally:
            self._local.depth -= 1

    # --- student context -------------------------------------------------------------------
    def _context(self) -> _Context:
        """Where the student's code is on this thread's stack (see :class:`_Context`)."""
        frame = sys._getframe(2)
        context = _Context()
        while frame is not None:
            code = frame.f_code
            if code.co_filename.startswith(self.sandbox):
                if context.function is None:
                    context.function = code.co_name
                    context.file = code.co_filename[len(self.sandbox) :].lstrip("/")
                    context.where = f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
                if code.co_name in self.attributed:
                    context.within.add(code.co_name)
                    context.collective = context.collective or code.co_name
            elif code in self.stand_ins:
                context.within.add(self.stand_ins[code])
                if context.collective is None:
                    context.collective = context.stand_in = self.stand_ins[code]
            frame = frame.f_back  # type: ignore[assignment]
        return context

    def poisons(self, context: _Context) -> bool:
        """Whether data this call brings in is replaced by NaN: the case lets data arrive only through
        one student function (Ulysses: "use my_all_to_all for exchanging sequence chunks"), and the
        call is not inside it.  The bytes still travel (the wire and the records agree); the student's
        buffer just never holds them, so a computation fed any other way computes on NaN."""
        return bool(self.only_through) and self.only_through not in context.within

    # --- point to point --------------------------------------------------------------------
    def call(self, op: str, peer: int, tensors: list[torch.Tensor]) -> _Call:
        """A point-to-point call about to start: where the student made it, and how a wait on it reads."""
        context = self._context()
        arrow = "dst" if op in ("send", "isend") else "src"
        return _Call(op, peer, tensors, context, f"{op}({arrow}={peer}){context.describe()}", time.monotonic())

    def record(self, call: _Call) -> None:
        """Count a call that returned: one that raised (a non-contiguous buffer, say) never reached the
        wire, and counting it would make honest traffic look unexplained."""
        nbytes = sum(t.numel() * t.element_size() for t in call.tensors)
        tensor = call.tensors[0] if call.tensors else torch.empty(0)
        t, peer = self.trace, call.peer
        if call.op in ("send", "isend"):
            t.sends += 1
            t.bytes_sent += nbytes
            t.sent_to[peer] = t.sent_to.get(peer, 0) + 1
            t.sent_bytes_to[peer] = t.sent_bytes_to.get(peer, 0) + nbytes
        else:
            t.recvs += 1
            t.bytes_recv += nbytes
            t.recv_from[peer] = t.recv_from.get(peer, 0) + 1
        if call.context.collective:
            t.student_functions.add(call.context.collective)
        if self.keep_events and len(t.events) < MAX_EVENTS:
            t.events.append(
                {
                    "rank": self.rank,
                    "op": call.op,
                    "peer": peer,
                    "bytes": nbytes,
                    "dtype": str(tensor.dtype).removeprefix("torch."),
                    "shape": list(tensor.shape),
                    "t": round(call.started - t.t0, 6),
                    "function": call.context.collective or call.context.function,
                }
            )

    @contextlib.contextmanager
    def blocked(self, description: str) -> Iterator[None]:
        self.status(1, description)
        try:
            yield
        finally:
            self.status(0, "")

    # --- collectives -----------------------------------------------------------------------
    def collective(self, qualname: str, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        @functools.wraps(original, updated=())  # not the original's __dict__: an op's .default is a route
        def stub(*args: Any, **kwargs: Any) -> Any:
            context = guard._context()
            if name in guard.policy.for_function(context.file, context.function).allowed:
                guard.trace.collectives.append(name)
                if context.collective:
                    guard.trace.student_functions.add(context.collective)
                with guard.blocked(f"{qualname}()"):
                    result = original(*args, **kwargs)
                    if guard.poisons(context):  # completed first, so no late arrival overwrites the NaN
                        if hasattr(result, "wait"):
                            result.wait()
                        _fill_nan([*args, *kwargs.values()])
                    return result
            message = f"{qualname}() is a built-in collective, which this task forbids" + (
                f" (called at {context.where} in {context.function})" if context.where else ""
            )
            guard.trace.violations.append(message)
            raise ForbiddenCollective(message)

        del stub.__wrapped__  # do not hand the original back to `inspect.unwrap`
        return stub


def _canonical(name: str) -> str:
    """Map process-group method and dispatcher-op spellings onto the policy's names."""
    base = name.strip("_").removesuffix("_")
    aliases = {
        "allreduce": "all_reduce",
        "allgather": "all_gather",
        "alltoall": "all_to_all",
        "alltoall_base": "all_to_all_single",
        "allgather_base": "all_gather_into_tensor",
        "reduce_scatter_base": "reduce_scatter_tensor",
    }
    return aliases.get(base, base)


def install(rank: int, sandbox: str, status: Callable[[int, str], None], student: Any) -> Guard:
    """Patch every collective entry point and the point-to-point functions; return the guard.
    ``student`` is the rank's ``StudentConfig``: which functions messages are attributed to, and
    the rubric's policy, which decides per student function (the innermost one calling)."""
    guard = Guard(rank, sandbox, status, list(student.attributed), Policy.from_dict(student.policy))

    def forbid(owner: Any, attr: str, qualname: str) -> None:
        original = getattr(owner, attr, None)
        if original is None or not callable(original):
            return
        setattr(owner, attr, guard.collective(qualname, _canonical(attr), original))

    for module, prefix in ((dist, "dist"), (c10d, "dist.distributed_c10d")):
        for name in COLLECTIVES:
            forbid(module, name, f"{prefix}.{name}")
    for cls_name in ("ProcessGroup", "ProcessGroupGloo", "Backend", "_ProcessGroupWrapper"):
        cls = getattr(_c10d_ext, cls_name, None)
        if cls is not None:
            for name in PROCESS_GROUP_METHODS:
                if name in vars(cls):
                    forbid(cls, name, f"ProcessGroup.{name}")
    _forbid_wrapper_modules(forbid)
    _forbid_dispatcher_ops(forbid)
    _trace_point_to_point(guard)
    return guard


#: torch's functional wrappers of the collectives, each a route to guard
WRAPPER_MODULES = ("torch.distributed._functional_collectives", "torch.distributed.nn.functional")


def preload() -> None:
    """Zygote side: import the wrapper modules once (25 ms of every rank's start otherwise) and
    resolve the dispatcher's collective ops."""
    for modname in WRAPPER_MODULES:
        with contextlib.suppress(Exception):  # an optional module missing in this torch build
            importlib.import_module(modname)
    for _ in _dispatcher_ops():
        pass


def _forbid_wrapper_modules(forbid: Callable[[Any, str, str], None]) -> None:
    for modname in WRAPPER_MODULES:
        try:
            module = importlib.import_module(modname)
        except Exception:  # an optional module missing in this torch build is no route to guard
            continue
        for name in list(vars(module)):
            if any(k in name for k in _OP_KEYWORDS) and callable(getattr(module, name)):
                forbid(module, name, f"{modname}.{name}")


#: the dispatcher's collective ops, by namespace: each a route to guard
DISPATCHER_OPS = {
    "c10d": [
        "allreduce_",
        "allreduce_coalesced_",
        "allgather_",
        "_allgather_base_",
        "allgather_coalesced_",
        "allgather_into_tensor_coalesced_",
        "broadcast_",
        "reduce_",
        "gather_",
        "scatter_",
        "reduce_scatter_",
        "_reduce_scatter_base_",
        "reduce_scatter_tensor_coalesced_",
        "alltoall_",
        "alltoall_base_",
        "barrier",
        "monitored_barrier_",
    ],
    "_c10d_functional": [
        "all_reduce",
        "all_reduce_",
        "all_reduce_coalesced",
        "all_reduce_coalesced_",
        "all_gather_into_tensor",
        "all_gather_into_tensor_out",
        "all_gather_into_tensor_coalesced",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_out",
        "reduce_scatter_tensor_coalesced",
        "all_to_all_single",
        "broadcast",
        "broadcast_",
    ],
    "_c10d_functional_autograd": ["all_to_all_single", "reduce_scatter_tensor", "all_gather_into_tensor"],
}


def _dispatcher_ops() -> Iterator[tuple[str, Any, str]]:
    """(namespace's name, namespace, op) for every op of :data:`DISPATCHER_OPS` this torch build
    has.  Resolving an op builds its overload packet from the op's schema: the zygote does it once
    (:func:`preload`), 1.4 ms of every rank's start otherwise (issue 23)."""
    for ns_name, ops in DISPATCHER_OPS.items():
        namespace = getattr(torch.ops, ns_name)
        for op in ops:
            try:
                getattr(namespace, op)
            except (AttributeError, RuntimeError):
                continue
            yield ns_name, namespace, op


def _forbid_dispatcher_ops(forbid: Callable[[Any, str, str], None]) -> None:
    for ns_name, namespace, op in _dispatcher_ops():
        forbid(namespace, op, f"torch.ops.{ns_name}.{op}")


def _trace_point_to_point(guard: Guard) -> None:
    """Record every route to point-to-point: send/recv/isend/irecv (module level and c10d), the
    ``send``/``recv``/``recv_anysource`` methods of process groups and backends, and ``Work.wait``.

    The session compares these records with the traffic it measured; a route left unrecorded would
    make honest traffic look unexplained.  ``batch_isend_irecv`` needs no wrapper of its own: it
    calls ``P2POp.op``, one of the wrapped functions (the guard is installed before any ``P2POp``
    is built).  Nested calls (``dist.send`` -> ``isend`` -> ``ProcessGroup.send``) count once.
    """

    def traced(op: str, original: Callable[..., Any], blocking: bool, method: bool) -> Callable[..., Any]:
        @functools.wraps(original, updated=())
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if guard.nested():
                return original(*args, **kwargs)
            tensors, peer = _p2p_arguments(op, args, kwargs, method)
            call = guard.call(op, peer, tensors)
            if op in ("recv", "irecv") and guard.poisons(call.context):
                args, kwargs = _into_scratch(args, kwargs, method)
            with guard.nesting():
                if blocking:
                    with guard.blocked(call.description):
                        result = original(*args, **kwargs)
                else:
                    result = original(*args, **kwargs)
                    if result is not None:
                        guard.pending[id(result)] = f"wait() on {call.description}"
            guard.record(call)
            return result

        del wrapper.__wrapped__
        return wrapper

    # one wrapper per function, bound under both names: ``P2POp`` accepts only ``c10d.isend``/``irecv``
    # themselves, and students build it with ``dist.isend`` (batch_isend_irecv, A5's pipeline_communicate)
    for op, blocking in (("send", True), ("recv", True), ("isend", False), ("irecv", False)):
        wrapped = traced(op, getattr(c10d, op), blocking=blocking, method=False)
        for module in (dist, c10d):
            setattr(module, op, wrapped)
    for cls in _p2p_classes():
        for name, op in (("send", "isend"), ("recv", "irecv"), ("recv_anysource", "irecv")):
            if name in vars(cls):
                setattr(cls, name, traced(op, vars(cls)[name], blocking=False, method=True))

    work_cls = _c10d_ext.Work
    original_wait = work_cls.wait

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        description = guard.pending.pop(id(self), "wait()")
        if guard.nested():  # inside a traced send/recv, whose own description is already shown
            return original_wait(self, *args, **kwargs)
        with guard.blocked(description):
            return original_wait(self, *args, **kwargs)

    work_cls.wait = wait  # type: ignore[method-assign]


def _into_scratch(
    args: tuple[Any, ...], kwargs: dict[str, Any], method: bool
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A receive's arguments with each buffer replaced by a scratch tensor of its shape, the
    student's buffers filled with NaN (see :meth:`Guard.poisons`)."""

    def swap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        _fill_nan([t])
        return torch.empty_like(t)

    if method:  # ProcessGroup.recv(self, tensors, srcRank, tag)
        if len(args) > 1:
            return (args[0], [swap(t) for t in args[1]], *args[2:]), kwargs
        return args, {**kwargs, "tensors": [swap(t) for t in kwargs.get("tensors", [])]}
    if args:
        return (swap(args[0]), *args[1:]), kwargs
    return args, {**kwargs, "tensor": swap(kwargs.get("tensor"))}


def _fill_nan(values: list[Any]) -> None:
    for value in values:
        if isinstance(value, (list, tuple)):
            _fill_nan(list(value))
        elif isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
            value.fill_(float("nan"))


def _p2p_classes() -> list[Any]:
    names = ("ProcessGroup", "Backend", "ProcessGroupGloo", "_ProcessGroupWrapper")
    return [cls for name in names if (cls := getattr(_c10d_ext, name, None)) is not None]


def _p2p_arguments(
    op: str, args: tuple[Any, ...], kwargs: dict[str, Any], method: bool
) -> tuple[list[torch.Tensor], int]:
    """(tensors, peer) of a point-to-point call, whatever its spelling; peer -1 when unknown."""
    if method:  # ProcessGroup.send(self, tensors, dstRank, tag) / recv_anysource(self, tensors, tag)
        tensors = args[1] if len(args) > 1 else kwargs.get("tensors", [])
        value = args[2] if len(args) > 3 else kwargs.get("dstRank", kwargs.get("srcRank", -1))
    else:
        tensors = [args[0] if args else kwargs.get("tensor")]
        key = "dst" if op in ("send", "isend") else "src"
        value = kwargs.get(key, args[1] if len(args) > 1 else None)
        if value is None:
            value = kwargs.get("group_dst" if key == "dst" else "group_src", -1)
    try:
        peer = int(value)
    except (TypeError, ValueError):
        peer = -1
    return [t for t in tensors if isinstance(t, torch.Tensor)], peer
