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
import re
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
from grader.similarity.extract import graded_code, starter_code, take_graded_code
from grader.similarity.fingerprints import fingerprint, never_evidence
from tests import fidelity
from tests import similarity_corpus as corpus
from tests.similarity_corpus import HOSTILE, RING, STAR, TREE
from tests.test_html_reports import _chromium, chromium, colours, screenshot  # noqa: F401  (a fixture, shared)

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "student_template" / "a9"
STARTER = (TEMPLATE / "src" / "collectives.py").read_text()
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


def fidelity_total(name: str) -> float:
    """What grading gives a fidelity entry, by its expected.json."""
    return sum(v for v in fidelity.spec(name).get("items", {}).values() if isinstance(v, int | float))


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


# --- issue 57: the copy check compares what grading grades -------------------------------------------


@pytest.fixture(scope="module")
def disguises(tmp_path_factory) -> dict[str, tuple[set[str], object]]:
    """Each pack's roster of tests/similarity_corpus.py compared once: pack -> (its copies, its report).
    Every disguise copies the same reference, so more than COMMON students hold its code: ``common`` is
    raised, as an instructor would for a class this small."""
    root = tmp_path_factory.mktemp("disguises")
    rosters = {
        "a9": corpus.a9_roster(root / "a9"),
        "a5": corpus.a5_roster(root / "a5"),
        "hw12": corpus.hw12_roster(root / "hw12"),
    }
    return {
        pack_id: (forms, run_similarity(root / pack_id, root / f"{pack_id}-out", pack_ref=pack_id, common=100))
        for pack_id, forms in rosters.items()
    }


def _ranked(disguises) -> tuple[dict[frozenset[str], float], dict[frozenset[str], float]]:
    """Every pair of every roster, copies and honest pairs apart: pair -> its similarity (0 unlisted)."""
    copies, honest = {}, {}
    for pack_id, (forms, report) in disguises.items():
        shared = {frozenset({p.student_a, p.student_b}): p.similarity for p in report.pairs}
        students = sorted(report.compared + list(report.problems))
        for i, a in enumerate(students):
            for b in students[i + 1 :]:
                pair = frozenset({f"{pack_id}:{a}", f"{pack_id}:{b}"})
                (copies if {a, b} <= forms | {"ref"} else honest)[pair] = shared.get(frozenset({a, b}), 0.0)
    return copies, honest


def test_every_disguised_copy_ranks_above_every_honest_pair(disguises):
    """Under every fence tag, every prompt style and padded with ten times its size of library code, a
    copy of A5's report or HW12's notebook ranks above every honest pair of the corpus, and the copy
    check compares every one of them: nothing is "not compared"."""
    assert all(not report.problems for _, report in disguises.values()), {
        pack_id: report.problems for pack_id, (_, report) in disguises.items()
    }
    copies, honest = _ranked(disguises)
    a5 = len(corpus.TAGS) + sum(len(tags) for tags in corpus.PROMPTS.values()) + 2  # the forms, padded, ref
    assert len(copies) == a5 * (a5 - 1) // 2 + 3 and len(honest) == 10 + a5  # A9's 5 students, A5's seed
    assert min(copies.values()) == 1.0, sorted(copies.items(), key=lambda kv: kv[1])[:5]
    assert max(honest.values()) < 0.5, sorted(honest.items(), key=lambda kv: -kv[1])[:5]
    lowest = sorted(copies.items(), key=lambda kv: kv[1])[0]
    assert lowest[1] > max(honest.values())


def test_a_padded_copy_scores_its_source_whole_and_its_view_says_which_side_was_padded(disguises):
    """Containment: the padded copy's own share is small, its source's is all of it; the pair is listed,
    and its view on the page gives both shares."""
    from grader.render.similarity import render_html

    for pack_id in ("a5", "hw12"):
        _, report = disguises[pack_id]
        padded = next(p for p in report.listed if {p.student_a, p.student_b} == {"padded", "ref"})
        assert (padded.student_a, padded.student_b) == ("padded", "ref")
        assert padded.similarity == padded.share_b == 1.0 and padded.share_a < 0.2, padded.share_a
        assert "class SequenceMatcher" in padded.text_a and "def dedent" in padded.text_a  # the padding is read
        page = render_html("t", [padded], FLOOR, 2, [])
        assert f"{padded.share_a:.0%} of padded&#x27;s compared code is in ref&#x27;s; 100% of ref&#x27;s" in page


@pytest.mark.parametrize("form", sorted({*corpus.TAGS, "prompt-classic", "prompt-ipython"}))
def test_grading_and_the_copy_check_read_a_reports_block_alike(form, tmp_path):
    """One reader: each disguise of A5's reference is placed by grading as the reference is, and the copy
    check compares the same code for it, block for block."""
    from grader.handin.report import read_report
    from grader.packs.a5.splice import splice

    reference = corpus.A5_REFERENCE.read_text()
    if form.startswith("prompt-"):
        style = form.removeprefix("prompt-")
        text = corpus.prompted(reference, style, "pycon" if style == "classic" else "ipython")
    else:
        text = corpus.retagged(reference, form)
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "report.md").write_text(reference)
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "report.md").write_text(text)

    def placed(report: str) -> dict[str, str]:  # a session's prompt and output lines move its block down
        return {q: re.sub(r"line \d+", "line N", p.message) for q, p in splice(read_report(report)).placements.items()}

    assert placed(text) == placed(reference)
    assert sum(p.placed for p in splice(read_report(text)).placements.values()) == 9
    pack = load_pack("a5")
    compared = [" ".join(p.source.split()) for p in graded_code(pack, tmp_path / "copy")]
    assert compared == [" ".join(p.source.split()) for p in graded_code(pack, tmp_path / "ref")]
    assert not any(line.lstrip().startswith((">>>", "In [", "...:")) for p in compared for line in p.splitlines())


def test_a_console_session_is_read_as_its_code_without_prompts_or_output():
    from grader.handin.blocks import is_python, python_source

    session = ">>> for x in range(3):\n...     total += x\n...\n>>> total\n3\n"
    assert python_source(session) == "for x in range(3):\n    total += x\n\ntotal\n"
    ipython = "In [1]: if rank == 0:\n   ...:     send(x)\n   ...:\nOut[1]: None\nIn [2]: %time f()\n"
    assert python_source(ipython) == "if rank == 0:\n    send(x)\n\n\n..."
    assert python_source("x = 1\n>>> y = 2\n") == "x = 1\ny = 2"  # a stray prompt outside a session
    assert all(is_python(tag) for tag in corpus.TAGS)
    assert not any(is_python(tag) for tag in ("answers", "text", "bash", "console", "JSON"))


def test_two_students_whose_own_code_is_a_few_obvious_lines_are_no_pair(tmp_path):
    """Containment's weak side: the whole of a tiny answer is easily shared.  Two reports whose only code
    is Q2's three assertions, written alike but for their messages, share all of it (containment 1.0);
    a side is measured as ``SMALLEST`` normalised characters at least, and they stay under the floor."""
    for student, why in (("amy", "uneven"), ("ben", "must divide")):
        asserts = "\n".join(
            f"assert {a} % {b} == 0, '{why}'"
            for a, b in (("number_of_layers", "pp"), ("global_batch_size", "micro_batch_size"))
        )
        asserts += f"\nassert global_batch_size // micro_batch_size >= pp, '{why}'"
        (tmp_path / "roster" / student).mkdir(parents=True)
        (tmp_path / "roster" / student / "report.md").write_text(f"# Report\n\n## Q2\n\n```python\n{asserts}\n```\n")
    found = run_similarity(tmp_path / "roster", tmp_path / "out", pack_ref="a5")
    assert found.compared == ["amy", "ben"] and len(found.pairs) == 1, found.problems
    assert found.pairs[0].similarity < FLOOR and not found.listed


def test_a_shared_idiom_is_no_evidence_however_small_the_document(roster, tmp_path):
    """Given out as boilerplate, the ring leaves dave (its disguise) little of his own but the lines every
    solution opens with, ``(rank, world) = (dist.get_rank(), dist.get_world_size())``, which frank's disguise
    of the tree opens with too: runs so short are idioms, and the pair is not listed (0.43 if they counted)."""
    boilerplate = tmp_path / "given.py"
    boilerplate.write_text(RING)
    found = run_similarity(roster, tmp_path / "out", pack_ref="a9", boilerplate=[boilerplate])
    assert not [p for p in found.pairs if {p.student_a, p.student_b} == {"dave", "frank"}]


@pytest.mark.parametrize("name", [n for n in fidelity.ENTRIES if fidelity_total(n) > 0])
def test_a_hand_in_grading_earns_points_on_is_one_the_copy_check_reads(name, tmp_path):
    """A student whose graded code the copy check could not read is a defect of the grader: every entry of
    the fidelity corpus that earns points is read, none is "not compared" (the expected scores are
    grading's; nothing is graded here)."""
    pack = load_pack(fidelity.pack_of(name))
    tree = fidelity.build(fidelity.CORPUS / name, fidelity.spec(name), tmp_path / name)
    taken = take_graded_code(name, str(tree), pack, load_rubric(pack.rubric))
    assert taken.pieces and not taken.problem, taken.problem
