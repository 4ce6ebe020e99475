"""Rank side: the runtime half of the communication policy, and the communication trace.

Installed in every rank process after the Gloo group is up and before student code loads.
Every route to a built-in collective we know of (module functions, ``distributed_c10d``, the
``ProcessGroup``/``Backend`` methods, the c10d and functional-collective dispatcher ops, the
functional and autograd wrappers) is replaced by a stub that records a violation and raises
:class:`ForbiddenCollective` naming the call; names the case's policy allows are recorded and
passed through.  Point-to-point operations are passed through and recorded as trace events;
while one blocks, the rank's status slot says so, which is how the parent tells a deadlock
(every rank blocked in communication) from a slow computation.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._C import _distributed_c10d as _c10d_ext

from grader.policy import COLLECTIVES, PROCESS_GROUP_METHODS

MAX_EVENTS = 20_000
#: The student's Task 1 functions; the trace notes which of them a message was sent under.
STUDENT_COLLECTIVES = ("my_broadcast", "my_allreduce", "my_allgather", "my_reduce_scatter", "my_all_to_all")
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
            "recv_from": {str(k): v for k, v in sorted(self.recv_from.items())},
            "collectives": sorted(set(self.collectives)),
            "violations": self.violations[:20],
            "student_functions": sorted(self.student_functions),
        }


class Guard:
    """The installed guard of one rank process.  ``begin_case`` resets the trace and policy."""

    def __init__(self, rank: int, sandbox: str, status: Callable[[int, str], None]) -> None:
        self.rank = rank
        self.sandbox = sandbox
        self.status = status  # (StatusBoard state, description) -> None; writes the shared slot
        self.allowed: frozenset[str] = frozenset()
        self.trace = Trace(rank=rank)
        self.keep_events = False
        self._pending: dict[int, str] = {}  # id(work) -> what waiting on it means
        self.depth = 0  # >0 inside a traced op: torch's send/recv call isend/irecv, count them once

    def begin_case(self, allowed: frozenset[str], keep_events: bool, t0: float) -> None:
        """Reset for a new case; ``t0`` is the runner's monotonic clock at case start."""
        self.allowed = allowed
        self.keep_events = keep_events
        self.trace = Trace(rank=self.rank, t0=t0)
        self._pending.clear()

    # --- student context -------------------------------------------------------------------
    def _student_frames(self) -> tuple[str | None, str | None, str]:
        """(innermost student function, innermost my_* collective, "file:line") from the stack."""
        frame = sys._getframe(2)
        function = collective = None
        where = ""
        while frame is not None:
            code = frame.f_code
            if code.co_filename.startswith(self.sandbox):
                if function is None:
                    function = code.co_name
                    where = f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
                if collective is None and code.co_name in STUDENT_COLLECTIVES:
                    collective = code.co_name
            frame = frame.f_back  # type: ignore[assignment]
        return function, collective, where

    # --- point to point --------------------------------------------------------------------
    def record(self, op: str, peer: int, tensor: torch.Tensor) -> str:
        function, collective, where = self._student_frames()
        nbytes = tensor.numel() * tensor.element_size()
        t = self.trace
        if op in ("send", "isend"):
            t.sends += 1
            t.bytes_sent += nbytes
            t.sent_to[peer] = t.sent_to.get(peer, 0) + 1
        else:
            t.recvs += 1
            t.bytes_recv += nbytes
            t.recv_from[peer] = t.recv_from.get(peer, 0) + 1
        if collective:
            t.student_functions.add(collective)
        if self.keep_events and len(t.events) < MAX_EVENTS:
            t.events.append(
                {
                    "rank": self.rank,
                    "op": op,
                    "peer": peer,
                    "bytes": nbytes,
                    "dtype": str(tensor.dtype).removeprefix("torch."),
                    "shape": list(tensor.shape),
                    "t": round(time.monotonic() - t.t0, 6),
                    "function": collective or function,
                }
            )
        arrow = "dst" if op in ("send", "isend") else "src"
        return f"{op}({arrow}={peer})" + (f" at {where}" if where else "") + (f" in {function}" if function else "")

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

        @functools.wraps(original)
        def stub(*args: Any, **kwargs: Any) -> Any:
            if name in guard.allowed:
                guard.trace.collectives.append(name)
                function, collective, _ = guard._student_frames()
                if collective:
                    guard.trace.student_functions.add(collective)
                with guard.blocked(f"{qualname}()"):
                    return original(*args, **kwargs)
            function, _, where = guard._student_frames()
            message = f"{qualname}() is a built-in collective, which this task forbids" + (
                f" (called at {where} in {function})" if where else ""
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


def install(rank: int, sandbox: str, status: Callable[[int, str], None]) -> Guard:
    """Patch every collective entry point and the point-to-point functions; return the guard."""
    guard = Guard(rank, sandbox, status)

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


def _forbid_wrapper_modules(forbid: Callable[[Any, str, str], None]) -> None:
    import importlib

    for modname in ("torch.distributed._functional_collectives", "torch.distributed.nn.functional"):
        try:
            module = importlib.import_module(modname)
        except Exception:  # an optional module missing in this torch build is no route to guard
            continue
        for name in list(vars(module)):
            if any(k in name for k in _OP_KEYWORDS) and callable(getattr(module, name)):
                forbid(module, name, f"{modname}.{name}")


def _forbid_dispatcher_ops(forbid: Callable[[Any, str, str], None]) -> None:
    namespaces = {
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
    for ns_name, ops in namespaces.items():
        namespace = getattr(torch.ops, ns_name)
        for op in ops:
            try:
                getattr(namespace, op)
            except (AttributeError, RuntimeError):
                continue
            forbid(namespace, op, f"torch.ops.{ns_name}.{op}")


def _trace_point_to_point(guard: Guard) -> None:
    """Wrap send/recv/isend/irecv (module level and c10d) and Work.wait with tracing.

    ``batch_isend_irecv`` needs no wrapper: it calls ``P2POp.op``, which is one of the traced
    functions because the guard is installed before any ``P2POp`` is built.
    """

    def blocking(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if guard.depth:
                return original(tensor, *args, **kwargs)
            description = guard.record(op, _peer(op, args, kwargs), tensor)
            guard.depth += 1
            try:
                with guard.blocked(description):
                    return original(tensor, *args, **kwargs)
            finally:
                guard.depth -= 1

        del traced.__wrapped__
        return traced

    def nonblocking(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def traced(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if guard.depth:
                return original(tensor, *args, **kwargs)
            description = guard.record(op, _peer(op, args, kwargs), tensor)
            work = original(tensor, *args, **kwargs)
            if work is not None:
                guard._pending[id(work)] = f"wait() on {description}"
            return work

        del traced.__wrapped__
        return traced

    for module in (dist, c10d):
        for op in ("send", "recv"):
            setattr(module, op, blocking(op, getattr(c10d, op)))
        for op in ("isend", "irecv"):
            setattr(module, op, nonblocking(op, getattr(c10d, op)))

    work_cls = _c10d_ext.Work
    original_wait = work_cls.wait

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        description = guard._pending.pop(id(self), "wait()")
        if guard.depth:  # inside a traced send/recv, whose own description is already shown
            return original_wait(self, *args, **kwargs)
        with guard.blocked(description):
            return original_wait(self, *args, **kwargs)

    work_cls.wait = wait  # type: ignore[method-assign]


def _peer(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    key = "dst" if op in ("send", "isend") else "src"
    value = kwargs.get(key, args[0] if args else None)
    if value is None:
        value = kwargs.get("group_dst" if key == "dst" else "group_src", -1)
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1
