"""Rank side of Assignment 5: the only module of this pack a rank imports.

The hand-in is a Markdown report, read and spliced in the session (``splice.program``): each case
brings the grader's CPU/Gloo starter with the snippet of the question it grades placed, and the
grader's own answers at every other TODO (so a defect is charged to its question only), as
statements (``tree``) in ``params["program"]``.  The grader's answer to the question being graded
is never sent, and this module reads no answer of its own.  ``test.py``'s ``main`` is run statement
by statement, segment by segment, in a namespace of the grader's own: ``dist`` is the live group
(``init_process_group`` does nothing), the mesh's ``pp`` dimension is the whole group, and
``MyDummyModel`` takes the session's weights, so every copy of the model a snippet builds is the
same.  A snippet that could not be placed comes as ``params["unplaced"]``, the reason: it raises
``NotImplementedError``, a ``not_implemented`` verdict for that question's cases.

Where a stage must compute from what it receives (Q7, Q8), the session sends each stage only its
own layers' weights (NaN elsewhere), the baseline never runs, and every stage but the first gets a
batch of NaN: a stage that runs the whole model, reads data it should receive, or reuses another
stage's values, returns NaN.
"""

from __future__ import annotations

import ast
import functools
import os
import random
import types
from collections.abc import Callable
from types import CodeType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from grader.packs.a5 import tree
from grader.packs.a5.tree import segment

REPORT = "report.md"
STARTER_FILE = "a5-starter/{}"  # where the starter's own lines say they are, in a traceback
Tensors = dict[str, torch.Tensor]
UP_TO_Q3 = ("init", "q2", "data", "model", "q3")


#: the starter file each part of a program comes from, for the code objects of its lines
PARTS = {"model": "model.py", "pipeline": "pipeline_parallel.py", "main": "test.py"}


class _Program:
    """A case's program: its statements by part, each compiled the first time it runs and kept.

    Every case of a question sends this rank the same program, and reading and compiling it again
    was 6 ms of each ``Run`` (several a case).  A statement is still compiled only when it first
    runs, as before, and code objects are immutable: each ``Run`` executes them into namespaces of
    its own."""

    def __init__(self, text: str, report_file: str) -> None:
        self.parts = tree.loads(text)
        self.report_file = report_file
        self._code: dict[int, CodeType] = {}  # id of a statement of ``parts`` -> its code

    def code(self, stmt: ast.stmt, part: str) -> CodeType:
        code = self._code.get(id(stmt))
        if code is None:
            filename = self.report_file if _from_report(stmt) else STARTER_FILE.format(PARTS[part])
            code = self._code[id(stmt)] = compile(ast.Module(body=[stmt], type_ignores=[]), filename, "exec")
        return code


@functools.lru_cache(maxsize=1)
def _program(text: str, report_file: str) -> _Program:
    """The current case's program.  Only the current one is kept: another question's holds the
    grader's answer to this one (``a5_steal_q8_answer``), and it is let go when this case's program
    is read, before any of the case's student code runs."""
    return _Program(text, report_file)


def _module(name: str, program: _Program, part: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__[tree.CPU_DEVICE] = tree.cpu_device  # where a snippet's device arguments go (snippets.CpuMapped)
    for stmt in program.parts[part]:
        exec(program.code(stmt, part), vars(module))
    return module


def _from_report(stmt: ast.stmt) -> bool:
    return any(getattr(node, "a5_report", False) for node in ast.walk(stmt))


class _Dim:
    """One dimension of the grader's mesh: the pipeline spans the whole group."""

    def get_local_rank(self) -> int:
        return dist.get_rank()

    def get_group(self) -> Any:
        return dist.group.WORLD

    def size(self) -> int:
        return dist.get_world_size()


class _Mesh:
    """``build_device_mesh``'s result as the starter uses it: ``device_mesh["pp"]``."""

    mesh_dim_names = ("pp",)

    def __getitem__(self, name: str) -> _Dim:
        if name != "pp":
            raise KeyError(f"the grader's mesh has only the pp dimension, not {name!r}")
        return _Dim()

    def get_local_rank(self, mesh_dim: Any = None) -> int:
        return dist.get_rank()

    def get_group(self, mesh_dim: Any = None) -> Any:
        return dist.group.WORLD

    def size(self, mesh_dim: Any = None) -> int:
        return dist.get_world_size()


class _Dist(types.ModuleType):
    """``torch.distributed`` as ``main`` sees it: the group is already up (Gloo, CPU)."""

    def __init__(self) -> None:
        super().__init__("torch.distributed")

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    def init_process_group(self, *args: Any, **kwargs: Any) -> None:
        return None

    def destroy_process_group(self, *args: Any, **kwargs: Any) -> None:
        return None

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        """The starter's barriers between phases order nothing the grader measures (every message is
        point-to-point and complete before its receiver goes on), and the grader's ranks run no
        built-in collective on the starter's behalf."""
        return None


def _model_class(base: type[nn.Module], t: Tensors) -> type[nn.Module]:
    """``MyDummyModel`` whose every copy holds the session's weights (NaN where a stage has none)."""

    class MyDummyModel(base):  # type: ignore[valid-type, misc]
        def __init__(self, number_of_layers: int, hidden_size: int, intermediate_size: int) -> None:
            super().__init__(number_of_layers, hidden_size, intermediate_size)
            with torch.no_grad():
                for i, layer in enumerate(self.layers):
                    layer.fc1.weight.copy_(t["w1"][i])
                    layer.fc2.weight.copy_(t["w2"][i])

    return MyDummyModel


class Run:
    """One case's spliced starter and the namespace its ``main`` runs in."""

    def __init__(self, student: Any, params: dict[str, Any], t: Tensors) -> None:
        if "program" not in params:
            raise NotImplementedError(params.get("unplaced", "the grader sent no program for this case"))
        self.program = _program(params["program"], os.path.join(student.sandbox, REPORT))
        model = _module("model", self.program, "model")
        self.pipeline = _module("pipeline_parallel", self.program, "pipeline")
        ws, rank = dist.get_world_size(), dist.get_rank()
        env = {"WORLD_SIZE": str(ws), "RANK": str(rank), "LOCAL_RANK": str(rank)}
        self.ns: dict[str, Any] = {
            "__name__": "__main__",
            tree.CPU_DEVICE: tree.cpu_device,
            "os": types.SimpleNamespace(environ=env, getenv=env.get),
            "random": random,
            "torch": torch,
            "dist": _Dist(),
            "build_device_mesh": lambda *args, **kwargs: _Mesh(),
            "MyDummyModel": _model_class(model.MyDummyModel, t) if "w1" in t else model.MyDummyModel,
            "PipelineStage": self.pipeline.PipelineStage,
            "pipeline_communicate": self.pipeline.pipeline_communicate,
            **{k: params[k] for k in ARGS if k in params},
            "seed": int(t["seed"].item()) if "seed" in t else 1234,
        }

    def run(
        self,
        segments: tuple[str, ...],
        before: dict[str, Callable[[], None]] | None = None,
        checks: tuple[str, ...] = (),
        first_loop_of: str = "",
    ) -> dict[str, bool]:
        """Run ``main``'s statements of ``segments`` in order, ``before[s]()`` ahead of segment s.  In
        a ``checks`` segment an AssertionError is the answer (it is recorded, and the rest runs).  With
        ``first_loop_of``, the run ends after that segment's first loop (Q8's forward loop, whoever
        wrote it: every statement of it runs as written)."""
        raised: dict[str, bool] = {}
        done: set[str] = set()
        for stmt in self._statements(first_loop_of):
            name = segment(stmt)
            if name not in segments:
                continue
            if name not in done:
                done.add(name)
                if before and name in before:
                    before[name]()
            try:
                exec(self.program.code(stmt, "main"), self.ns)
            except AssertionError:
                if name not in checks:
                    raise
                raised[name] = True
        return raised

    def _statements(self, first_loop_of: str) -> list[ast.stmt]:
        statements = self.program.parts["main"]
        if not first_loop_of:
            return statements
        loops = [
            i for i, s in enumerate(statements) if segment(s) == first_loop_of and isinstance(s, ast.For | ast.While)
        ]
        return statements[: loops[0] + 1] if loops else statements


ARGS = (
    "pp",
    "global_batch_size",
    "micro_batch_size",
    "sequence_length",
    "hidden_size",
    "intermediate_size",
    "number_of_layers",
)


def _ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _q2(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    """Each argument set of the case through Init and the assertions: 1 where they raised."""
    raised = []
    for args in params["args"]:
        named = dict(zip(("pp", "global_batch_size", "micro_batch_size", "number_of_layers"), args, strict=True))
        run = Run(student, {**params, **named}, t)
        raised.append(int(run.run(("init", "q2"), checks=("q2",)).get("q2", False)))
    return {"raised": _ints(raised)}


def _q3(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    run = Run(student, params, t)
    run.run(UP_TO_Q3)
    shapes = run.ns.get("tensor_shapes")
    try:
        return {"tensor_shapes": _ints([int(s) for s in shapes])}  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise TypeError(f"tensor_shapes is {shapes!r}, not a sequence of sizes") from None


def _grads(layers: list[Any]) -> Tensors:
    """Each layer's weight gradients, stacked; NaN for a layer whose weight has none."""

    def grad(weight: torch.Tensor) -> torch.Tensor:
        return torch.full_like(weight, float("nan")) if weight.grad is None else weight.grad.detach()

    if not layers:
        return {}
    return {
        "grad_fc1": torch.stack([grad(layer.fc1.weight) for layer in layers]).float(),
        "grad_fc2": torch.stack([grad(layer.fc2.weight) for layer in layers]).float(),
    }


def _outputs(values: Any, what: str) -> torch.Tensor:
    if not isinstance(values, list) or not values or not all(isinstance(v, torch.Tensor) for v in values):
        raise TypeError(f"{what} holds no list of output tensors")
    return torch.stack([v.detach().float() for v in values])


def _q4(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    run = Run(student, params, t)
    with torch.enable_grad():
        run.run((*UP_TO_Q3, "q4"))
    return {
        "out": _outputs(run.ns.get("output_tensors_no_pp"), "output_tensors_no_pp"),
        **_grads(run.ns["model"].layers),
    }


def _q5(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    """Every (layers, stages) pair and stage: the count, then the layer indices."""
    distribute = Run(student, params, t).pipeline.distribute_layers
    flat: list[int] = []
    for layers, stages in params["pairs"]:
        for stage in range(stages):
            got = [int(i) for i in distribute(layers, stage, stages)]
            flat += [len(got), *got]
    return {"layers": _ints(flat)}


def _poisoned(run: Run) -> Callable[[], None]:
    """Before the data segment's input is split: data past the first stage becomes NaN, so a stage that
    reads the dataloader (Q6) but should receive its input computes NaN."""

    def poison_data() -> None:
        if dist.get_rank() > 0:
            run.ns["input"] = tuple(torch.full_like(x, float("nan")) for x in run.ns["input"])

    return poison_data


def _pipelined(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    """The pipelined forward and backward with the case's snippet (Q6's, Q7's or Q8's): every stage's
    gradients, and but for Q8 (whose outputs are its forward case's) the last stage's outputs.  The
    baseline never runs."""
    run = Run(student, params, t)
    with torch.enable_grad():
        run.run((*UP_TO_Q3, "stage", "q6", "q8"), before={"model": _poisoned(run)})
    reply = _grads(list(run.ns["model_stage"].pp_stage_layers))
    if dist.get_rank() == dist.get_world_size() - 1 and params.get("outputs", True):
        reply["out"] = _outputs(run.ns.get("output_tensors_pp"), "output_tensors_pp")
    return reply


def _forward(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    """Q8's forward alone: the run through Q8's forward loop, the student's lines in it as written.  The
    last stage's outputs are what the trusted stage's last layer returned, each call's taken by a hook
    the grader put on that layer before any of Q8 ran (never the student's list or prints), one per
    micro-batch; they are sent to the session, which compares them with its baseline."""
    run = Run(student, params, t)
    taken: list[torch.Tensor] = []

    def take_outputs() -> None:
        last = run.ns["model_stage"].pp_stage_layers[-1]
        last.register_forward_hook(lambda _module, _args, output: taken.append(output.detach().float().clone()))

    with torch.enable_grad():
        run.run(
            (*UP_TO_Q3, "stage", "q6", "q8"), before={"model": _poisoned(run), "q8": take_outputs}, first_loop_of="q8"
        )
    if dist.get_rank() != dist.get_world_size() - 1:
        return {}
    if not taken:
        raise TypeError("the last stage's layers never ran in Q8's forward loop")
    return {"out": torch.stack(taken)}


class _Posting(types.ModuleType):
    """``torch.distributed`` as the pipeline module sees it in a Q7 condition case: the operations
    handed to ``batch_isend_irecv`` are kept, never posted.  So one operation runs alone: no peer
    answers it, no other condition (the student's or the grader's) takes part."""

    def __init__(self) -> None:
        super().__init__("torch.distributed")
        self.posted: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    def batch_isend_irecv(self, ops: list[Any]) -> list[Any]:
        self.posted.extend(ops)
        return []


#: how a posted operation's kind is replied
ISEND, IRECV, OTHER = 1, 2, 0
#: what the call returned: nothing, the tensor of the operation it posted, anything else
RETURNED_NONE, RETURNED_POSTED, RETURNED_OTHER = 0, 1, 2


def _operation(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    """Q7, one condition at a time: this stage calls the student's ``pipeline_communicate`` for the
    case's operation alone.  Replies what it posted (per operation: kind, global peer, whether its
    tensor is the one given, then its shape's rank and sizes) and what it returned."""
    run = Run(student, params, t)
    posting = _Posting()
    vars(run.pipeline)["dist"] = posting
    operation = params["operation"]
    given = t["tensor"] if operation.startswith("send") else None
    returned = run.pipeline.pipeline_communicate(
        operation=operation, pp_process_group=dist.group.WORLD, tensor=given, shapes=tuple(params["shapes"])
    )
    flat = [len(posting.posted)]
    for op in posting.posted:
        kind = ISEND if op.op is dist.isend else IRECV if op.op is dist.irecv else OTHER
        shape = list(op.tensor.shape)
        flat += [kind, int(op.peer), int(given is not None and op.tensor is given), len(shape), *shape]
    if returned is None:
        code = RETURNED_NONE
    elif posting.posted and returned is posting.posted[0].tensor:
        code = RETURNED_POSTED
    else:
        code = RETURNED_OTHER
    return {"posted": _ints(flat), "returned": _ints([code])}


def _check(question: str) -> Callable[[Any, dict[str, Any], Tensors], Tensors]:
    """The whole run with the grader's answers, then the question's check twice: on the right results,
    and on results the grader made wrong (Q9: the last micro-batch's output; Q10: each stage's last
    layer's fc2 gradient).  Replies, per rank, whether each run of the check raised."""
    name = question.lower()

    def body(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
        run = Run(student, params, t)
        with torch.enable_grad():
            run.run((*UP_TO_Q3, "q4", "stage", "q6", "q8"))
            right = run.run((name,), checks=(name,)).get(name, False)
            if name == "q9" and dist.get_rank() == dist.get_world_size() - 1:
                outputs = run.ns["output_tensors_pp"]
                outputs[-1] = outputs[-1] + 1.0
            if name == "q10":
                weight = run.ns["model_stage"].pp_stage_layers[-1].fc2.weight
                weight.grad = weight.grad * 2.0 + 1.0
            wrong = run.run((name,), checks=(name,)).get(name, False)
        return {"raised": _ints([int(right), int(wrong)])}

    return body


BODIES = {
    "q2": _q2,
    "q3": _q3,
    "q4": _q4,
    "q5": _q5,
    "q6": _pipelined,
    "q7": _operation,
    "q7_pipelined": _pipelined,
    "q8_forward": _forward,
    "q8": _pipelined,
    "q9": _check("Q9"),
    "q10": _check("Q10"),
}


def _warm_up() -> None:
    """What a pipelined case first touches imports more of torch (autograd's gradient helpers,
    ``torch.testing``): taken here, at import, it happens once in the zygote instead of in every rank
    of every group, where it would eat a case's time budget."""
    layer = nn.Linear(4, 4, bias=False)
    x = torch.rand(2, 4, requires_grad=True)
    with torch.enable_grad():
        out = layer(torch.relu(layer(x)))
        x.retain_grad()
        torch.autograd.backward(out, grad_tensors=torch.ones_like(out, memory_format=torch.preserve_format))
        out.mean()
    torch.testing.assert_close(out.detach(), out.detach().clone())
    torch.split(x.detach(), 1)


_warm_up()
