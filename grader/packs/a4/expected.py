"""Session side: the trusted baseline of Assignment 4 and what every rank must return.

Every part of the handout must produce the weight one SGD step (lr 0.5, MSE over the whole batch)
gives from the same initial weight and data.  That step is computed here, never by a rank.  The
initial weight follows the handout's recipe from the seed each function is called with
(``torch.manual_seed(seed); torch.randn(input_dim, output_dim)``); the batch does not: it is drawn
from the grading's secret salt and sent to the ranks, whose ``create_batch`` serves it whatever
seed it is called with.  A rank therefore cannot rebuild the batch, nor the rows of it the
data-parallel cases hide from it (NaN outside its own slice): code that makes its own data from
the seed computes on the wrong data.
"""

from __future__ import annotations

import hashlib

import torch

from grader.pack import Case, Prepared, exact_sum
from grader.packs.a4.handout import GLOBAL_BATCH, HANDOUT_SEED, INPUT_DIM, LR, OUTPUT_DIM

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}  # the handout compares with 1e-5; sums come in other orders
Tensors = dict[str, torch.Tensor]


def seed_of(case: Case, salt: str) -> int:
    """``s1``: the handout's 42; ``s2``: a seed of the salt's, the same for every case of a grading."""
    if case.params.get("seed") == "s1":
        return HANDOUT_SEED
    return int.from_bytes(hashlib.sha256(f"{salt}|a4-seed".encode()).digest()[:4], "little") % 100_000 + 1


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def initial_weight(seed: int) -> torch.Tensor:
    """The handout's ``torch.manual_seed(seed); torch.randn(input_dim, output_dim)``."""
    return torch.randn(INPUT_DIM, OUTPUT_DIM, generator=_generator(seed))


def batch(case: Case, salt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A case's batch (inputs, targets of the handout's shapes), from the salt alone."""
    gen = _generator(case.seed(salt))
    return torch.randn(GLOBAL_BATCH, INPUT_DIM, generator=gen), torch.randn(GLOBAL_BATCH, OUTPUT_DIM, generator=gen)


def poisoned(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """``tensor`` with every row outside ``rank``'s slice of the batch set to NaN."""
    local = GLOBAL_BATCH // world_size
    out = torch.full_like(tensor, float("nan"))
    out[rank * local : (rank + 1) * local] = tensor[rank * local : (rank + 1) * local]
    return out


def updated_weight(weight: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """One SGD step on the mean squared error over the whole batch, in float64 for a clean target."""
    w = weight.double().requires_grad_(True)
    loss = torch.nn.functional.mse_loss(inputs.double() @ w, targets.double())
    (grad,) = torch.autograd.grad(loss, w)
    return (w.detach() - LR * grad).float()


def prepare(case: Case, salt: str) -> Prepared:
    ws = case.world_size
    if case.kind in ("broadcast_parallel", "gather_parallel"):
        return _autograd(case, salt)
    s = seed_of(case, salt)
    seed, w0 = torch.tensor(s), initial_weight(s)
    inputs, targets = batch(case, salt)
    if case.kind == "column_shard":
        shards = w0.chunk(ws, dim=1)
        return Prepared([{"w": w0} for _ in range(ws)], [{"out": s} for s in shards], w0.numel() * 4, {})
    if case.kind == "column_output":
        want = (inputs.double() @ w0.double()).float()
        sent = [{"w": w0, "x": inputs} for _ in range(ws)]
        return Prepared(sent, [{"out": want} for _ in range(ws)], inputs.numel() * 4, TOLERANCE)
    if case.kind == "column_input_grad":  # every rank holds the same loss, so the same upstream gradient
        upstream = torch.randn(GLOBAL_BATCH, OUTPUT_DIM, generator=_generator(case.seed(salt) + 1))
        want = (upstream.double() @ w0.double().T).float()
        sent = [{"w": w0, "x": inputs, "g": upstream} for _ in range(ws)]
        return Prepared(sent, [{"grad": want} for _ in range(ws)], inputs.numel() * 4, TOLERANCE)
    want = updated_weight(w0, inputs, targets)
    batches: list[Tensors] = [{"seed": seed, "inputs": inputs, "targets": targets} for _ in range(ws)]
    if case.kind == "data_parallel" and ws > 1:
        batches = [
            {"seed": seed, "inputs": poisoned(inputs, r, ws), "targets": poisoned(targets, r, ws)} for r in range(ws)
        ]
    return Prepared(batches, [{"out": want} for _ in range(ws)], want.numel() * 4, TOLERANCE)


def _autograd(case: Case, salt: str) -> Prepared:
    """Every rank's input and upstream gradient; forward and backward values of the handout's f and g."""
    ws = case.world_size
    gen = _generator(case.seed(salt))
    xs = [torch.randn(4, 8, generator=gen) for _ in range(ws)]
    if case.kind == "broadcast_parallel":  # identity forward, sum of the upstream gradients backward
        gs = [torch.randn(4, 8, generator=gen) for _ in range(ws)]
        total = exact_sum(gs).float()
        expected = [{"out": xs[r], "grad": total} for r in range(ws)]
    else:  # gather along the last dim forward, this rank's slice of its upstream gradient backward
        gs = [torch.randn(4, 8 * ws, generator=gen) for _ in range(ws)]
        gathered = torch.cat(xs, dim=-1)
        expected = [{"out": gathered, "grad": gs[r][:, r * 8 : (r + 1) * 8]} for r in range(ws)]
    inputs = [{"x": xs[r], "g": gs[r]} for r in range(ws)]
    return Prepared(inputs, expected, xs[0].numel() * 4, TOLERANCE)
