"""Rank side of HW12: the only module of this pack a rank imports.

The notebook (or its ``.py`` export) is read in the rank, never run: its code cells' definitions are
taken out by AST (``grader.handin.notebook``) and executed, with the student's cell and line numbers,
in a namespace of the handout's imports and the grader's own copies of the code the handout marks
"DO NOT CHANGE" (``given``): a student's edited copy of ``SimpleMLP``, ``TensorParallelLinear`` or
the driver functions is never run.  Its imports run when the module they name is installed here
(plotting and data-set modules are not, and no definition needs them).

- Part 1 and ``split_batch``: one process; the student's threads run in the threads runtime's harness.
- ``dp_step`` and the layers: one process per rank, each holding only its own rows or shard, the
  context a trusted one whose collectives go between the processes (``grader.packs.hw12.context``);
  ``dp_step`` always splits with the grader's ``split_batch`` (a split defect is charged once, in its
  own cases), and every row outside the rank's slice is NaN.
- Part 3.3: one process, the handout's driver code with the student's context (the grader's, once the
  student's failed Part 1) and layers, in the harness.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from grader.handin import Extraction, notebook
from grader.packs.hw12 import given, names, trusted
from grader.packs.hw12.context import TrustedContext
from grader.runtimes import BadReturn
from grader.runtimes.threads import harness

FILES = ("hw12.ipynb", "hw12.py")
Tensors = dict[str, torch.Tensor]
#: the handout's first cell and its given definitions: what every notebook's code may use
GIVEN: dict[str, Any] = {
    "copy": copy,
    "np": np,
    "List": list,  # the handout imports typing.List; list[...] serves every use
    "torch": torch,
    "nn": nn,
    "threading": threading,
    "ThreadPoolExecutor": ThreadPoolExecutor,
    "as_completed": as_completed,
    **{name: getattr(given, name) for name in ("SimpleMLP", "reference_step", "TensorParallelLinear", *given.DRIVERS)},
}


def extraction(student: Any) -> Extraction:
    for name in FILES:
        path = Path(student.sandbox) / name
        if path.is_file():
            return notebook.read(path)
    raise NotImplementedError("the submission holds no hw12.ipynb (or hw12.py)")


# The handout's plotting and data-set modules: only its driver code uses them, no graded definition does.
# A rank never imports them, installed or not (the image has neither): a grade cannot change with the
# machine, and each rank process would pay matplotlib's half second.
NEVER_IMPORTED = frozenset({"matplotlib", "sklearn"})


def _installed(node: ast.stmt) -> bool:
    """An import a rank runs: of a module this rank has, never of :data:`NEVER_IMPORTED`."""
    if isinstance(node, ast.ImportFrom):
        names = [node.module or ""] if node.level == 0 else []
    elif isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        return True
    tops = [name.split(".")[0] for name in names]
    return all(top not in NEVER_IMPORTED and importlib.util.find_spec(top) is not None for top in tops)


def namespace(student: Any) -> tuple[dict[str, Any], Extraction]:
    """The notebook's definitions executed among the handout's names (the grader's copies win)."""
    found = extraction(student)
    space: dict[str, Any] = {"__name__": "hw12", **GIVEN}
    found.execute(space, skip=frozenset(GIVEN), keep=_installed)
    space.update(GIVEN)
    return space, found


def named(student: Any, name: str) -> tuple[Any, dict[str, Any]]:
    space, found = namespace(student)
    found.named(name, GIVEN)  # NotImplementedError when it is missing, renamed or in a cell that did not parse
    return space[name], space


def _tensor(value: Any, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise BadReturn(f"{what} returned {type(value).__name__}, expected a torch.Tensor")
    return value.detach()


def _float(value: Any, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, int | float):
        raise BadReturn(f"{what} returned {type(value).__name__}, expected the loss as a number")
    return float(value)


# --- Part 1: the student's context, N threads in this process -----------------------------------------


def _context(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    cls, _ = named(student, "DistributedContext")
    ws, runs = params["world_size"], params["rounds"]
    orders = harness.arrival_orders(ws, int(t["seed"]), runs)
    context = cls(ws)
    out: Tensors = {}
    for r in range(runs):
        if r and params.get("fresh_context"):
            context = cls(ws)

        def work(rank: int, r: int = r, context: Any = context) -> Tensors:
            got: Tensors = {}
            for k, op in enumerate(params["ops"]):
                name = names.call(rank, k, op, r, runs)
                if op == "all_gather":
                    result = context.all_gather(t[name], rank, f"gather{k}")
                    if not isinstance(result, list | tuple):
                        raise BadReturn(f"all_gather returned {type(result).__name__}, expected a list of tensors")
                    got.update({names.item(name, j): _tensor(v, "all_gather") for j, v in enumerate(result)})
                    got[names.length(name)] = torch.tensor(len(result))
                else:
                    got[name] = _tensor(context.all_reduce(t[name], rank, f"reduce{k}", op), "all_reduce")
            return got

        results = harness.run(
            [lambda rank=rank: work(rank) for rank in range(ws)],  # type: ignore[misc]
            order=orders[r],
            timeout_s=params["thread_timeout_s"],
            sandbox=student.sandbox,
        )
        for got in results:
            out.update({k: v.clone() for k, v in got.items()})
        if params.get("check_inputs"):
            out.update({names.input_after(k): v.clone() for k, v in t.items() if k != "seed"})
    if runs > 1 and not params.get("fresh_context"):  # reused: the given code empties both buffers after each call
        left = [_size(context, "all_gather_buffer"), _size(context, "all_reduce_buffer")]
        out["entries left in the buffers"] = torch.tensor(left)
    return out


def _size(context: Any, name: str) -> int:
    buffer = getattr(context, name, {})
    try:
        return len(buffer)
    except TypeError:
        return -1


# --- Part 2 --------------------------------------------------------------------------------------------


def _split_batch(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    fn, _ = named(student, "split_batch")
    x, ws = t["x"], params["world_size"]
    with torch.enable_grad():
        return {f"s{r}": _tensor(fn(x.clone(), r, ws), "split_batch").clone() for r in range(ws)}


def _dp_step(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    fn, space = named(student, "dp_step")
    space["split_batch"] = trusted.split_batch  # dp_step is graded on its own: the grader's split
    rank, ws = dist.get_rank(), dist.get_world_size()
    model = given.SimpleMLP(*params["model"])
    with torch.no_grad():
        model.lin1.weight.copy_(t["w1"])
        model.lin2.weight.copy_(t["w2"])
    optimizer = torch.optim.SGD(model.parameters(), lr=given.LR)
    context = TrustedContext(ws)
    with torch.enable_grad():
        losses = [
            _float(fn(rank, ws, model, optimizer, t["x"], t["y"], context, epoch), "dp_step")
            for epoch in range(params["epochs"])
        ]
    return {
        "losses": torch.tensor(losses, dtype=torch.float64),
        "w1": model.lin1.weight.detach().clone(),
        "w2": model.lin2.weight.detach().clone(),
    }


# --- Part 3.1 / 3.2: one rank per process, its own shard only ------------------------------------------


def _layer(name: str, backward: bool) -> Callable[[Any, dict[str, Any], Tensors], Tensors]:
    def body(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
        cls, _ = named(student, name)
        rank, ws = dist.get_rank(), dist.get_world_size()
        layer = cls(params["in"], params["out"], rank, ws, TrustedContext(ws))
        weight = getattr(layer, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.shape != t["w"].shape:
            raise BadReturn(
                f"{name}.weight is not a tensor of shape {tuple(t['w'].shape)} (the given __init__ makes one)"
            )
        with torch.no_grad():
            weight.copy_(t["w"])
        with torch.enable_grad():
            out = _tensor(layer(t["x"].clone()), f"{name}.forward")
            if not backward:
                return {"out": out.clone()}
            grad_input = _tensor(layer.backward(t["g"].clone()), f"{name}.backward")
        wgrad = layer.weight.grad
        if wgrad is None:
            raise BadReturn(f"{name}.backward left self.weight.grad empty; the handout stores the gradient there")
        return {"wgrad": wgrad.detach().clone(), "xgrad": grad_input.clone()}

    return body


# --- Part 3.3: the handout's driver with the student's layers, N threads in this process ---------------


def _tp_training(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    space, found = namespace(student)
    for name in ("ColumnParallelLinear", "RowParallelLinear"):
        found.named(name, GIVEN)
    context = trusted.DistributedContext
    if not params.get("trusted"):  # the session names Part 1's functions here once one failed
        found.named("DistributedContext", GIVEN)
        context = space["DistributedContext"]
    base = given.SimpleMLP(*params["model"])
    with torch.no_grad():
        base.lin1.weight.copy_(t["w1"])
        base.lin2.weight.copy_(t["w2"])

    failures: list[BaseException] = []

    def train() -> tuple[list[float], list[Any]]:
        with torch.enable_grad():
            return given.train_tensor_parallel(
                params["world_size"],
                t["x"],
                t["y"],
                params["epochs"],
                base,
                failures,
                DistributedContext=context,
                ColumnParallelLinear=space["ColumnParallelLinear"],
                RowParallelLinear=space["RowParallelLinear"],
            )

    ((losses, models),) = harness.run(
        [train], order=[0], timeout_s=params["thread_timeout_s"], sandbox=student.sandbox, failures=failures
    )
    out: Tensors = {"losses": torch.tensor([_float(v, "tp_step") for v in losses], dtype=torch.float64)}
    for r, model in enumerate(models):
        out[f"lin1.r{r}"] = _tensor(model.lin1.weight, "ColumnParallelLinear.weight").clone()
        out[f"lin2.r{r}"] = _tensor(model.lin2.weight, "RowParallelLinear.weight").clone()
    return out


BODIES = {
    "all_gather": _context,
    "all_reduce": _context,
    "context_mixed": _context,
    "inputs_untouched": _context,
    "split_batch": _split_batch,
    "dp_step": _dp_step,
    "column_forward": _layer("ColumnParallelLinear", backward=False),
    "column_backward": _layer("ColumnParallelLinear", backward=True),
    "row_forward": _layer("RowParallelLinear", backward=False),
    "row_backward": _layer("RowParallelLinear", backward=True),
    "tp_training": _tp_training,
}


def _warm_up() -> None:
    """The first optimizer step and the first thread pool import what every rank would (see A4's), and
    nbformat builds its validator: once in the zygote, not once per forked rank."""
    notebook.warm_up()
    model = given.SimpleMLP(2, 2, 1)
    given.reference_step(model, torch.optim.SGD(model.parameters(), lr=given.LR), torch.zeros(1, 2), torch.zeros(1, 1))


_warm_up()
