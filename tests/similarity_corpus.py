"""Disguised copies and honest pairs, written from the course's own hand-ins (issue 57, items 4 and 6).

A copy is the reference hand-in as a student hides it without changing a line of its code: A5's report
with every Python block's fence retagged (``py3``, ``ipython``, ``pycon``, ``python3.11``, ``{python}``,
...) or written as a console session (``>>> ``/``... `` or IPython's ``In [n]: ``/``   ...: `` prompts,
with an output line), and HW12's notebook, its ``.py`` export and A5's report padded with unused library
code (the standard library's difflib and textwrap, ten times the graded code and more).  The honest
pairs are independent solutions of the same handout: A9's two reference trees and the three styles of
``tests/test_similarity.py``, and A5's reference beside a real student's report (the fidelity corpus's
seed 004) and beside each disguise of the reference.

Used by ``tests/test_similarity.py`` (every copy ranks above every honest pair) and by
``scripts/bench-similarity.py --disguises`` (the same ranking, printed).
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
A5_REFERENCE = REPO / "reference" / "a5" / "report.md"
A5_HONEST = REPO / "tests" / "corpus" / "fidelity" / "a5_seed_report" / "report.md"
HW12_REFERENCE = REPO / "reference" / "hw12" / "hw12.ipynb"

#: every fence tag a student's editor or a notebook export writes for Python
TAGS = ("py", "py3", "python3", "python3.11", "ipython", "ipython3", "pycon", "{python}", "{code-cell} ipython3", "")
#: console sessions, each under the tags it is found under: classic (``>>> ``/``... ``) and IPython's
#: (``In [n]: ``/``   ...: ``)
PROMPTS = {"classic": ("python", "pycon", ""), "ipython": ("python", "ipython")}
_FENCE = re.compile(r"^(?P<fence>```+|~~~+)(?P<info>.*)$")
_DEDENTED_HEADS = ("else", "elif", "except", "finally", ")", "]", "}")


#: in carol's code, shown on the page: it must stay text
HOSTILE = "</pre><script>alert('carol')</script><!--"

#: three independent solutions of A9's Task 1, in three styles: a ring, a star and a tree
RING = """
import torch
import torch.distributed as dist


def _neighbours(rank, world):
    return (rank + 1) % world, (rank - 1) % world


def my_broadcast(tensor, src=0):
    rank, world = dist.get_rank(), dist.get_world_size()
    relative = (rank - src) % world
    if relative != 0:
        dist.recv(tensor, (rank - 1) % world)
    if relative != world - 1:
        dist.send(tensor.contiguous(), (rank + 1) % world)
    return tensor


def my_allreduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = _neighbours(rank, world)
    chunks = list(tensor.view(-1).chunk(world))
    for step in range(world - 1):
        outgoing = chunks[(rank - step) % world].clone()
        incoming = torch.empty_like(chunks[(rank - step - 1) % world])
        request = dist.isend(outgoing, right)
        dist.recv(incoming, left)
        request.wait()
        chunks[(rank - step - 1) % world] += incoming
    for step in range(world - 1):
        outgoing = chunks[(rank + 1 - step) % world].clone()
        incoming = torch.empty_like(chunks[(rank - step) % world])
        request = dist.isend(outgoing, right)
        dist.recv(incoming, left)
        request.wait()
        chunks[(rank - step) % world].copy_(incoming)
    return tensor


def my_allgather(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = _neighbours(rank, world)
    pieces = [torch.empty_like(tensor) for _ in range(world)]
    pieces[rank] = tensor.clone()
    for step in range(world - 1):
        sending = pieces[(rank - step) % world].contiguous()
        receiving = pieces[(rank - step - 1) % world]
        request = dist.isend(sending, right)
        dist.recv(receiving, left)
        request.wait()
    return torch.cat(pieces, dim=0)


def my_reduce_scatter(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = _neighbours(rank, world)
    chunks = [c.clone() for c in tensor.chunk(world, dim=0)]
    for step in range(world - 1):
        index = (rank - step - 1) % world
        incoming = torch.empty_like(chunks[index])
        request = dist.isend(chunks[(rank - step) % world], right)
        dist.recv(incoming, left)
        request.wait()
        chunks[index] += incoming
    return chunks[(rank + 1) % world]


def my_all_to_all(tensor, scatter_dim, gather_dim):
    rank, world = dist.get_rank(), dist.get_world_size()
    outgoing = [c.contiguous() for c in tensor.chunk(world, dim=scatter_dim)]
    received = [torch.empty_like(c) for c in outgoing]
    received[rank] = outgoing[rank]
    requests = []
    for peer in range(world):
        if peer != rank:
            requests.append(dist.irecv(received[peer], peer))
            requests.append(dist.isend(outgoing[peer], peer))
    for request in requests:
        request.wait()
    return torch.cat(received, dim=gather_dim)
"""

STAR = """
import torch
import torch.distributed as dist


def my_broadcast(tensor, src=0):
    if dist.get_rank() == src:
        for r in range(dist.get_world_size()):
            if r != src:
                dist.send(tensor, dst=r)
    else:
        dist.recv(tensor, src=src)
    return tensor


def my_allreduce(tensor):
    if dist.get_rank() == 0:
        buf = torch.zeros_like(tensor)
        for r in range(1, dist.get_world_size()):
            dist.recv(buf, src=r)
            tensor.add_(buf)
    else:
        dist.send(tensor, dst=0)
    return my_broadcast(tensor, src=0)


def my_allgather(tensor):
    n = dist.get_world_size()
    out = torch.empty((n * tensor.shape[0],) + tuple(tensor.shape[1:]), dtype=tensor.dtype)
    rows = tensor.shape[0]
    if dist.get_rank() == 0:
        out[:rows] = tensor
        for r in range(1, n):
            dist.recv(out[r * rows:(r + 1) * rows], src=r)
    else:
        dist.send(tensor.contiguous(), dst=0)
    return my_broadcast(out, src=0)


def my_reduce_scatter(tensor):
    total = my_allreduce(tensor.clone())
    n = dist.get_world_size()
    size = total.shape[0] // n
    me = dist.get_rank()
    return total[me * size:(me + 1) * size].clone()


def my_all_to_all(tensor, scatter_dim, gather_dim):
    n = dist.get_world_size()
    me = dist.get_rank()
    parts = torch.tensor_split(tensor, n, dim=scatter_dim)
    got = [None] * n
    for r in range(n):
        if r == me:
            got[r] = parts[r]
            continue
        if me < r:
            dist.send(parts[r].contiguous(), dst=r)
            got[r] = torch.empty_like(parts[r].contiguous())
            dist.recv(got[r], src=r)
        else:
            got[r] = torch.empty_like(parts[r].contiguous())
            dist.recv(got[r], src=r)
            dist.send(parts[r].contiguous(), dst=r)
    return torch.cat(got, dim=gather_dim)
"""

TREE = (
    '''
import math

import torch
import torch.distributed as dist


def my_broadcast(tensor, src=0):
    """Binomial tree: in round k, every rank that has the data sends it 2**k ranks further."""
    size = dist.get_world_size()
    me = (dist.get_rank() - src + size) % size
    rounds = math.ceil(math.log2(size)) if size > 1 else 0
    for k in range(rounds):
        span = 1 << k
        if me < span and me + span < size:
            dist.send(tensor, dst=(me + span + src) % size)
        elif span <= me < 2 * span:
            dist.recv(tensor, src=(me - span + src) % size)
    return tensor


def my_allreduce(tensor):
    """Recursive doubling, for a power-of-two world; anything else falls back on the tree."""
    size, me = dist.get_world_size(), dist.get_rank()
    if size & (size - 1):
        raise ValueError("'''
    + HOSTILE
    + """")
    mask = 1
    while mask < size:
        partner = me ^ mask
        theirs = torch.empty_like(tensor)
        if me < partner:
            dist.send(tensor, dst=partner); dist.recv(theirs, src=partner)
        else:
            dist.recv(theirs, src=partner); dist.send(tensor, dst=partner)
        tensor += theirs
        mask <<= 1
    return tensor


def my_allgather(tensor):
    size, me = dist.get_world_size(), dist.get_rank()
    gathered = {me: tensor}
    mask = 1
    while mask < size:
        partner = me ^ mask
        mine = torch.cat([gathered[i] for i in sorted(gathered)])
        theirs = torch.empty_like(mine)
        ops = [dist.P2POp(dist.isend, mine, partner), dist.P2POp(dist.irecv, theirs, partner)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        base = (partner // mask) * mask
        for offset, block in enumerate(theirs.split(tensor.shape[0])):
            gathered[base + offset] = block
        mask <<= 1
    return torch.cat([gathered[i] for i in range(size)])


def my_reduce_scatter(tensor):
    size, me = dist.get_world_size(), dist.get_rank()
    blocks = list(torch.chunk(tensor.clone(), size))
    mine = blocks[me]
    for shift in range(1, size):
        to, frm = (me + shift) % size, (me - shift) % size
        landing = torch.empty_like(mine)
        handle = dist.isend(blocks[to].contiguous(), to)
        dist.recv(landing, frm)
        handle.wait()
        mine = mine + landing
    return mine


def my_all_to_all(tensor, scatter_dim, gather_dim):
    size, me = dist.get_world_size(), dist.get_rank()
    scatter_dim %= tensor.dim()
    pieces = [p.contiguous() for p in torch.tensor_split(tensor, size, scatter_dim)]
    inbox = [pieces[me] if i == me else torch.empty_like(pieces[i]) for i in range(size)]
    pending = [dist.irecv(inbox[i], i) for i in range(size) if i != me]
    pending += [dist.isend(pieces[i], i) for i in range(size) if i != me]
    while pending:
        pending.pop().wait()
    return torch.cat(inbox, gather_dim)
"""
)


def library_code() -> str:
    """Unused library code a student pads a copy with: two modules of the standard library, whole."""
    return inspect.getsource(difflib) + "\n\n" + inspect.getsource(textwrap)


def _python_blocks(report: str, change: Callable[[str, list[str]], tuple[str, list[str]]]) -> str:
    """``report`` with each Python block (tagged ``python`` or untagged) given to ``change(info, lines)``,
    which returns the new info string and lines."""
    out: list[str] = []
    lines = report.splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            out.append(lines[i])
            i += 1
            continue
        fence, info = opened.group("fence"), opened.group("info").strip()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence))
        body = lines[i + 1 : end]
        if info in ("python", ""):
            info, body = change(info, body)
        out += [f"{fence}{info}", *body, lines[end]]
        i = end + 1
    return "\n".join(out) + "\n"


def retagged(report: str, tag: str) -> str:
    """Every Python block of ``report`` fenced with ``tag``."""
    return _python_blocks(report, lambda info, body: (tag, body))


def as_session(lines: list[str], style: str) -> list[str]:
    """A block's lines typed into a console: a prompt opens each statement, continuation prompts the rest,
    a blank prompt closes a compound statement, and the console's answer to the last line is output."""
    code = textwrap.dedent("\n".join(lines)).splitlines()
    out: list[str] = []
    number = 0
    for line in code:
        opens = bool(line.strip()) and not line.startswith((" ", *_DEDENTED_HEADS))
        if style == "classic":
            prompt = ">>> " if opens else "... "
        else:
            number += opens
            prompt = f"In [{number}]: " if opens else "   ...: "
        out.append((prompt + line).rstrip())
    return [*out, "..." if style == "classic" else "   ...:", "Out[1]: None" if style == "ipython" else "None"]


def prompted(report: str, style: str, tag: str) -> str:
    """Every Python block of ``report`` written as a console session, fenced with ``tag``."""
    return _python_blocks(report, lambda info, body: (tag, as_session(body, style)))


def padded_report(report: str) -> str:
    """``report`` with library code pasted under its first question (Q1 asks for words: never graded)."""
    at = report.index("## Q2")
    return f"{report[:at]}```python\n{library_code()}```\n\n{report[at:]}"


def padded_notebook(notebook: str) -> str:
    """The notebook with library code in a cell after each of its own code cells, and the rest at its end."""
    data = json.loads(notebook)
    library = library_code().split("\n\n\n")  # its top-level definitions
    share = max(1, len(library) // 8)
    cells = []
    for cell in data["cells"]:
        cells.append(cell)
        if cell["cell_type"] == "code" and library:
            cells.append(_code_cell("\n\n\n".join(library[:share]), len(cells)))
            del library[:share]
    if library:
        cells.append(_code_cell("\n\n\n".join(library), len(cells)))
    data["cells"] = cells
    return json.dumps(data, indent=1)


def _code_cell(source: str, number: int) -> dict[str, object]:
    return {
        "id": f"pad-{number}",
        "cell_type": "code",
        "metadata": {},
        "outputs": [],
        "execution_count": None,
        "source": source,
    }


def exported(notebook: str) -> str:
    """The notebook as Jupyter's "Download as .py" writes it (``# In[n]:`` before each code cell)."""
    cells = ["".join(c["source"]) for c in json.loads(notebook)["cells"] if c["cell_type"] == "code"]
    return "".join(f"# In[{n}]:\n\n\n{cell}\n\n\n" for n, cell in enumerate(cells, 1))


def a9_roster(root: Path) -> set[str]:
    """An A9 roster of honest students only: the two reference solutions of Task 1 and the three styles
    above, each with the template's ``transformer.py`` (the references share theirs: not independent)."""
    template = REPO / "student_template" / "a9" / "src"
    solutions = {
        "ref": (REPO / "reference" / "a9" / "src" / "collectives.py").read_text(),
        "naive": (REPO / "reference" / "a9-naive" / "src" / "collectives.py").read_text(),
        "ring": RING,
        "star": STAR,
        "tree": TREE,
    }
    for name, collectives in solutions.items():
        shutil.copytree(template, root / name / "src")
        (root / name / "src" / "collectives.py").write_text(collectives)
    return set()


def a5_roster(root: Path) -> set[str]:
    """An A5 roster: the reference ``ref``, the honest ``seed``, and every disguised copy of ``ref``,
    whose names it returns (each copies ``ref``, and so every other)."""
    reference = A5_REFERENCE.read_text()
    forms = {f"tag-{tag or 'none'}": retagged(reference, tag) for tag in TAGS}
    forms |= {
        f"prompt-{style}-{tag or 'none'}": prompted(reference, style, tag)
        for style, tags in PROMPTS.items()
        for tag in tags
    }
    forms["padded"] = padded_report(reference)
    for name, text in {"ref": reference, "seed": A5_HONEST.read_text(), **forms}.items():
        folder = root / _safe(name)
        folder.mkdir(parents=True)
        (folder / "report.md").write_text(text)
    return {_safe(name) for name in forms}


def hw12_roster(root: Path) -> set[str]:
    """An HW12 roster: the reference ``ref``, its padded notebook and its padded ``.py`` export (the
    copies, whose names it returns)."""
    notebook = HW12_REFERENCE.read_text()
    (root / "ref").mkdir(parents=True)
    shutil.copy(HW12_REFERENCE, root / "ref" / "hw12.ipynb")
    (root / "padded").mkdir()
    (root / "padded" / "hw12.ipynb").write_text(padded_notebook(notebook))
    (root / "padded-py").mkdir()
    (root / "padded-py" / "hw12.py").write_text(exported(padded_notebook(notebook)))
    return {"padded", "padded-py"}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", name).strip("_")
