"""The code HW12's handout gives and marks "DO NOT CHANGE" / "DO NOT MODIFY", as the handout has it.

Both sides run it: a rank (with the student's context and layers) and the session (with the
grader's own, ``trusted``), so a trajectory the student's layers give is compared with the one the
grader's give under the very same driver.  The driver functions find ``ColumnParallelLinear``,
``RowParallelLinear`` and ``DistributedContext`` as globals, as in the notebook: :func:`bound`
makes copies of them whose globals are a namespace the caller fills.
"""

from __future__ import annotations

import copy
import types
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import torch
import torch.nn as nn

DRIVERS = ("replace_to_tp_simple_mlp", "run_tp_process", "tp_step", "run_dp_process")
LR = 0.05  # every optimizer of the handout


class SimpleMLP(nn.Module):
    """Small MLP used as reference model."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(d_in, d_hidden, bias=False)
        self.act = nn.GELU()
        self.lin2 = nn.Linear(d_hidden, d_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(self.act(self.lin1(x)))


def reference_step(model: nn.Module, optimizer: Any, x: torch.Tensor, y: torch.Tensor, loss_fn: Any = None) -> float:
    """Single-device forward+backward+step. Returns loss scalar and output."""
    loss_fn = nn.MSELoss() if loss_fn is None else loss_fn
    model.train()
    optimizer.zero_grad()
    out = model(x)
    loss = loss_fn(out, y)
    loss.backward()
    optimizer.step()
    return loss.item()


class TensorParallelLinear(nn.Module):
    def __init__(self, input_size: int, output_size: int, rank: int, world_size: int, dist_context: Any) -> None:
        super().__init__()
        self.input_size = input_size
        self.output_size = output_size
        self.rank = rank
        self.world_size = world_size
        self.dist_context = dist_context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("Child class must implement backward()")

    def backward(self) -> Any:
        raise NotImplementedError("Child class must implement backward()")


def run_dp_process(world_size, x, y, epoch, base_model, step, dist_context):
    models = [copy.deepcopy(base_model) for _ in range(world_size)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in models]

    dist_context = dist_context(world_size=world_size)

    train_losses = []
    for i in range(epoch):
        with ThreadPoolExecutor(max_workers=world_size) as executor:
            futures = [
                executor.submit(step, rank, world_size, models[rank], optimizers[rank], x, y, dist_context, i)
                for rank in range(world_size)
            ]
            losses = [f.result() for f in as_completed(futures)]

            avg_loss = sum(losses) / len(losses)
            train_losses.append(avg_loss)

    return train_losses


def replace_to_tp_simple_mlp(base_model, rank, world_size, dist_context, tp_map):
    model = copy.deepcopy(base_model)
    base_modules = dict(base_model.named_modules())

    for name, module in model.named_modules():
        if name not in tp_map:
            continue

        d_in, d_out = module.in_features, module.out_features
        if tp_map[name] == "column":
            setattr(model, name, ColumnParallelLinear(d_in, d_out, rank, world_size, dist_context))  # type: ignore[name-defined]  # noqa: F821
            output_size_tp = d_out // world_size
            slice_tp = slice(rank * output_size_tp, (rank + 1) * output_size_tp)
            weight_slice = base_modules[name].weight.T[:, slice_tp]

        elif tp_map[name] == "row":
            setattr(model, name, RowParallelLinear(d_in, d_out, rank, world_size, dist_context))  # type: ignore[name-defined]  # noqa: F821
            output_size_tp = d_in // world_size
            slice_tp = slice(rank * output_size_tp, (rank + 1) * output_size_tp)
            weight_slice = base_modules[name].weight.T[slice_tp, :]

        new_modules = dict(model.named_modules())
        with torch.no_grad():
            new_modules[name].weight.copy_(weight_slice)

    model.layers = [model.lin1, model.act, model.lin2]

    return model


def run_tp_process(world_size, x, y, epoch, base_model, step, dist_context, tp_dict):
    dist_context = dist_context(world_size=world_size)
    models = [
        replace_to_tp_simple_mlp(base_model, rank, world_size, dist_context, tp_dict) for rank in range(world_size)
    ]
    optimizers = [torch.optim.SGD(model.parameters(), 0.05) for model in models]

    train_losses = []
    for i in range(epoch):
        with ThreadPoolExecutor(max_workers=world_size) as executor:
            futures = [
                executor.submit(step, rank, world_size, models[rank], optimizers[rank], x, y, dist_context, i)
                for rank in range(world_size)
            ]
            losses = [f.result() for f in as_completed(futures)]

            avg_loss = sum(losses) / len(losses)
            train_losses.append(avg_loss)

    return train_losses


def tp_step(rank, world_size, model, optimizer, input_data, target, dist_context, loss_fn=None):
    # Step 1: forward pass
    input_data = input_data.clone().detach()
    target = target.clone().detach()
    output = model.forward(input_data)
    loss = nn.functional.mse_loss(output, target)
    optimizer.zero_grad()

    dist_context.barrier.wait()

    # Step 2: Instead of loss.backward(), perform (manual) gradient back-propagation
    # NOTE: nn.GELU has no ``backward`` method: the loop skips it (see docs/rubric-rationale-hw12.md)
    grad = 2 * (output - target) / output.numel()
    for layer in model.layers[::-1]:
        if hasattr(layer, "backward"):
            grad = layer.backward(grad)

    dist_context.barrier.wait()

    # Step 3: update the model gradient step
    optimizer.step()

    dist_context.barrier.wait()

    return loss.detach().item()


def bound(**names: Any) -> dict[str, Any]:
    """A namespace of this module's names plus ``names`` (the layer and context classes), with the
    driver functions rebound to it: ``bound(ColumnParallelLinear=C, ...)["run_tp_process"]``."""
    namespace = {**globals(), **names}
    for name in DRIVERS:
        fn = globals()[name]
        namespace[name] = types.FunctionType(fn.__code__, namespace, name, fn.__defaults__)
    return namespace


def train_tensor_parallel(
    world_size: int,
    x: torch.Tensor,
    y: torch.Tensor,
    epochs: int,
    base_model: nn.Module,
    failures: list[BaseException] | None = None,
    **classes: Any,
) -> tuple[list[float], list[Any]]:
    """The handout's Part 3.3 run (``run_tp_process`` with ``tp_step`` and ``{'lin1': 'column', 'lin2':
    'row'}``) with the given classes; its losses and every rank's model, in rank order.  A step's
    exception is also added to ``failures``: the driver's thread pool keeps it in a future that it
    never reads while the other ranks wait for the failed one at a barrier."""
    namespace = bound(**classes)
    models: list[Any] = []  # SimpleMLP copies whose lin1 and lin2 are the tensor-parallel layers
    replace = namespace["replace_to_tp_simple_mlp"]

    def recording(*args: Any, **kwargs: Any) -> Any:
        model = replace(*args, **kwargs)
        models.append(model)
        return model

    namespace["replace_to_tp_simple_mlp"] = recording
    tp_step = namespace["tp_step"]

    def step(*args: Any) -> Any:
        try:
            return tp_step(*args)
        except BaseException as exc:
            if failures is not None:
                failures.append(exc)
            raise

    losses: list[float] = namespace["run_tp_process"](
        world_size=world_size,
        x=x,
        y=y,
        epoch=epochs,
        base_model=base_model,
        step=step,
        dist_context=namespace["DistributedContext"],
        tp_dict={"lin1": "column", "lin2": "row"},
    )
    return losses, models
