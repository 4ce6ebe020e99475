"""Assignment 4 on the engine (issue 15): the handout's script is graded by its definitions alone.

The hand-in ``assignment4.py`` is a script whose module level starts NCCL on GPUs and runs all four
parts; the pack never runs it.  Each case executes only the script's imports and top-level
definitions, with the grader's own helpers and globals winning over the script's, and calls the
function the handout names, on CPU with Gloo.  The reference earns every point, the template none,
and the run's log the handout asks for is reported and never scored.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from grader.cli import main
from grader.junit import read_junit
from grader.pack import load_pack
from grader.packs.a4.catalog import NOT_THE_HANDOUTS_LAUNCH
from grader.pipeline import grade
from grader.results import schema_path
from grader.rubric import load_rubric
from grader.runner import run_matrix

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reference" / "a4"
RUBRIC = ROOT / "rubrics" / "a4.yaml"
ISOLATION = {"memory_mb": 2048, "nproc": 64, "cpu_s": 60, "file_size_mb": 64}
POLICY = load_rubric(RUBRIC).policy.to_dict()  # the handout's own code all-reduces and gathers
pytestmark = pytest.mark.slow

#: single_step as the handout writes it, after a module level no grading may run.
SCRIPT = """
import torch
import torch.distributed as dist
from utils import init_distributed, create_batch, check

raise SystemExit("the module level ran")
dist.init_process_group("nccl")
global_batch_size = 7


def create_batch(batch_size, input_dim, output_dim, seed=42, device="cuda"):
    return torch.zeros(batch_size, input_dim), torch.zeros(batch_size, output_dim)


class CustomLinearLayer(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.W = torch.nn.Parameter(weight)

    def forward(self, x):
        return x @ self.W


def single_step(seed=42, device="cuda"):
    torch.manual_seed(seed)
    initial_weight = torch.randn(input_dim, output_dim)
    model = CustomLinearLayer(initial_weight).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    inputs, targets = create_batch(global_batch_size, input_dim, output_dim, seed=seed, device=device)
    loss = torch.nn.MSELoss(reduction="mean")(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return initial_weight, model.W.detach()
"""


def run_cases(tmp_path: Path, script: str, only: list[str]) -> dict[str, tuple[str, str]]:
    box = tmp_path / "sandbox"
    box.mkdir(parents=True)
    (box / "assignment4.py").write_text(script)
    isolation_config = {"sandbox": str(box), **ISOLATION}
    run = run_matrix(
        box,
        ["assignment4.py"],
        tmp_path / "work",
        {},
        POLICY,
        salt="s",
        pack="a4",
        isolation_config=isolation_config,
        only=only,
    )
    return {name: (case.verdict.value, case.message) for name, case in read_junit(run.junit).items()}


def test_only_the_definitions_run_with_the_graders_globals_and_torch_may_be_seeded(tmp_path: Path) -> None:
    """The module level would exit, start NCCL and shrink the batch; the script's own ``create_batch``
    would hand zeros.  None of it counts: single_step seeds torch (in a rank, where an absent CUDA's
    lazy seeding must not trip the audit hook) and computes the handout's update."""
    verdicts = run_cases(tmp_path, SCRIPT, ["test_single_step[ws1-s1]", "test_single_step[ws1-s2]"])
    assert verdicts == {
        "test_single_step[ws1-s1]": ("pass", ""),
        "test_single_step[ws1-s2]": ("pass", ""),
    }


def test_a_renamed_function_is_missing_and_the_message_suggests_the_name(tmp_path: Path) -> None:
    script = SCRIPT.replace("def single_step(", "def single_steps(")
    ((verdict, message),) = run_cases(tmp_path, script, ["test_single_step[ws1-s1]"]).values()
    assert verdict == "not_implemented"
    assert (
        "assignment4.py defines no single_step, the name the handout gives it; did you rename it to single_steps?"
        in (message)
    )


def test_a_rank_that_trains_on_rows_outside_its_slice_is_wrong_though_its_update_is_right(tmp_path: Path) -> None:
    """Data parallelism is each rank on its own slice: the grader's batch holds NaN everywhere else."""
    source = (REFERENCE / "assignment4.py").read_text()
    old = "start_idx = rank * local_batch_size"
    assert source.count(old) == 1
    cases = ["test_data_parallel[ws1-s1]", "test_data_parallel[ws2-s1]", "test_data_parallel[ws4-s2]"]
    right = run_cases(tmp_path / "right", source, cases)
    assert {name: verdict for name, (verdict, _) in right.items()} == dict.fromkeys(cases, "pass")
    shifted = run_cases(
        tmp_path / "shifted", source.replace(old, "start_idx = (rank + 1) % world_size * local_batch_size"), cases
    )
    assert {name: verdict for name, (verdict, _) in shifted.items()} == {
        "test_data_parallel[ws1-s1]": "pass",  # one rank: its slice is the whole batch
        "test_data_parallel[ws2-s1]": "wrong",
        "test_data_parallel[ws4-s2]": "wrong",
    }
    assert "rows outside its own slice of the batch" in shifted["test_data_parallel[ws2-s1]"][1]


def test_a_slice_taken_by_local_rank_is_right_on_one_node_only(tmp_path: Path) -> None:
    """The handout runs one process per node: LOCAL_RANK is 0 on every rank there (and 0, 1, 0, 1 on
    2 nodes x 2), so a slice by local_rank gives ranks the same rows.  Only one node of 4, a launch
    the handout never uses, passes it."""
    source = (
        (REFERENCE / "assignment4.py")
        .read_text()
        .replace("start_idx = rank * local_batch_size", "start_idx = local_rank * local_batch_size")
    )
    cases = [
        "test_data_parallel[ws2-s1]",
        "test_data_parallel[ws4-s1]",
        "test_data_parallel[ws4-1x4-s1]",
        "test_data_parallel[ws4-2x2-s1]",
    ]
    verdicts = {name: verdict for name, (verdict, _) in run_cases(tmp_path, source, cases).items()}
    assert verdicts == {
        "test_data_parallel[ws2-s1]": "wrong",  # 2 nodes x 1
        "test_data_parallel[ws4-s1]": "wrong",  # the handout's 4 nodes x 1
        "test_data_parallel[ws4-1x4-s1]": "pass",  # one node: local_rank == rank
        "test_data_parallel[ws4-2x2-s1]": "wrong",
    }


def test_only_the_handouts_launch_pays_and_the_others_say_why() -> None:
    """Every parallel part pays at each world size launched one process per node, as the handout
    runs; one node of 4 and 2 nodes x 2 weigh nothing, with the reason (``Case.degenerate``)."""
    pack = load_pack("a4")
    paid = {c.name: c.layout for c in pack.cases() if c.layout is not None and c.name not in pack.degenerate()}
    assert paid and all(layout.per_node == 1 for layout in paid.values())
    unpaid = {name: why for name, why in pack.degenerate().items() if "-1x4" in name or "-2x2" in name}
    families = {"data_parallel", "column_parallel_output", "column_parallel_input_grad", "column_parallel_step"}
    assert {name.partition("[")[0].removeprefix("test_") for name in unpaid} == families
    assert set(unpaid.values()) == {NOT_THE_HANDOUTS_LAUNCH}


@pytest.mark.parametrize(
    "old,new",
    [
        ("        X = BroadcastParallel.apply(X)\n", "        BroadcastParallel.apply(X)\n"),
        ("return grad_output\n\nclass", "return grad_output * 0.5\n\nclass"),
    ],
    ids=["result-discarded", "backward-broken"],
)
def test_the_layers_input_gradient_is_checked_and_only_it_fails(tmp_path: Path, old: str, new: str) -> None:
    """BroadcastParallel "collect[s] the errors from all ranks in the backward pass": a layer that
    skips it, or a backward that breaks it, keeps a right forward and a right update."""
    source = (REFERENCE / "assignment4.py").read_text()
    assert source.count(old) == 1
    cases = [
        "test_column_parallel_output[ws4]",
        "test_column_parallel_input_grad[ws2]",
        "test_column_parallel_input_grad[ws4-2x2]",
        "test_column_parallel_step[ws4-s2]",
    ]
    right = run_cases(tmp_path / "right", source, cases)
    assert {name: verdict for name, (verdict, _) in right.items()} == dict.fromkeys(cases, "pass")
    broken = run_cases(tmp_path / "broken", source.replace(old, new), cases)
    assert {name: verdict for name, (verdict, _) in broken.items()} == {
        "test_column_parallel_output[ws4]": "pass",
        "test_column_parallel_input_grad[ws2]": "wrong",
        "test_column_parallel_input_grad[ws4-2x2]": "wrong",
        "test_column_parallel_step[ws4-s2]": "pass",
    }


def test_the_reference_earns_every_point_and_its_log_confirms_the_comparisons(tmp_path: Path) -> None:
    result = grade(REFERENCE, RUBRIC)
    assert (result.score, result.max_score) == (100, 100)
    assert result.notes == ["the run's log shows the three comparisons matching: yes (assignment4.log)"]
    assert result.submission.problems == []


def test_the_log_is_reported_and_never_scored(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("assignment4.py", "utils.py"):
        shutil.copy(REFERENCE / name, bare / name)
    result = grade(bare, RUBRIC)
    assert (result.score, result.max_score) == (100, 100)
    assert result.notes == ["the run's log shows the three comparisons matching: not checked, *.log not handed in"]
    assert result.submission.problems == ["*.log is missing", "*.err is missing"]


def test_the_template_earns_nothing_and_every_item_says_where_it_stopped(tmp_path: Path) -> None:
    result = grade(ROOT / "student_template" / "a4", RUBRIC)
    assert result.score == 0
    for item in result.items():
        assert item.score == 0 and item.feedback, item.id
    crashes = [item for item in result.items() if any(f.verdict.value == "crash" for f in item.failures)]
    assert crashes and all("assignment4.py:" in item.feedback for item in crashes)


def hand_in(folder: Path, dest: Path) -> Path:
    """A zip as students make it: the folder itself inside, with the run's .log and .err."""
    return Path(shutil.make_archive(str(dest), "zip", folder.parent, folder.name))


def test_a_zip_hand_in_is_graded_by_the_cli_into_every_format(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["grade", str(hand_in(REFERENCE, tmp_path / "handin")), "--pack", "a4", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    jsonschema.validate(result, json.loads(schema_path().read_text()))
    assert (result["assignment"], result["score"], result["submission"]["problems"]) == ("a4", 100, [])
    assert json.loads((out / "gradescope.json").read_text())["score"] == 100
    classroom = json.loads((out / "classroom.json").read_text())
    assert classroom["max_score"] == 100 and {t["status"] for t in classroom["tests"]} == {"pass"}
    assert "## Notes (not scored)" in (out / "summary.md").read_text()
    assert sorted(p.name for p in (out / "deliverables").iterdir()) == ["assignment4.err", "assignment4.log"]
    assert read_junit(out / "junit.xml")  # the matrix run, kept for a rescore


def test_a_class_of_a4_hand_ins_is_batch_graded_and_rescored(tmp_path: Path) -> None:
    roster = tmp_path / "roster"
    roster.mkdir()
    hand_in(REFERENCE, roster / "alice")
    shutil.copytree(ROOT / "student_template" / "a4", roster / "bob")
    out = tmp_path / "class"
    assert main(["batch", str(roster), "--pack", "a4", "--out", str(out), "--jobs", "2"]) == 0
    rows = {row["student"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    assert {name: (row["total"], row["status"]) for name, row in rows.items()} == {
        "alice": ("100", "graded"),
        "bob": ("0", "graded"),
    }
    assert (out / "index.html").is_file()
    assert all((out / "students" / name / "report.html").is_file() for name in rows)
