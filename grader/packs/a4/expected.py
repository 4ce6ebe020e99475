"""Session side: the trusted baseline of Assignment 4 and what every rank must return.

Every part of the handout must produce the weight one SGD step (lr 0.5, MSE over the whole batch)
gives from the same initial weight and data.  That step is computed here, from the handout's own
recipe (``torch.manual_seed(seed); torch.randn(input_dim, output_dim)`` for the weight, the
handout's ``create_batch`` for the data), never by a rank.  Each rank is sent only the seed (which
the handout's functions take as an argument) and, for the direct tests, its own tensors.
"""

from __future__ import annotations

import hashlib

import torch

from grader.pack import Case, Prepared

INPUT_DIM, OUTPUT_DIM, GLOBAL_BATCH, LR = 64, 32, 128, 0.5
HANDOUT_SEED = 42
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}  # the handout compares with 1e-5; sums come in other orders


def seed_of(case: Case, salt: str) -> int:
    """``s1``: the handout's 42; ``s2``: a seed of the salt's, the same for every case of a grading."""
    if case.params.get("seed") == "s1":
        return HANDOUT_SEED
    return int.from_bytes(hashlib.sha256(f"{salt}|a4-seed".encode()).digest()[:4], "little") % 100_000 + 1


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def initial_weight(seed: int) -> torch.Tensor:
    return torch.randn(INPUT_DIM, OUTPUT_DIM, generator=_generator(seed))


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The handout's ``create_batch(128, 64, 32, seed)``: inputs then targets from one seeded stream."""
    gen = _generator(seed)
    return torch.randn(GLOBAL_BATCH, INPUT_DIM, generator=gen), torch.randn(GLOBAL_BATCH, OUTPUT_DIM, generator=gen)


def updated_weight(seed: int) -> torch.Tensor:
    """One SGD step on the mean squared error over the whole batch, in float64 for a clean target."""
    weight = initial_weight(seed).double().requires_grad_(True)
    inputs, targets = (t.double() for t in batch(seed))
    loss = torch.nn.functional.mse_loss(inputs @ weight, targets)
    (grad,) = torch.autograd.grad(loss, weight)
    return (weight.detach() - LR * grad).float()


def prepare(case: Case, salt: str) -> Prepared:
    ws = case.world_size
    seed = torch.tensor(seed_of(case, salt))
    if case.kind in ("broadcast_parallel", "gather_parallel"):
        return _autograd(case, salt)
    if case.kind == "column_shard":
        w0 = initial_weight(seed_of(case, salt))
        shards = w0.chunk(ws, dim=1)
        return Prepared([{"seed": seed, "w": w0} for _ in range(ws)], [{"out": s} for s in shards], w0.numel() * 4, {})
    if case.kind == "column_output":
        s = seed_of(case, salt)
        w0, (inputs, _) = initial_weight(s), batch(s)
        want = (inputs.double() @ w0.double()).float()
        sent = [{"seed": seed, "w": w0, "x": inputs} for _ in range(ws)]
        return Prepared(sent, [{"out": want} for _ in range(ws)], inputs.numel() * 4, TOLERANCE)
    want = updated_weight(seed_of(case, salt))
    return Prepared(
        [{"seed": seed} for _ in range(ws)], [{"out": want} for _ in range(ws)], want.numel() * 4, TOLERANCE
    )


def _autograd(case: Case, salt: str) -> Prepared:
    """Every rank's input and upstream gradient; forward and backward values of the handout's f and g."""
    ws = case.world_size
    gen = _generator(case.seed(salt))
    xs = [torch.randn(4, 8, generator=gen) for _ in range(ws)]
    if case.kind == "broadcast_parallel":  # identity forward, sum of the upstream gradients backward
        gs = [torch.randn(4, 8, generator=gen) for _ in range(ws)]
        total = torch.stack([g.double() for g in gs]).sum(0).float()
        expected = [{"out": xs[r], "grad": total} for r in range(ws)]
    else:  # gather along the last dim forward, this rank's slice of its upstream gradient backward
        gs = [torch.randn(4, 8 * ws, generator=gen) for _ in range(ws)]
        gathered = torch.cat(xs, dim=-1)
        expected = [{"out": gathered, "grad": gs[r][:, r * 8 : (r + 1) * 8]} for r in range(ws)]
    inputs = [{"x": xs[r], "g": gs[r]} for r in range(ws)]
    return Prepared(inputs, expected, xs[0].numel() * 4, TOLERANCE)
