"""Build student_template/hw12/hw12.ipynb (the handout's notebook, cell by cell, from the handout's
text in docs/handouts/hw12.md) and reference/hw12/hw12.ipynb (the same with the TODOs solved, saved as
Colab saves it: a magic cell, execution counts, an output).  Run from the repo root:

    python scripts/build-hw12-notebooks.py
"""

# ruff: noqa: E501 - the notebook's own code lines
import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HANDOUT = Path("docs/handouts/hw12.md")
lines = HANDOUT.read_text().split("\n")
KEYWORDS = re.compile(r"^(def|class|if|with|for|return|@|import|from|\s|#(?!#* (Part|0\.|Homework|\d)))")

cells = []  # (type, text)
md: list[str] = []
i = 0
while i < len(lines):
    if lines[i] == "In [None]:":
        if "".join(md).strip():
            cells.append(("markdown", "\n".join(md).strip("\n")))
        md = []
        i += 1
        code: list[str] = []
        blank = False
        while i < len(lines) and lines[i] != "In [None]:":
            line = lines[i]
            if line == "":
                blank = True
                code.append(line)
                i += 1
                continue
            if blank and not KEYWORDS.match(line):
                break
            if re.match(r"^#+ (Part|0\.|Homework|\d)", line):
                break
            blank = False
            code.append(line)
            i += 1
        cells.append(("code", "\n".join(code).strip("\n")))
        continue
    md.append(lines[i])
    i += 1
if "".join(md).strip():
    cells.append(("markdown", "\n".join(md).strip("\n")))


def notebook(cell_list):
    nb = new_notebook()
    nb.metadata = {
        "colab": {"provenance": []},
        "kernelspec": {"name": "python3", "display_name": "Python 3"},
        "language_info": {"name": "python"},
    }
    nb.cells = [new_code_cell(t) if k == "code" else new_markdown_cell(t) for k, t in cell_list]
    for n, cell in enumerate(nb.cells):
        cell.id = f"cell-{n}"  # fixed ids: a rebuild changes nothing that the handout did not
    return nb


SOLUTIONS = {
    "class DistributedContext:": '''class DistributedContext:
    """Lightweight simulation of torch.distributed for threaded workers."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size)
        self.barrier_lock = threading.Lock()
        self.all_gather_buffer = {}
        self.all_reduce_buffer = {}

    def all_gather(self, tensor, rank: int, group_id: str) -> List:
        """Gather tensors from workers into a single list"""
        with self.barrier_lock:
            ################## YOUR CODE ##################
            if group_id not in self.all_gather_buffer:
                self.all_gather_buffer[group_id] = {}
            self.all_gather_buffer[group_id][rank] = tensor
            ################################################

        self.barrier.wait() # wait to collect results from all workers

        ################## YOUR CODE ##################
        result = [self.all_gather_buffer[group_id][r] for r in range(self.world_size)]
        ################################################

        self.barrier.wait() # wait until result is calculated across all workers

        ## empty the buffer
        if rank == 0:
            with self.barrier_lock:
                del self.all_gather_buffer[group_id]

        return result

    def all_reduce(self, tensor: torch.Tensor, rank: int, group_id: str, op: str) -> torch.Tensor:
        """Sum-reduce tensors across workers."""
        with self.barrier_lock:
            ################## YOUR CODE ##################
            if group_id not in self.all_reduce_buffer:
                self.all_reduce_buffer[group_id] = {}
            self.all_reduce_buffer[group_id][rank] = tensor
            ################################################

        self.barrier.wait() # wait to collect results from all workers

        if op == 'sum':
        ################## YOUR CODE ##################
            result = torch.stack([self.all_reduce_buffer[group_id][r] for r in range(self.world_size)]).sum(dim=0)
        ################################################

        elif op == 'mean':
        ################## YOUR CODE ##################
            result = torch.stack([self.all_reduce_buffer[group_id][r] for r in range(self.world_size)]).sum(dim=0) / self.world_size
        ################################################

        self.barrier.wait() # wait until gathered is done being calculated

        ## empty the buffer
        if rank == 0:
            with self.barrier_lock:
                del self.all_reduce_buffer[group_id]

        return result''',
    "def split_batch(x, rank, world_size):": """def split_batch(x, rank, world_size):

    ######################## YOUR CODE ########################
    batch_size = x.shape[0]
    base, extra = divmod(batch_size, world_size)
    start = rank * base + min(rank, extra)
    end = start + base + (1 if rank < extra else 0)
    return x[start:end]
    ###########################################################""",
    "def dp_step(": """def dp_step(rank, world_size, model, optimizer, fullbatch_x, fullbatch_y, dist_context, epoch_num, loss_fn=nn.MSELoss()):

    ######################### YOUR CODE #########################
    # TODO 1: split the batch into a list of minibatches
    minibatch_x = split_batch(fullbatch_x, rank, world_size)
    minibatch_y = split_batch(fullbatch_y, rank, world_size)
    #############################################################

    out = model(minibatch_x)
    loss = loss_fn(out, minibatch_y)
    optimizer.zero_grad()
    loss.backward()

    ######################### YOUR CODE #########################
    flat_grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    summed = dist_context.all_reduce(flat_grad, rank, 'dp_grad', 'sum')
    avg_grad = summed / world_size
    ############################################################

    ######################### YOUR CODE #########################
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.grad = avg_grad[offset:offset + n].reshape(p.shape).clone()
        offset += n
    ############################################################

    # Once the gradients are propagated, all optimizer.step() updates the params
    optimizer.step()

    return loss.detach().item()""",
    "class ColumnParallelLinear(TensorParallelLinear):": """class ColumnParallelLinear(TensorParallelLinear):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

        assert self.output_size % self.world_size == 0
        self.output_size_per_partition = self.output_size // self.world_size
        self.weight = nn.Parameter(torch.randn(self.input_size, self.output_size_per_partition)) # nn.Linear(self.input_size, self.output_size_per_partition)
        self.input_cache = None
        self.forward_counter = 0
        self.backward_counter = 0

        print(f"  [Rank {self.rank}] initialized column parallel layer, weight shape: {self.weight.shape}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:

        ############################ YOUR CODE ############################
        self.input_cache = x
        local_out = x @ self.weight
        if self.world_size > 1:
            gathered = self.dist_context.all_gather(local_out, self.rank, f'col_fwd_{self.forward_counter}')
            out = torch.cat(gathered, dim=-1)
        else:
            out = local_out
        self.forward_counter += 1
        return out
        ###################################################################

    def backward(self, grad_upstream):

        ############################ YOUR CODE ############################
        start = self.rank * self.output_size_per_partition
        local_grad = grad_upstream[:, start:start + self.output_size_per_partition]
        self.weight.grad = self.input_cache.T @ local_grad
        grad_input = local_grad @ self.weight.detach().T
        if self.world_size > 1:
            grad_input = self.dist_context.all_reduce(grad_input, self.rank, f'col_bwd_{self.backward_counter}', 'sum')
        self.backward_counter += 1
        ###################################################################

        return grad_input""",
    "class RowParallelLinear(TensorParallelLinear):": """class RowParallelLinear(TensorParallelLinear):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

        assert self.input_size % self.world_size == 0
        self.input_size_per_partition = self.input_size // self.world_size
        self.weight = nn.Parameter(torch.randn(self.input_size_per_partition, self.output_size))
        self.input_cache = None
        self.forward_counter = 0
        self.backward_counter = 0
        print(f"  [Rank {self.rank}] Initialized row parallel layer, weight shape: {self.weight.shape}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:

        ############################ YOUR CODE ############################
        start = self.rank * self.input_size_per_partition
        x_local = x[:, start:start + self.input_size_per_partition]
        self.input_cache = x_local
        partial = x_local @ self.weight
        if self.world_size > 1:
            out = self.dist_context.all_reduce(partial, self.rank, f'row_fwd_{self.forward_counter}', 'sum')
        else:
            out = partial
        self.forward_counter += 1
        return out

    def backward(self, grad_upstream):

        ############################ YOUR CODE ############################
        self.weight.grad = self.input_cache.T @ grad_upstream
        grad_local = grad_upstream @ self.weight.detach().T
        if self.world_size > 1:
            parts = self.dist_context.all_gather(grad_local, self.rank, f'row_bwd_{self.backward_counter}')
            grad_input = torch.cat(parts, dim=-1)
        else:
            grad_input = grad_local
        self.backward_counter += 1
        return grad_input""",
}


def build(out_template, out_reference):
    template = notebook(cells)
    nbformat.write(template, out_template)
    solved = []
    for kind, text in cells:
        if kind == "code":
            for head, solution in SOLUTIONS.items():
                if text.startswith(head):
                    text = solution
        solved.append((kind, text))
    # as Colab saves it: a magic, execution counts and outputs (all ignored by the grader)
    solved.insert(1, ("code", "!pip install -q scikit-learn\n%matplotlib inline"))
    ref = notebook(solved)
    count = 1
    for cell in ref.cells:
        if cell.cell_type == "code":
            cell.execution_count = count
            count += 1
    ref.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="Requirement already satisfied\n")]
    nbformat.write(ref, out_reference)


if __name__ == "__main__":
    build("student_template/hw12/hw12.ipynb", "reference/hw12/hw12.ipynb")
