"""Session side: every case's inputs and what each rank (or thread) must return.

Expected values are computed here, from the handout's contract, never by a rank: collectives from
the inputs, ``dp_step`` from single-worker SGD on the whole batch (the handout's own check), the
layers from a full linear map, and Part 3.3 from the handout's driver code run here with the
grader's own context and layers (``trusted``).  Inputs are keyed by the grading's salt; the order
in which threads arrive is keyed by the case alone, so one submission always meets the same order.
"""

from __future__ import annotations

import hashlib
import importlib
import threading

import torch

from grader.pack import Case, Prepared, exact_sum
from grader.packs.hw12 import given, names, trusted

Tensors = dict[str, torch.Tensor]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}  # sums in another order, a few float32 SGD steps
DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}

# The first torch.optim.SGD (``dp_step``'s and Part 3.3's expected training) imports torch._dynamo, a
# few seconds of this process's time: begun now, beside Part 1's cases, which wait on their ranks.
threading.Thread(target=importlib.import_module, args=("torch._dynamo",), name="hw12-optim-import").start()


def _generator(case: Case, salt: str) -> torch.Generator:
    return torch.Generator().manual_seed(case.seed(salt))


def _order_seed(case: Case, salt: str) -> torch.Tensor:
    """The seed of the case's arrival orders (``harness.arrival_orders``): from the grading's secret,
    so neither the case's name nor the catalog tells a student's code which order comes."""
    digest = hashlib.sha256(f"{salt}\0arrival\0{case.name}".encode()).digest()
    return torch.tensor(int.from_bytes(digest[:7], "little"))


def prepare(case: Case, salt: str) -> Prepared:
    gen = _generator(case, salt)
    if case.kind in ("all_gather", "all_reduce", "context_mixed", "inputs_untouched"):
        return _context(case, gen, _order_seed(case, salt))
    if case.kind == "split_batch":
        return _split(case, gen)
    if case.kind == "dp_step":
        return _dp(case, gen)
    if case.kind == "tp_training":
        return _tp(case, gen)
    return _layer(case, gen)


def _tensor(gen: torch.Generator, dtype: str, shape: list[int]) -> torch.Tensor:
    if dtype == "int64":
        return torch.randint(-50, 50, shape, generator=gen)
    return torch.randn(shape, generator=gen, dtype=DTYPES[dtype])


def _context(case: Case, gen: torch.Generator, order_seed: torch.Tensor) -> Prepared:
    p, ws, runs = case.params, case.world_size, case.params["rounds"]
    sent: Tensors = {"seed": order_seed}
    want: Tensors = {}
    for r in range(runs):
        for k, op in enumerate(p["ops"]):
            xs = [_tensor(gen, p["dtype"], p["shape"]) for _ in range(ws)]
            for t in range(ws):
                name = names.call(t, k, op, r, runs)
                sent[name] = xs[t]
                if case.kind == "inputs_untouched":  # advisory: each thread's tensor as it was sent
                    want[names.input_after(name)] = xs[t].clone()
                    continue
                if op == "all_gather":
                    want.update({names.item(name, j): xs[j] for j in range(ws)})
                    want[names.length(name)] = torch.tensor(ws)
                else:
                    total = exact_sum(xs).double()  # a mean of integers too is divided in float64
                    want[name] = (total / ws if op == "mean" else total).to(xs[0].dtype)
    if case.kind == "context_mixed":
        want["entries left in the buffers"] = torch.zeros(2, dtype=torch.int64)  # the given code empties both
    first = sent[names.call(0, 0, p["ops"][0], 0, runs)]
    return Prepared([sent], [want], first.numel() * first.element_size(), TOLERANCE)


def _split(case: Case, gen: torch.Generator) -> Prepared:
    batch, ws = case.params["batch"], case.world_size
    x = torch.randn(batch, 3, generator=gen)
    x[:, 0] = torch.arange(batch, dtype=torch.float32)  # a row's number, to tell rows apart

    def problem(outputs: list[Tensors]) -> str:
        return split_problem(outputs[0], x, ws)

    return Prepared([{"x": x}], [{}], x.numel() * 4, outputs_problem=problem)


def split_problem(got: Tensors, x: torch.Tensor, ws: int) -> str:
    """'' when the slices cover every row of ``x`` once, each of ``len(x) // ws`` or one more rows."""
    batch, small = len(x), len(x) // ws
    seen: list[int] = []
    for r in range(ws):
        s = got.get(f"s{r}")
        if s is None or s.dtype != x.dtype or s.dim() != 2 or s.shape[1] != x.shape[1]:
            shape = "nothing" if s is None else f"a {s.dtype} tensor of shape {tuple(s.shape)}"
            return f"split_batch(x, {r}, {ws}) of a batch of shape {tuple(x.shape)} returned {shape}"
        if len(s) not in (small, small + 1):
            return (
                f"split_batch(x, {r}, {ws}) of {batch} examples returned {len(s)}; the handout asks for "
                f"{small} or {small + 1} (batch_size // world_size, or one more)"
            )
        ids = s[:, 0].tolist()
        for row, i in zip(s, ids, strict=True):
            if not (float(i).is_integer() and 0 <= i < batch and torch.equal(row, x[int(i)])):
                return f"split_batch(x, {r}, {ws}) returned a row that is not a row of x"
        seen += [int(i) for i in ids]
    missing = sorted(set(range(batch)) - set(seen))
    if missing:
        return f"split_batch at world size {ws} drops {len(missing)} of {batch} examples (first: row {missing[0]})"
    if len(seen) != batch:
        return f"split_batch at world size {ws} hands out {len(seen) - batch} example(s) to more than one rank"
    return ""


def _model(gen: torch.Generator, d_in: int, d_hidden: int, d_out: int) -> given.SimpleMLP:
    model = given.SimpleMLP(d_in, d_hidden, d_out)
    with torch.no_grad():
        for lin in (model.lin1, model.lin2):
            bound = lin.in_features**-0.5
            lin.weight.copy_(torch.rand(lin.weight.shape, generator=gen) * 2 * bound - bound)
    return model


def _dp(case: Case, gen: torch.Generator) -> Prepared:
    """Each rank: the whole batch with every row outside its own slice NaN, and the base weights; it
    must return its local losses and its final weights, which equal single-worker SGD's."""
    p, ws = case.params, case.world_size
    d_in, d_hidden, d_out = p["model"]
    batch, epochs = p["batch"], p["epochs"]
    base = _model(gen, d_in, d_hidden, d_out)
    x, y = torch.randn(batch, d_in, generator=gen), torch.rand(batch, d_out, generator=gen)
    model = given.SimpleMLP(d_in, d_hidden, d_out).double()
    model.load_state_dict({k: v.double() for k, v in base.state_dict().items()})
    slices = [trusted.split_batch(torch.arange(batch), r, ws) for r in range(ws)]
    losses = torch.zeros(ws, epochs, dtype=torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=given.LR)
    for e in range(epochs):
        with torch.no_grad():
            out = model(x.double())
            for r, rows in enumerate(slices):
                losses[r, e] = torch.nn.functional.mse_loss(out[rows], y.double()[rows])
        given.reference_step(model, optimizer, x.double(), y.double())
    final = {"w1": model.lin1.weight.detach().float(), "w2": model.lin2.weight.detach().float()}
    sent, want = [], []
    for r, rows in enumerate(slices):
        mine = torch.zeros(batch, dtype=torch.bool)
        mine[rows] = True
        px, py = x.clone(), y.clone()
        px[~mine], py[~mine] = float("nan"), float("nan")
        sent.append({"x": px, "y": py, "w1": base.lin1.weight.detach(), "w2": base.lin2.weight.detach()})
        want.append({"losses": losses[r], **final})
    return Prepared(sent, want, x.numel() * 4, TOLERANCE)


def _layer(case: Case, gen: torch.Generator) -> Prepared:
    """Each rank: the full input and upstream gradient and its own shard of the weight (in the
    handout's layout, ``in x out``); the full linear map's output, gradients and its shard's gradient."""
    p, ws = case.params, case.world_size
    d_in, d_out, batch = p["in"], p["out"], p["batch"]
    weight = torch.randn(d_in, d_out, generator=gen, dtype=torch.float64)
    x = torch.randn(batch, d_in, generator=gen, dtype=torch.float64)
    g = torch.randn(batch, d_out, generator=gen, dtype=torch.float64)
    column = case.kind.startswith("column")
    shards = weight.chunk(ws, dim=1 if column else 0)
    width = (d_out if column else d_in) // ws
    sent, want = [], []
    for r in range(ws):
        cut = slice(r * width, (r + 1) * width)
        sent.append({"x": x.float(), "g": g.float(), "w": shards[r].float()})
        if case.kind.endswith("forward"):
            want.append({"out": (x @ weight).float()})
        else:
            wgrad = x.T @ g[:, cut] if column else x[:, cut].T @ g
            want.append({"wgrad": wgrad.float(), "xgrad": (g @ weight.T).float()})
    return Prepared(sent, want, x.numel() * 4, TOLERANCE)


def _tp(case: Case, gen: torch.Generator) -> Prepared:
    """One process: the handout's tensor-parallel training with the student's layers; expected: the
    same driver code with the grader's own context and layers, run here."""
    p, ws = case.params, case.world_size
    d_in, d_hidden, d_out = p["model"]
    base = _model(gen, d_in, d_hidden, d_out)
    x, y = torch.randn(p["batch"], d_in, generator=gen), torch.rand(p["batch"], d_out, generator=gen)
    losses, models = given.train_tensor_parallel(
        ws,
        x,
        y,
        p["epochs"],
        base,
        DistributedContext=trusted.DistributedContext,
        ColumnParallelLinear=trusted.ColumnParallelLinear,
        RowParallelLinear=trusted.RowParallelLinear,
    )
    want: Tensors = {"losses": torch.tensor(losses, dtype=torch.float64)}
    for r, model in enumerate(models):
        want[f"lin1.r{r}"] = model.lin1.weight.detach().clone()
        want[f"lin2.r{r}"] = model.lin2.weight.detach().clone()
    sent = {"x": x, "y": y, "w1": base.lin1.weight.detach(), "w2": base.lin2.weight.detach()}
    return Prepared([sent], [want], x.numel() * 4, TOLERANCE)
