"""The hidden matrix and its launcher, specified by what they must say about real submissions."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from grader.junit import read_junit
from grader.packs.a9 import catalog
from grader.runner import run_matrix

if TYPE_CHECKING:
    from tests.conftest import Graded

ROOT = Path(__file__).resolve().parent.parent
FILES = ["src/collectives.py", "src/transformer.py"]
POLICY = {"src/transformer.py": ["all_reduce", "all_gather"]}  # the rubric's policy.allow


def sandbox_of(tmp_path: Path, tree: Path, patch: dict[str, tuple[str, str]] | None = None) -> Path:
    """A sandbox like the intake makes: ``src/`` with the two files and an empty ``__init__``."""
    box = tmp_path / "sandbox"
    (box / "src").mkdir(parents=True)
    (box / "src" / "__init__.py").write_text("")
    for name in FILES:
        shutil.copy(tree / name, box / name)
    for name, (old, new) in (patch or {}).items():
        text = (box / name).read_text()
        assert old in text, f"patch target not found in {name}"
        (box / name).write_text(text.replace(old, new))
    return box


def isolated(box: Path) -> dict[str, object]:
    """The ``isolation_config`` a grading asks for (``grader.pipeline``): every layer this process can build."""
    return {"sandbox": str(box), "memory_mb": 2048, "nproc": 64, "cpu_s": 60, "file_size_mb": 64}


def verdicts(tmp_path: Path, box: Path, only: list[str] | None = None) -> dict[str, tuple[str, str]]:
    run = run_matrix(
        box, FILES, tmp_path / "work", {}, POLICY, salt="test", pack="a9", isolation_config=isolated(box), only=only
    )
    return {name: (case.verdict.value, case.message) for name, case in read_junit(run.junit).items()}


def test_catalog_is_large_and_every_case_has_a_test_function() -> None:
    from grader.packs.a9 import test_a9

    assert len(catalog.all_case_ids()) >= 150
    assert len(set(catalog.all_case_ids())) == len(catalog.all_case_ids())
    assert set(catalog.tests()) == {name for name in vars(test_a9) if name.startswith("test_")}


def test_case_ids_are_readable() -> None:
    ids = catalog.all_case_ids()
    assert "test_allreduce[ws3-float64-21]" not in ids  # allreduce sizes do not scale with ws
    assert "test_allreduce[ws3-float64-7]" in ids
    assert "test_broadcast[ws8-src7-float32-4x5]" in ids  # every src
    assert "test_all_to_all[ws4-s-2g-3-float32]" in ids  # negative dims
    assert "test_all_to_all[ws4-s1g1-float32]" in ids  # equal dims
    assert "test_reduce_scatter[ws4-float32-large1M]" in ids


@pytest.fixture(scope="module")
def naive_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """The whole matrix of reference/a9-naive under one salt, run once for the module: the baseline four
    more runs under the same salt must repeat exactly."""
    tmp = tmp_path_factory.mktemp("naive")
    return verdicts(tmp, sandbox_of(tmp, ROOT / "reference/a9-naive"))


def graded_verdicts(graded: Callable[[str], Graded], tree: str) -> dict[str, tuple[str, str]]:
    """Every case's verdict and message in the session's grading of ``tree`` (``graded`` in conftest):
    the same matrix, graded once for every test that reads it (issue 43)."""
    cases = read_junit(graded(tree).out / "junit.xml")
    return {name: (case.verdict.value, case.message) for name, case in cases.items()}


@pytest.mark.parametrize("tree", ["reference/a9", "reference/a9-naive"])
def test_reference_trees_pass_every_case(tree: str, graded: Callable[[str], Graded]) -> None:
    if not (ROOT / tree / "src" / "transformer.py").exists():
        pytest.fail(f"{tree} is missing")
    results = graded_verdicts(graded, tree)
    failing = {name: v for name, v in results.items() if v[0] != "pass"}
    assert failing == {}
    assert len(results) == len(catalog.all_case_ids())


def test_untouched_template_fails_every_case_as_not_implemented(graded: Callable[[str], Graded]) -> None:
    results = graded_verdicts(graded, "student_template/a9")
    assert {v for v, _ in results.values()} == {"not_implemented"}
    assert all("not implemented yet" in message for _, message in results.values())


DEADLOCK = (
    "def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:\n",
    "def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:\n"
    "    peer = (dist.get_rank() + 1) % dist.get_world_size()\n"
    "    dist.recv(torch.zeros(tensor.shape, dtype=tensor.dtype), src=peer)  # both ranks receive first\n",
)


def test_a_deadlocked_allreduce_costs_only_the_cases_that_reach_it(tmp_path: Path) -> None:
    only = [
        n
        for n in catalog.all_case_ids()
        if re.search(r"ws[23]-", n) and n.startswith(("test_allreduce", "test_broadcast["))
    ]
    results = verdicts(tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": DEADLOCK}), only)
    hung: set[str] = set()  # world sizes: the first allreduce case of each hangs, the others there are not run
    for name, (verdict, message) in results.items():
        world_size = name.split("[ws")[1].split("-")[0].rstrip("]")
        if not name.startswith("test_allreduce"):
            assert verdict == "pass", (name, message)
        elif world_size not in hung:
            hung.add(world_size)
            assert verdict == "hang", name
            assert re.search(
                r"likely deadlock: rank 0 waits in recv\(src=1\) at collectives\.py:\d+ in my_allreduce", message
            )
        else:
            assert verdict == "not_run", name
    assert hung == {"2", "3"}


def test_a_collective_through_the_process_group_object_is_forbidden_even_when_right(tmp_path: Path) -> None:
    sneaky = (
        "def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:\n",
        "def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:\n"
        "    dist.distributed_c10d._get_default_group().allreduce([tensor]).wait()\n"
        "    return tensor\n",
    )
    only = [n for n in catalog.all_case_ids() if n.startswith("test_allreduce[ws4-")]
    results = verdicts(tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": sneaky}), only)
    assert {v for v, _ in results.values()} == {"forbidden"}
    assert all("ProcessGroup.allreduce() is a built-in collective" in m for _, m in results.values())


def test_a_rank_that_exits_inside_a_collective_is_a_crash_and_the_next_case_still_runs(tmp_path: Path) -> None:
    exits = (
        "def my_allgather(tensor: torch.Tensor) -> torch.Tensor:\n",
        "def my_allgather(tensor: torch.Tensor) -> torch.Tensor:\n"
        "    if dist.get_rank() == 1:\n"
        "        import os; os._exit(0)\n",
    )
    only = [n for n in catalog.all_case_ids() if re.match(r"test_(allgather|broadcast)\[ws2-", n)]
    results = verdicts(tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": exits}), only)
    for name, (verdict, message) in results.items():
        if name.startswith("test_allgather"):
            assert verdict == "crash", name
            assert message.startswith("rank 1 exited with status 0 during the case"), message
        else:
            assert verdict == "pass", name


def test_wrong_values_are_reported_with_rank_index_and_values(tmp_path: Path) -> None:
    off_by_one = ("    return out\n\n\ndef my_reduce_scatter", "    return out + 1\n\n\ndef my_reduce_scatter")
    only = ["test_allgather[ws2-int64-2x3x4]"]
    results = verdicts(tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": off_by_one}), only)
    verdict, message = results[only[0]]
    assert verdict == "wrong"
    assert re.fullmatch(
        r"rank 0: the result differs: max abs error 1, 48 of 48 elements wrong; "
        r"first at index \(0, 0, 0\): expected -?\d+, got -?\d+",
        message,
    )


def test_a_syntax_error_in_collectives_still_lets_task2_run(tmp_path: Path) -> None:
    broken = ("def my_broadcast(", "def my_broadcast(:")
    only = [
        "test_broadcast[ws2-src0-float32-4x5]",
        "test_ulysses[ws2-d32h4f64s8b1]",
        "test_tensor_parallel[ws2-d32h4f64s8b1]",
    ]
    results = verdicts(tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": broken}), only)
    assert results[only[0]][0] == "import_error"
    assert re.search(r"SyntaxError in collectives\.py line \d+", results[only[0]][1])
    assert results[only[1]][0] == "pass"  # Ulysses judged with the grader's known-good all-to-all
    # and tensor parallelism with its known-good allreduce: each name's placeholder is a function of its
    # own, so the stand-in for my_all_to_all no longer took the place of the my_allreduce it imported too
    assert results[only[2]][0] == "pass"


ALLGATHER = "def my_allgather(tensor: torch.Tensor) -> torch.Tensor:\n"
#: my_allgather's work on a thread of its own, joined before it returns: every thread ends with its case
JOINED_THREAD = (
    ALLGATHER,
    "def my_allgather(tensor: torch.Tensor) -> torch.Tensor:\n"
    "    import threading\n\n"
    "    out = []\n"
    "    worker = threading.Thread(target=lambda: out.append(_allgather(tensor)), name='worker')\n"
    "    worker.start()\n"
    "    worker.join()\n"
    "    return out[0]\n\n\n"
    "def _allgather(tensor: torch.Tensor) -> torch.Tensor:\n",
)


def test_a_thread_the_case_joins_costs_nothing(tmp_path: Path, load: str) -> None:
    """Issue 39 charges a thread left running after its case; one joined before the return may still be
    leaving the kernel when the session counts, on a loaded machine, and is never charged."""
    only = [name for name in catalog.all_case_ids() if name.startswith(("test_allgather[ws2-", "test_allgather[ws4-"))]
    results = verdicts(
        tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": JOINED_THREAD}), only
    )
    assert {verdict for verdict, _ in results.values()} == {"pass"}
    assert {message for _, message in results.values()} == {""}


RING_END = "    if not data.is_contiguous():  # `flat` was a copy\n        data.copy_(flat.view(data.shape))\n"
WRONG_ALLREDUCE = (RING_END + "    return tensor\n", RING_END + "    return tensor.mul_(2)\n")


def test_a_task1_defect_is_charged_once_task2_runs_with_the_graders_known_good_function(tmp_path: Path) -> None:
    only = [
        "test_allreduce[ws2-float32-4x5]",
        "test_tensor_parallel[ws2-d32h4f64s8b1]",
        "test_trace_tensor_parallel[ws4]",
    ]
    box = sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": WRONG_ALLREDUCE})
    run = run_matrix(
        box, FILES, tmp_path / "work", {}, POLICY, salt="test", pack="a9", isolation_config=isolated(box), only=only
    )
    cases = read_junit(run.junit)
    assert cases[only[0]].verdict.value == "wrong"
    assert cases[only[1]].verdict.value == "pass"
    probe = cases[only[2]]
    assert probe.verdict.value == "pass"
    # design reads the run with the stand-in as the student's own: it communicated through my_allreduce
    assert probe.trace is not None and probe.trace["student_functions"] == ["my_allreduce"]


def test_without_a_task1_defect_task2_runs_with_the_students_own_functions(tmp_path: Path) -> None:
    # the same forward, with the student's allreduce doubling: Task 1 never saw it fail (no allreduce case ran)
    only = ["test_tensor_parallel[ws2-d32h4f64s8b1]"]
    box = sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": WRONG_ALLREDUCE})
    verdict, message = verdicts(tmp_path, box, only)[only[0]]
    assert verdict == "wrong", message


def test_a_wait_inside_the_graders_function_is_never_reported_as_the_students_line(tmp_path: Path) -> None:
    # rank 0 sums once more than its peers: it waits inside the stand-in, called from the student's line
    extra_sum = (
        "        return x + self.dropout(my_allreduce(ffn_partial) + self.fc2.bias)\n",
        "        if dist.get_rank() == 0:\n            my_allreduce(ffn_partial.clone())\n"
        "        return x + self.dropout(my_allreduce(ffn_partial) + self.fc2.bias)\n",
    )
    only = ["test_allreduce[ws2-float32-4x5]", "test_tensor_parallel[ws2-d32h4f64s8b1]"]
    box = sandbox_of(
        tmp_path, ROOT / "reference/a9", {"src/collectives.py": WRONG_ALLREDUCE, "src/transformer.py": extra_sum}
    )
    verdict, message = verdicts(tmp_path, box, only)[only[1]]
    assert verdict == "hang"
    assert re.search(
        r"rank 0 waits in wait\(\) on i(send|recv)\((dst|src)=1\) in the grader's known-good my_allreduce, "
        r"called at transformer\.py:\d+ in forward_tensor_parallel",
        message,
    ), message


SERIAL_TP = (
    "        h = self.ln1(x)\n        shards = (self.q_proj_shard",
    "        return my_allreduce(self.forward(x)) / dist.get_world_size()\n"
    "        h = self.ln1(x)\n        shards = (self.q_proj_shard",
)
GATHERED_ULYSSES = (
    "        h = self.ln1(x_shard)\n        qkv",
    "        full = my_allgather(x_shard.transpose(0, 1).contiguous()).transpose(0, 1)\n"
    "        return self.forward(full).chunk(dist.get_world_size(), dim=1)[dist.get_rank()]\n"
    "        h = self.ln1(x_shard)\n        qkv",
)


def test_parallel_methods_that_skip_the_parallel_work_earn_nothing(tmp_path: Path) -> None:
    only = ["test_tensor_parallel[ws2-d32h4f64s8b1]", "test_ulysses[ws2-d32h4f64s8b1]"]
    box = sandbox_of(tmp_path, ROOT / "reference/a9", {"src/transformer.py": SERIAL_TP})
    box_text = (box / "src/transformer.py").read_text()
    (box / "src/transformer.py").write_text(
        box_text.replace("from .collectives import my_all_to_all, my_allreduce", "from .collectives import *").replace(
            *GATHERED_ULYSSES
        )
    )
    results = verdicts(tmp_path, box, only)
    tp_verdict, tp_message = results[only[0]]
    assert tp_verdict == "wrong"  # the serial forward read the full weights, which were NaN by then
    assert "NaN: the forward read a full weight" in tp_message
    ulysses_verdict, ulysses_message = results[only[1]]  # what my_allgather received was NaN
    assert ulysses_verdict == "not_parallel" and "outside my_all_to_all is NaN" in ulysses_message


KEPT_ELSEWHERE = (
    "        self.fc2_shard = copy(self.fc2.weight[:, hidden])\n",
    "        self.fc2_shard = copy(self.fc2.weight[:, hidden])\n        self.kept = copy(self.q_proj.weight)\n",
)
USES_KEPT = (
    "        h = self.ln1(x)\n        shards =",
    "        assert self.kept is not None\n        h = self.ln1(x)\n        shards =",
)
DUMMY_EXCHANGE = (
    "        h = self.ln1(x_shard)\n        qkv",
    "        my_all_to_all(torch.zeros(2, 2), scatter_dim=0, gather_dim=1)\n"
    "        full = my_allgather(x_shard.transpose(0, 1).contiguous()).transpose(0, 1)\n"
    "        return self.forward(full).chunk(dist.get_world_size(), dim=1)[dist.get_rank()]\n"
    "        h = self.ln1(x_shard)\n        qkv",
)


def test_only_the_handouts_state_reaches_the_parallel_forwards(tmp_path: Path) -> None:
    """An attribute init set under another name stays behind in init's process, and a Ulysses forward
    whose exchange carries nothing computes on NaN; each message says which rule."""
    only = ["test_tensor_parallel[ws2-d32h4f64s8b1]", "test_ulysses[ws2-d32h4f64s8b1]"]
    box = sandbox_of(tmp_path, ROOT / "reference/a9")
    path = box / "src/transformer.py"
    text = path.read_text().replace(
        "import my_all_to_all, my_allreduce", "import my_all_to_all, my_allgather, my_allreduce"
    )
    for old, new in (KEPT_ELSEWHERE, USES_KEPT, DUMMY_EXCHANGE):
        assert text.count(old) == 1
        text = text.replace(old, new)
    path.write_text(text)
    results = verdicts(tmp_path, box, only)
    tp_verdict, tp_message = results[only[0]]
    assert tp_verdict == "crash" and "has no attribute 'kept'" in tp_message
    assert "only the handout's *_shard attributes reach it" in tp_message
    ulysses_verdict, ulysses_message = results[only[1]]
    assert ulysses_verdict == "not_parallel" and "outside my_all_to_all is NaN" in ulysses_message


@pytest.mark.slow
def test_five_runs_give_identical_verdicts(tmp_path: Path, naive_run: dict[str, tuple[str, str]]) -> None:
    box = sandbox_of(tmp_path, ROOT / "reference/a9-naive")
    runs = [naive_run] + [verdicts(tmp_path / str(i), box) for i in range(4)]
    assert all(run == runs[0] for run in runs)


def traces(tmp_path: Path, tree: str) -> dict[str, dict]:
    only = ["test_trace_broadcast[ws8]", "test_trace_allreduce[ws8]"]
    box = sandbox_of(tmp_path / tree, ROOT / tree)
    run = run_matrix(
        box,
        FILES,
        tmp_path / tree / "work",
        {},
        POLICY,
        salt="test",
        pack="a9",
        isolation_config=isolated(box),
        only=only,
    )
    cases = read_junit(run.junit)
    assert {case.verdict.value for case in cases.values()} == {"pass"}
    return {name: case.trace or {} for name, case in cases.items()}


def test_the_trace_tells_tree_and_ring_from_star_at_world_size_8(tmp_path: Path) -> None:
    tree, star = traces(tmp_path, "reference/a9"), traces(tmp_path, "reference/a9-naive")
    assert tree["test_trace_broadcast[ws8]"]["max_sends_per_rank"] <= 3  # binomial tree: log2(8)
    assert star["test_trace_broadcast[ws8]"]["max_sends_per_rank"] == 7  # the root sends to everyone
    ring, naive = tree["test_trace_allreduce[ws8]"], star["test_trace_allreduce[ws8]"]
    for rank in ring["ranks"]:  # ring: every rank sends 2(N-1)/N of the tensor
        assert rank["bytes_sent"] == pytest.approx(2 * 7 / 8 * ring["tensor_bytes"], rel=0.01)
    assert naive["max_bytes_sent_per_rank"] >= 7 * naive["tensor_bytes"]  # the root re-sends the sum 7 times


def test_an_import_that_never_finishes_costs_one_timeout_and_task2_still_runs(tmp_path: Path) -> None:
    loops = ("def my_broadcast(", "while True:\n    pass\n\n\ndef my_broadcast(")
    only = [
        "test_broadcast[ws2-src0-float32-4x5]",
        "test_allreduce[ws2-float32-4x5]",
        "test_ulysses[ws2-d32h4f64s8b1]",
    ]
    results = verdicts(tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": loops}), only)
    assert results[only[0]][0] == "hang"
    assert "never finished importing src.collectives at collectives.py:" in results[only[0]][1]
    assert results[only[1]] == ("hang", "the import never finished: " + results[only[0]][1])  # not rerun
    assert results[only[2]][0] == "pass"  # transformer.py graded with the grader's own collectives


def test_a_function_that_returns_no_tensor_is_wrong_and_says_what_it_returned(tmp_path: Path) -> None:
    """``BadReturn`` (``grader.runtimes``, raised by a pack's bodies) is a rank's ``bad_return``: the
    case is wrong, with what the function returned."""
    listed = ("    return out\n", "    return [out]\n")
    only = ["test_allgather[ws2-float32-4x5]"]
    results = verdicts(tmp_path, sandbox_of(tmp_path, ROOT / "reference/a9", {"src/collectives.py": listed}), only)
    assert results[only[0]] == (
        "wrong",
        "rank 0: my_allgather returned list, expected a torch.Tensor (and 1 other rank)",
    )


def test_the_case_seed_claims_only_the_entropy_torch_keeps() -> None:
    """torch's CPU generator keeps the low 32 bits of a seed, so Case.seed is 32 bits: a wider value
    would draw the same inputs while claiming more entropy than they have."""
    import torch

    from grader.pack import Case

    case = catalog.all_cases()[0]
    seeds = {Case(case.test, case.id, 1, case.kind, {}).seed(f"salt{i}") for i in range(200)}
    assert len(seeds) == 200 and max(seeds) < 2**32 and max(seeds) >= 2**31  # all 32 bits used
    seed = max(seeds)
    draw = torch.randn(4, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(torch.randn(4, generator=torch.Generator().manual_seed(seed + (1 << 40))), draw)


def test_only_the_shards_cross_and_together_they_hold_each_weight_at_most_once() -> None:
    """What reaches the tensor-parallel forward (``expected.carry``): ``x``, the unsharded parameters
    and the ``*_shard`` attributes; never a full sharded weight, and never shards that replicate one."""
    import torch

    from grader.pack import Refused
    from grader.packs.a9 import expected, reference_model

    case = next(c for c in catalog.all_cases() if c.name == "test_tensor_parallel[ws2-d32h4f64s8b1]")
    inputs = expected.prepare(case, "salt").inputs
    shards = [reference_model.shards(inputs[0], rank, 2) for rank in range(2)]
    unsharded = {"x", "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "fc2.bias"}
    assert [set(r) for r in expected.carry(case, inputs, shards)] == [unsharded | set(s) for s in shards]
    # a lopsided but real split (one rank holds every shard, the other none) holds each weight once
    lopsided = [{k: torch.cat([shards[0][k], shards[1][k]]) for k in shards[0]}, {}]
    assert set(expected.carry(case, inputs, lopsided)[1]) == unsharded
    replicated = [{**s, "q_proj_shard": inputs[0]["q_proj.weight"]} for s in lopsided]
    with pytest.raises(Refused, match="more than the"):
        expected.carry(case, inputs, replicated)
