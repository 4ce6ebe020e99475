"""The repo students receive and the two reference solutions, checked as students would run them.

``student_template/a9`` must collect cleanly and fail every public test with NotImplementedError;
``reference/a9`` (bandwidth-aware) and ``reference/a9-naive`` (the handout's star algorithms) must
pass them, get every dtype, size and layout right, match ``forward`` in both parallel modes, call
no built-in collective in Task 1, and differ in how much the busiest rank sends.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import math
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.distributed as dist
from junitparser import Failure, JUnitXml

from grader.deliverables import answer_sections, read_form
from grader.runtimes.torchdist.policy import COLLECTIVES, PROCESS_GROUP_METHODS

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "student_template" / "a9"
REFERENCES = {name: ROOT / "reference" / name for name in ("a9", "a9-naive")}
PUBLIC_TEST_FILES = {
    f"tests/test_{name}.py"
    for name in ("broadcast", "allreduce", "allgather", "reduce_scatter", "all_to_all", "transformer")
}
DTYPES = (torch.float32, torch.float64, torch.int64, torch.bfloat16)


def _load_template_launcher() -> ModuleType:
    """The template's own ``run_distributed``: what these tests rely on is what students run."""
    spec = importlib.util.spec_from_file_location("a9_template_test_utils", TEMPLATE / "tests" / "utils.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_distributed = _load_template_launcher().run_distributed


def _student_repo(repo: Path, src_tree: Path) -> Path:
    """A student's checkout: ``src/`` from ``src_tree`` next to the template's tests and pytest.ini."""
    shutil.copytree(src_tree / "src", repo / "src")
    shutil.copytree(TEMPLATE / "tests", repo / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(TEMPLATE / "pytest.ini", repo / "pytest.ini")
    return repo


class PublicRun:
    """``python -m pytest`` in a student checkout, as a student runs it, in the background."""

    def __init__(self, repo: Path, world_sizes: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "A9_WORLD_SIZES"}
        # torch's mp.spawn leaves a pytorch-errorfile-* per rank that raised (every template rank does)
        env["TMPDIR"] = str(repo.parent / "tmp")
        (repo.parent / "tmp").mkdir()
        if world_sizes is not None:
            env["A9_WORLD_SIZES"] = world_sizes
        self.junit = repo / "junit.xml"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={self.junit}"],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its ranks share its process group, so stop() reaches them too
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.communicate()

    @functools.cached_property
    def result(self) -> tuple[int, str, list[Any]]:
        """Exit status, output tail and the JUnit test cases, once the run has finished."""
        output, _ = self.process.communicate(timeout=600)
        cases = [case for suite in JUnitXml.fromfile(str(self.junit)) for case in suite] if self.junit.exists() else []
        return self.process.returncode, output[-3000:], cases


@pytest.fixture(scope="module")
def public_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, PublicRun]]:
    """The template's public suite and both references' at world sizes 1-8, started at once (their
    ranks spend much of the time waiting on each other, so the runs overlap well); only the runs
    that the selected tests read."""
    wanted = set()
    for item in request.session.items:
        if "public_runs" in getattr(item, "fixturenames", ()):
            callspec = getattr(item, "callspec", None)
            wanted.add(callspec.params["name"] if callspec else "template")
    trees = {"template": (TEMPLATE, None)} | {name: (tree, "1,2,3,4,5,6,7,8") for name, tree in REFERENCES.items()}
    runs = {
        name: PublicRun(_student_repo(tmp_path_factory.mktemp(name) / "repo", tree), world_sizes)
        for name, (tree, world_sizes) in trees.items()
        if name in wanted
    }
    yield runs
    for run in runs.values():
        run.stop()


def _file_of(case: Any) -> str:
    return case.classname.replace(".", "/") + ".py"  # "tests.test_broadcast" -> its path


# ------------------------------------------------------------------ the template


def test_template_collects_every_public_test_and_each_fails_as_not_implemented(
    public_runs: dict[str, PublicRun],
) -> None:
    returncode, output, cases = public_runs["template"].result
    assert returncode == 1, output  # 1: tests ran and failed; 2-4: collection or usage errors
    assert {_file_of(case) for case in cases} == PUBLIC_TEST_FILES
    for case in cases:
        (outcome,) = case.result
        assert isinstance(outcome, Failure), (case.name, outcome)
        assert "NotImplementedError" in (outcome.message or ""), (case.name, outcome.message)


# ------------------------------------------------------------------ public tests on the references


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_passes_the_public_tests_for_world_sizes_1_to_8(public_runs: dict[str, PublicRun], name: str) -> None:
    returncode, output, cases = public_runs[name].result
    assert returncode == 0, output
    assert {_file_of(case) for case in cases} == PUBLIC_TEST_FILES
    per_file = Counter(_file_of(case) for case in cases)
    assert min(per_file.values()) >= 8, per_file  # every world size ran, none skipped
    assert all(case.result == [] for case in cases)


# ------------------------------------------------------------------ rank-side helpers


def _import_reference(root: str, module: str) -> ModuleType:
    """Import ``src.<module>`` of one reference inside a forked rank, never a ``src`` that another
    test left in the parent's ``sys.modules``."""
    for name in [n for n in sys.modules if n == "src" or n.startswith("src.")]:
        del sys.modules[name]
    sys.path.insert(0, root)
    return importlib.import_module(f"src.{module}")


def _rank_data(rank: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    # Small integers, so every dtype (bfloat16 too) sums them exactly in any order.
    numel = math.prod(shape)
    return ((torch.arange(numel) * 7 + 3 * rank) % 11 - 5).reshape(shape).to(dtype)


def _check_collectives(rank: int, world_size: int, root: str) -> None:
    c = _import_reference(root, "collectives")
    ws = world_size
    # Element counts that leave ring chunks empty, uneven, or one element each.
    for numel in sorted({0, 1, ws - 1, ws + 1, 13, 1000}):
        for dtype in DTYPES:
            case = f"numel={numel} {dtype}"
            x = _rank_data(rank, (numel,), dtype)
            total = sum(_rank_data(r, (numel,), dtype) for r in range(ws))
            assert c.my_allreduce(x) is x and torch.equal(x, total), f"allreduce {case}"
            src = numel % ws
            y = _rank_data(src, (numel,), dtype) if rank == src else torch.zeros(numel, dtype=dtype)
            assert c.my_broadcast(y, src) is y and torch.equal(y, _rank_data(src, (numel,), dtype)), case
            blocks = [_rank_data(r, (numel, 2), dtype) for r in range(ws)]
            assert torch.equal(c.my_allgather(blocks[rank].clone()), torch.cat(blocks)), f"allgather {case}"
            stacked = [_rank_data(r, (ws * numel, 2), dtype) for r in range(ws)]
            expected = sum(stacked).tensor_split(ws)[rank]
            assert torch.equal(c.my_reduce_scatter(stacked[rank]), expected), f"reduce_scatter {case}"
    # Non-contiguous arguments are updated in place.
    x = _rank_data(rank, (5, 3), torch.float64).t()
    assert torch.equal(c.my_allreduce(x), sum(_rank_data(r, (5, 3), torch.float64) for r in range(ws)).t())
    y = _rank_data(rank, (4, 6), torch.int64)[:, ::2]
    assert torch.equal(c.my_broadcast(y, ws - 1), _rank_data(ws - 1, (4, 6), torch.int64)[:, ::2])
    # All-to-all: every dim pair of a 3-D tensor, negative dims, the input left alone.
    shape = (2 * ws, 3, 2 * ws)
    for scatter_dim, gather_dim in ((0, 2), (2, 0), (0, 0), (2, 2), (-1, -3), (0, 1)):
        for dtype in DTYPES:
            x = _rank_data(rank, shape, dtype)
            got = c.my_all_to_all(x, scatter_dim, gather_dim)
            parts = [_rank_data(r, shape, dtype).tensor_split(ws, scatter_dim)[rank] for r in range(ws)]
            assert torch.equal(got, torch.cat(parts, gather_dim)), f"all_to_all {scatter_dim},{gather_dim} {dtype}"
            assert torch.equal(x, _rank_data(rank, shape, dtype)), "all_to_all modified its input"


@pytest.mark.parametrize("world_size", [1, 3, 8])
@pytest.mark.parametrize("name", REFERENCES)
def test_reference_collectives_for_every_dtype_size_and_layout(name: str, world_size: int) -> None:
    run_distributed(world_size, _check_collectives, str(REFERENCES[name]))


def _check_parallel_forwards(rank: int, world_size: int, root: str) -> None:
    t = _import_reference(root, "transformer")
    for d_model, n_heads, seq, batch in ((32, 4, 8, 1), (64, 8, 16, 3)):
        config = t.TransformerConfig(d_model=d_model, n_heads=n_heads, dim_ff=2 * d_model)
        torch.manual_seed(d_model)
        block = t.BasicTransformerBlock(config).eval()
        x = torch.randn(batch, seq, d_model)
        tokens = slice(rank * seq // world_size, (rank + 1) * seq // world_size)
        with torch.no_grad():
            expected = block(x)
            block.init_tensor_parallel_shards()
            tensor_parallel = block.forward_tensor_parallel(x)
            ulysses = block.forward_ulysses(x[:, tokens].contiguous())
        # Autograd on: the collectives must still run when their inputs require grad.
        with_grad = block.forward_tensor_parallel(x.requires_grad_())
        for what, got, want in (
            ("tensor parallel", tensor_parallel, expected),
            ("tensor parallel with grad", with_grad.detach(), expected),
            ("ulysses", ulysses, expected[:, tokens]),
        ):
            assert got.shape == want.shape, what
            assert (got - want).abs().max().item() <= 1e-5, f"{what} d{d_model}h{n_heads}s{seq}b{batch}"


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("name", REFERENCES)
def test_reference_parallel_forwards_match_forward(name: str, world_size: int) -> None:
    run_distributed(world_size, _check_parallel_forwards, str(REFERENCES[name]))


# ------------------------------------------------------------------ what the busiest rank sends


def _busiest_rank_traffic(rank: int, world_size: int, root: str, bcast_messages: int, ar_bytes: int) -> None:
    """No rank sends more than the bound; the busiest (the broadcast's src 3, the allreduce's
    rank 0, which is busiest in the star and as busy as any in the ring) sends exactly that."""
    c = _import_reference(root, "collectives")
    sent = Counter[str]()

    def counting(op: Any) -> Any:
        def wrapper(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            sent["messages"] += 1
            sent["bytes"] += tensor.numel() * tensor.element_size()
            return op(tensor, *args, **kwargs)

        return wrapper

    dist.send, dist.isend = counting(dist.send), counting(dist.isend)
    c.my_broadcast(torch.zeros(1024), src=3)
    assert sent["messages"] <= bcast_messages and (rank != 3 or sent["messages"] == bcast_messages), sent
    sent.clear()
    c.my_allreduce(torch.ones(1024))
    assert sent["bytes"] <= ar_bytes and (rank != 0 or sent["bytes"] == ar_bytes), sent


@pytest.mark.parametrize(
    ("name", "broadcast_messages", "allreduce_bytes"),
    # ws 8, 1024 float32 elements: tree root sends log2(8) = 3 messages, the star root 7;
    # a ring rank sends 2 * 7/8 of the data, the star root 7 copies of it.
    [("a9", 3, 2 * 7 * 128 * 4), ("a9-naive", 7, 7 * 1024 * 4)],
)
def test_busiest_rank_traffic_tells_the_references_apart(
    name: str, broadcast_messages: int, allreduce_bytes: int
) -> None:
    run_distributed(8, _busiest_rank_traffic, str(REFERENCES[name]), broadcast_messages, allreduce_bytes)


# ------------------------------------------------------------------ static checks of the sources


def _collective_uses(source: str) -> list[str]:
    """Built-in collectives a module reaches: ``x.<collective>`` attributes and names imported
    from ``torch.distributed``.  (A simple check; grader.runtimes.torchdist.static is the full analysis.)"""
    names = COLLECTIVES | PROCESS_GROUP_METHODS
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.distributed"):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name in names]
    return [f"line {line}: {what}" for line, what in sorted(found)]


def test_the_collective_check_sees_attribute_and_imported_collectives() -> None:
    sneaky = "import torch.distributed as dist\nfrom torch.distributed import barrier\ndist.all_reduce(x)\n"
    assert _collective_uses(sneaky) == ["line 2: import barrier", "line 3: .all_reduce"]


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_uses_only_its_own_collectives(name: str) -> None:
    for module in ("collectives.py", "transformer.py"):
        source = (REFERENCES[name] / "src" / module).read_text()
        assert _collective_uses(source) == [], module
    assert "dist.send" in (REFERENCES[name] / "src" / "collectives.py").read_text()


def _shared_definitions(path: Path) -> dict[str, str]:
    """What the template gives and a solution must keep: the config, attention and ``forward``."""
    tree = ast.parse(path.read_text())
    defs = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "BasicTransformerBlock":
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and method.name in {
                    "__init__",
                    "split_heads",
                    "attention",
                    "feed_forward",
                    "forward",
                }:
                    defs[f"BasicTransformerBlock.{method.name}"] = ast.dump(method)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef):
            defs[node.name] = ast.dump(node)
    return defs


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_keeps_the_template_model_and_deliverables(name: str) -> None:
    tree = REFERENCES[name]
    assert _shared_definitions(tree / "src" / "transformer.py") == _shared_definitions(
        TEMPLATE / "src" / "transformer.py"
    )
    for shared in ("src/__init__.py", "src/dist_init.py"):
        assert (tree / shared).read_bytes() == (TEMPLATE / shared).read_bytes(), shared
    # Task 2 and the deliverables are the same in both references.
    for same in ("src/transformer.py", "written_answers_task1.md", "all_to_all_schematic.png"):
        assert (tree / same).read_bytes() == (REFERENCES["a9"] / same).read_bytes(), same
    # the answers fill in the template's form: its questions, and exactly its fields
    answers = answer_sections((tree / "written_answers_task1.md").read_text())
    template = answer_sections((TEMPLATE / "written_answers_task1.md").read_text())
    assert list(answers) == list(template) == ["Q1", "Q2", "Q3"]
    for qid, section in template.items():
        fields, _ = read_form(section)
        filled, _ = read_form(answers[qid])
        assert fields is not None and filled is not None and list(filled) == list(fields), qid
    assert (tree / "all_to_all_schematic.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
