"""`grader similarity`: the pairs that share graded code rank first, however disguised, and the starter is
never evidence.

The corpus is built here, shaped like A9 hand-ins (GitHub Classroom folders, a zip): three independent
solutions of Task 1 written in different styles, disguised copies of each made by :func:`disguise`
(every local name renamed, the functions reordered, the layout rewritten, comments added), untouched and
cosmetically edited starters, and a starter with one function of the student's own.  No code is graded or
run: similarity reads the files only.
"""

from __future__ import annotations

import ast
import csv
import json
import random
import zipfile
from dataclasses import replace
from html.parser import HTMLParser
from io import StringIO
from pathlib import Path

import pytest

pytest.importorskip("copydetect", reason="the similarity extra: pip install 'dist-grader[similarity]'")

from grader.pack import load_pack
from grader.rubric import load_rubric
from grader.similarity import FLOOR
from grader.similarity.check import compare_class, run_similarity
from grader.similarity.extract import graded_code, starter_code
from grader.similarity.fingerprints import fingerprint, never_evidence
from tests.test_html_reports import _chromium, chromium, colours, screenshot  # noqa: F401  (a fixture, shared)

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "student_template" / "a9"
STARTER = (TEMPLATE / "src" / "collectives.py").read_text()
#: in carol's code, shown on the page: it must stay text
HOSTILE = "</pre><script>alert('carol')</script><!--"

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

#: a starter with cosmetic edits only: a comment, a renamed argument, a docstring reworded, blank lines
COSMETIC = STARTER.replace(
    "def my_allreduce(tensor: torch.Tensor)", "# TODO later\n\n\ndef my_allreduce(t: torch.Tensor)"
)
COSMETIC = COSMETIC.replace("Sum ``tensor`` over all ranks", "Adds up the tensor over the ranks")
#: the starter with one function of the student's own (a pipelined broadcast, like nobody else's)
PARTIAL = STARTER.replace(
    """    raise NotImplementedError(
        "my_broadcast: implement with dist.send/dist.recv only (e.g. src sends to every other rank, "
        "or a binary tree); overwrite `tensor` in place on every rank and return it."
    )""",
    """    parts = tensor.view(-1).split(1024)
    order = [(src + i) % dist.get_world_size() for i in range(dist.get_world_size())]
    at = order.index(dist.get_rank())
    for part in parts:
        if at > 0:
            dist.recv(part, src=order[at - 1])
        if at + 1 < len(order):
            dist.send(part, dst=order[at + 1])
    return tensor""",
)


def disguise(source: str, seed: int) -> str:
    """What a student hides a copy with: every argument and local variable renamed, the definitions in
    another order, the layout rewritten (``ast.unparse``) and comments sprinkled in."""
    tree = ast.parse(source)
    rng = random.Random(seed)
    renames: dict[str, str] = {}
    for node in ast.walk(tree):
        bound = [node.arg] if isinstance(node, ast.arg) else []
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound = [node.id]
        for name in bound:
            renames.setdefault(name, f"{rng.choice(['val', 'tmp', 'q', 'zz'])}_{len(renames)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg in renames:
            node.arg = renames[node.arg]
        elif isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]
        elif isinstance(node, ast.keyword) and node.arg in renames and node.arg not in ("src", "dst", "dim"):
            node.arg = renames[node.arg]
    imports = [n for n in tree.body if not isinstance(n, ast.FunctionDef)]
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    rng.shuffle(functions)
    tree.body = imports + functions
    lines = []
    for number, line in enumerate(ast.unparse(tree).splitlines()):
        if number % 4 == 3:
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(f"{indent}# step {number}: see lecture notes")
        lines.append(line)
    return "\n\n".join(lines) + "\n"


def a9_hand_in(root: Path, name: str, collectives: str) -> Path:
    """A Classroom repo: ``src/collectives.py`` as given, the rest of the starter untouched."""
    folder = root / name
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "collectives.py").write_text(collectives)
    for other in ("transformer.py", "__init__.py", "dist_init.py"):
        (folder / "src" / other).write_text((TEMPLATE / "src" / other).read_text())
    return folder


def zipped(folder: Path) -> Path:
    """The folder as a .zip beside it (the folder removed), as an LMS download holds it."""
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, f"{folder.name}/{path.relative_to(folder)}")
    for path in sorted(folder.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    folder.rmdir()
    return archive


COPIES = {frozenset({"alice", "dave"}), frozenset({"bob", "=erin"}), frozenset({"carol", "frank"})}
STARTER_ONLY = {"gina", "hank", "ivan"}


@pytest.fixture(scope="module")
def roster(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("similarity") / "roster"
    a9_hand_in(root, "alice", RING)
    a9_hand_in(root, "bob", STAR)
    a9_hand_in(root, "carol", TREE)
    zipped(a9_hand_in(root, "dave", disguise(RING, 1)))
    a9_hand_in(root, "=erin", disguise(STAR, 2))  # a name a spreadsheet would run as a formula
    a9_hand_in(root, "frank", disguise(TREE, 3))
    a9_hand_in(root, "gina", STARTER)
    a9_hand_in(root, "hank", STARTER)
    a9_hand_in(root, "ivan", COSMETIC)
    a9_hand_in(root, "judy", PARTIAL)
    return root


@pytest.fixture(scope="module")
def written(roster, tmp_path_factory) -> Path:
    """The class compared once, its CSV and page written: what every test below reads."""
    return tmp_path_factory.mktemp("similarity-out")


@pytest.fixture(scope="module")
def report(roster, written):
    return run_similarity(roster, written, pack_ref="a9")


def test_the_disguise_changes_every_line_a_plain_diff_would_compare():
    copy = disguise(RING, 1)
    assert ast.dump(ast.parse(copy)) != ast.dump(ast.parse(RING))
    shared = set(RING.splitlines()) & set(copy.splitlines())
    assert shared <= {"", "import torch", "import torch.distributed as dist"}, shared
    assert copy.index("def my_broadcast") != RING.index("def my_broadcast")


def test_each_disguised_copy_ranks_first_and_nothing_else_reaches_the_floor(report):
    ranked = [frozenset({p.student_a, p.student_b}) for p in report.pairs]
    assert set(ranked[:3]) == COPIES
    assert all(p.similarity >= 0.75 for p in report.pairs[:3]), [
        (p.student_a, p.student_b, p.similarity) for p in report.pairs
    ]
    assert [frozenset({p.student_a, p.student_b}) for p in report.listed] == ranked[:3]
    assert all(p.similarity < FLOOR for p in report.pairs[3:])


def test_starters_untouched_or_cosmetically_edited_are_never_evidence(report):
    assert {s for s, problem in report.problems.items() if "nothing but the starter" in problem} == STARTER_ONLY
    assert not [p for p in report.pairs if {p.student_a, p.student_b} & STARTER_ONLY]


def test_a_student_with_one_function_of_their_own_is_compared_on_it_alone(report):
    assert "judy" in report.compared
    judy = [p for p in report.pairs if "judy" in (p.student_a, p.student_b)]
    assert all(p.similarity < FLOOR for p in judy)
    text = next((p.text_a if p.student_a == "judy" else p.text_b for p in judy), None)
    assert text is None or "my_allreduce" in text  # the stubs are shown, never counted


def test_the_instructors_boilerplate_is_never_evidence(roster, tmp_path):
    """Given out as boilerplate, the ring solution is no evidence against alice and dave any more."""
    boilerplate = tmp_path / "given.py"
    boilerplate.write_text(RING)
    found = run_similarity(roster, tmp_path / "out", pack_ref="a9", boilerplate=[boilerplate])
    assert set(found.problems) == STARTER_ONLY | {"alice"}  # dave's disguise is not the ring's text: still his
    assert {frozenset({p.student_a, p.student_b}) for p in found.listed} == COPIES - {frozenset({"alice", "dave"})}


def test_the_csv_lists_the_pairs_above_the_floor_each_cell_safe_for_a_spreadsheet(report, written):
    text = (written / "similarity.csv").read_text()
    rows = list(csv.reader(StringIO(text)))
    assert rows[0] == ["student_a", "student_b", "similarity"]
    assert len(rows) == 1 + len(report.listed)
    assert [float(r[2]) for r in rows[1:]] == sorted((float(r[2]) for r in rows[1:]), reverse=True)
    erin = next(r for r in rows if "'=erin" in r)  # a formula-leading name is neutralised, as in the gradebook
    assert "=erin" not in [cell for row in rows for cell in row] and "bob" in erin


class _Page(HTMLParser):
    """The page as a browser parses it: its elements, and each side's text with the marked regions."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.sides: list[tuple[str, str, list[str]]] = []  # (student, text, marked)
        self._side: tuple[str, list[str], list[str]] | None = None
        self._marking = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "pre" and dict(attrs).get("data-student") is not None:
            self._side = (dict(attrs)["data-student"], [], [])
        elif tag == "mark" and self._side:
            self._marking = True
            self._side[2].append("")

    def handle_endtag(self, tag):
        if tag == "pre" and self._side:
            self.sides.append((self._side[0], "".join(self._side[1]), self._side[2]))
            self._side = None
        elif tag == "mark":
            self._marking = False

    def handle_data(self, data):
        if self._side:
            self._side[1].append(data)
            if self._marking:
                self._side[2][-1] += data


def test_the_page_shows_each_pair_side_by_side_student_text_escaped(report, written):
    page = _Page()
    page.feed((written / "similarity.html").read_text())
    assert "script" not in page.tags
    carol = next(text for student, text, _ in page.sides if student == "carol")
    assert HOSTILE in carol  # the student's text, whole, as text
    pair = report.listed[0]
    a, b = page.sides[0], page.sides[1]
    assert (a[0], b[0]) == (pair.student_a, pair.student_b) and (a[1], b[1]) == (pair.text_a, pair.text_b)
    assert a[2] and b[2] and all(region.strip() for region in a[2] + b[2])
    assert "def " in "".join(a[2]) and "dist." in "".join(b[2])


def test_the_page_renders_in_chromium_with_its_highlights(report, written, chromium, tmp_path):  # noqa: F811
    page = written / "similarity.html"
    dom = _chromium(chromium, tmp_path, page, "--dump-dom").stdout
    assert dom.count("data-rank=") == len(report.listed) and dom.count('<pre data-student="') == 2 * len(report.listed)
    assert "<script>alert" not in dom
    drawn = colours(screenshot(chromium, tmp_path, page, "similarity.png", 1400))
    assert (0xFD, 0xE6, 0x8A) in drawn, "no shared region was highlighted"


@pytest.mark.parametrize(
    ("pack_id", "expected"),
    [
        ("a9", ["collectives.py: my_broadcast", "transformer.py: BasicTransformerBlock.forward_ulysses"]),
        ("a4", ["assignment4.py: single_step", "assignment4.py: FullColumnParallelLinear"]),
        ("hw12", ["hw12.ipynb, cell 4: DistributedContext", "hw12.ipynb, cell 11: RowParallelLinear"]),
        ("a5", ["report.md, Q2 (line 22)", "report.md, Q10 (line 169)"]),
    ],
)
def test_each_pack_compares_its_graded_code_and_its_own_starter_is_all_starter(pack_id, expected):
    """The reference hand-in's graded code is what the pack grades, and holds code of its own; the
    template, read the same way, is nothing but starter (A5's also against the course's starter files)."""
    pack = load_pack(pack_id)
    never = never_evidence(piece.source for piece in starter_code(pack))
    reference = graded_code(pack, REPO / "reference" / pack_id)
    template = graded_code(pack, REPO / "student_template" / pack_id)
    labels = [piece.label for piece in reference]
    assert set(expected) <= set(labels) and len(labels) == len(set(labels))
    assert [p.label for p in template] and not fingerprint([p.source for p in template], never).positions
    assert fingerprint([p.source for p in reference], never).positions


def test_a5_compares_the_snippets_not_the_answer_forms_and_its_course_starter_is_never_evidence():
    pack = load_pack("a5")
    snippets = graded_code(pack, REPO / "reference" / "a5")
    assert all("shape:" not in piece.source for piece in snippets)  # ```answers blocks are not code
    course = [p for p in starter_code(pack) if p.label.endswith(".py")]
    assert sorted(p.label for p in course) == ["model.py", "pipeline_parallel.py", "test.py", "utils.py"]
    never = never_evidence(p.source for p in course)
    assert not fingerprint([course[0].source], never).positions


def test_hw12_compares_every_definition_of_the_notebook_and_its_export(tmp_path):
    from grader.handin.notebook import read

    pack = load_pack("hw12")
    cells = [s.chunk.source for s in read(REPO / "reference" / "hw12" / "hw12.ipynb").statements]
    exported = "".join(f"# %%\n{cell}\n" for cell in dict.fromkeys(cells))
    (tmp_path / "hw12.py").write_text(exported)
    notebook = {p.label.split(": ")[1] for p in graded_code(pack, REPO / "reference" / "hw12")}
    script = {p.label.split(": ")[1] for p in graded_code(pack, tmp_path)}
    assert notebook == script and {"SimpleMLP", "split_batch", "tp_step"} <= notebook


def test_unreadable_and_missing_hand_ins_are_listed_not_fatal(roster, tmp_path):
    rubric = load_rubric(load_pack("a9").rubric)
    (tmp_path / "kim.zip").write_bytes(b"not a zip")
    (tmp_path / "lee").mkdir()
    a9_hand_in(tmp_path, "max", "def my_broadcast(tensor, src=0):\n    return " + "-" * 100_000 + "1\n")
    a9_hand_in(tmp_path, "ned", RING)
    from grader.batch.roster import load_roster

    found = compare_class(load_roster(tmp_path), load_pack("a9"), rubric)
    assert set(found.problems) == {"kim", "lee", "max"} and found.compared == ["ned"] and not found.pairs
    assert "no graded code" in found.problems["lee"] and "MemoryError" in found.problems["max"]


def test_the_command_line(roster, tmp_path, capsys):
    from grader.cli import main

    assert main(["similarity", str(roster), "--pack", "a9", "--out", str(tmp_path / "out")]) == 0
    assert "7 students compared, 3 pairs at or above 0.30" in capsys.readouterr().out
    assert main(["similarity", str(roster), "--pack", "a9", "--out", str(tmp_path), "--boilerplate", "nope.py"]) == 1
    assert "--boilerplate nope.py: no such file" in capsys.readouterr().err


def test_batch_runs_it_after_the_grading_and_the_class_report_links_each_students_highest_pair(tmp_path, monkeypatch):
    """``grader batch --similarity`` (graded by the fake grader of tests/test_batch.py: no student code runs)."""
    from grader.batch import run_batch
    from tests.test_batch import FAKE, submission

    monkeypatch.setenv("FAKE_GRADER_LOG", str(tmp_path / "grades.log"))
    roster = tmp_path / "roster"
    submission(roster, "a9-alice", body=RING)
    submission(roster, "a9-bob", body=disguise(RING, 4))
    submission(roster, "a9-carol", body=TREE)
    submission(roster, "a9-dan", body=STARTER)
    run_batch(roster, tmp_path / "out", grade_cmd=FAKE, progress=StringIO(), similarity=True)
    rows = list(csv.reader((tmp_path / "out" / "similarity" / "similarity.csv").open()))
    assert rows[1][:2] == ["alice", "bob"] and len(rows) == 2
    index = (tmp_path / "out" / "index.html").read_text()
    lines = {
        s: index.split(f'<tr data-student="{s}">', 1)[1].split("</tr>", 1)[0] for s in ("alice", "bob", "carol", "dan")
    }
    assert 'href="similarity/similarity.html#pair-1"' in lines["alice"] and "<td>bob</td>" in lines["alice"]
    assert 'href="similarity/similarity.html#pair-1"' in lines["bob"] and "<td>alice</td>" in lines["bob"]
    assert "href" not in lines["carol"] and "shares no code with anyone" in lines["dan"]
    assert 'id="pair-1"' in (tmp_path / "out" / "similarity" / "similarity.html").read_text()


@pytest.mark.parametrize("pack_id", ["a4", "hw12", "a5"])
def test_the_command_finds_a_copy_in_every_pack_whatever_form_it_is_handed_in(pack_id, tmp_path):
    """The reference, a copy of it (HW12's as the notebook's .py export, A4's zipped) and the untouched
    template: the copy is the only pair, the template has nothing to compare."""
    import json
    import shutil

    roster = tmp_path / "roster"
    shutil.copytree(REPO / "reference" / pack_id, roster / "ref")
    shutil.copytree(REPO / "student_template" / pack_id, roster / "tpl")
    copy = shutil.copytree(REPO / "reference" / pack_id, roster / "copy")
    if pack_id == "hw12":
        notebook = json.loads((copy / "hw12.ipynb").read_text())
        cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
        (copy / "hw12.py").write_text("".join(f"# In[{n}]:\n\n{cell}\n\n" for n, cell in enumerate(cells, 1)))
        (copy / "hw12.ipynb").unlink()
    if pack_id == "a4":
        zipped(copy)
    found = run_similarity(roster, tmp_path / "out", pack_ref=pack_id)
    assert [(p.student_a, p.student_b, p.similarity) for p in found.pairs] == [("copy", "ref", 1.0)]
    assert set(found.problems) == {"tpl"}


def test_a_fingerprint_taken_on_a_worker_arrives_as_the_client_takes_it(roster, tmp_path):
    """``grader batch --cluster --similarity``'s worker side, called here: from the starter's and the
    boilerplate's texts alone (their files gone), each student's fingerprint decodes to the client's own."""
    from grader.batch.roster import load_roster
    from grader.similarity.check import fingerprint_student
    from grader.similarity.remote import decode, fingerprint_here, similarity_task

    pack, rubric = load_pack("a9"), load_rubric(load_pack("a9").rubric)
    boilerplate = tmp_path / "given.py"
    boilerplate.write_text(STAR)
    task = similarity_task(rubric, pack, [boilerplate])
    never = never_evidence(piece.source for piece in starter_code(pack, [boilerplate]))
    boilerplate.unlink()
    for student in load_roster(roster):
        here = fingerprint_student(student.name, student.source, pack, rubric, never)
        sent = decode(fingerprint_here(replace(task, student=student.name), student.source))
        assert sent.problem == here.problem, student.name
        if here.found is None or sent.found is None:
            assert here.found is sent.found is None and here.problem, student.name
            continue
        assert (sent.found.text, sent.found.filtered, sent.found.coverage) == (
            here.found.text,
            here.found.filtered,
            here.found.coverage,
        )
        assert list(sent.found.positions.items()) == list(here.found.positions.items())  # in the same order
        assert sent.found.offsets.dtype == here.found.offsets.dtype and (sent.found.offsets == here.found.offsets).all()
    assert (
        "nothing but the starter" in decode(fingerprint_here(replace(task, student="bob"), str(roster / "bob"))).problem
    )


def _reply(**changes) -> bytes:
    from grader.similarity.check import fingerprint_student
    from grader.similarity.remote import encode

    pack = load_pack("a9")
    found = fingerprint_student("x", str(REPO / "reference" / "a9"), pack, load_rubric(pack.rubric), frozenset())
    reply = json.loads(encode(found))
    reply.update(changes)
    return json.dumps({k: v for k, v in reply.items() if v is not None}).encode()


@pytest.mark.parametrize(
    "reply",
    [
        b"",
        b"\xff\xfe not utf-8",
        b"[" * 100_000 + b"]" * 100_000,
        b"[]",
        b'{"problem": 3}',
        _reply(positions=None),
        _reply(extra=1),
        _reply(text=7),
        _reply(offsets=[[0, 0], [5, -1]]),
        _reply(offsets=[[0, 0], [10**9, 0]]),
        _reply(offsets=[[-2, 0]]),
        _reply(offsets=[[0.0, 0]]),
        _reply(positions=[[1, [10**9]]]),
        _reply(positions=[[True, [0]]]),
        _reply(positions=[[1 << 60, [0]]]),
        _reply(positions=[[1, []]]),
        _reply(positions=[[1, [0]], [1, [2]]]),
        _reply(positions={"1": [0]}),
    ],
)
def test_a_malformed_reply_from_a_worker_is_that_students_problem(reply):
    from grader.similarity.remote import MALFORMED, decode

    got = decode(reply)
    assert got.found is None and got.problem.startswith(MALFORMED), got.problem


def test_a_well_formed_reply_decodes():
    """The mutations above change a reply that decodes: each rejection is of what it changed."""
    from grader.similarity.remote import decode

    assert decode(_reply()).found is not None
    assert decode(b'{"problem": "no submission"}').problem == "no submission"
