"""Rubric loading: the a9 rubric as the course needs it, and malformed rubrics rejected at their line."""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml

from grader import rubric as rubric_module
from grader.errors import UserError
from grader.limits import Limits
from grader.packs.a9.catalog import ONE_RANK
from grader.rubric import (
    CasesScoring,
    Condition,
    DeliverableScoring,
    TraceScoring,
    WrittenScoring,
    case_params,
    default_rubric_path,
    load_rubric,
    matches,
)
from grader.runtimes.torchdist.policy import FunctionPolicy

FIXTURES = Path(__file__).parent / "fixtures" / "scoring"
A9 = Path(__file__).parent.parent / "rubrics" / "a9.yaml"
# Until the matrix catalog exists, the reference run's cases stand in for it.
CASE_IDS = [case.name for suite in JUnitXml.fromfile(str(FIXTURES / "reference.xml")) for case in suite]
#: the stand-in cases at world size 1, marked degenerate as the a9 pack marks its own (weight 0)
DEGENERATE = {c: ONE_RANK for c in CASE_IDS if case_params(c) == "ws1" or case_params(c).startswith("ws1-")}


def load_variant(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """a9.yaml with each (old, new) replaced once, written to a temporary file."""
    text = A9.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"edit target not unique in a9.yaml: {old!r}"
        text = text.replace(old, new)
    path = tmp_path / "rubric.yaml"
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_rubric(path, CASE_IDS, DEGENERATE)
    return str(info.value)


def line_of(path: Path, text: str) -> int:
    """1-based number of the first line of ``path`` containing ``text``."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# --------------------------------------------------------------------------- the a9 rubric


def test_a9_has_exactly_the_course_items_and_points():
    rubric = load_rubric(A9, CASE_IDS, DEGENERATE)
    assert rubric.assignment.id == "a9"
    assert rubric.student_files == ("src/collectives.py", "src/transformer.py")
    assert [(t.id, t.points) for t in rubric.tasks] == [("task1", 50), ("task2", 50)]
    assert rubric.max_score == 100
    points = {item.id: item.points for item in rubric.items()}
    assert points == {
        "task1.broadcast": 6,
        "task1.allreduce": 6,
        "task1.allgather": 6,
        "task1.reduce_scatter": 6,
        "task1.all_to_all": 6,
        "task1.diagram": 5,
        "task1.written": 15,
        "task2.tensor_parallel": 20,
        "task2.ulysses": 20,
        "task2.design": 10,
        "bonus.tree_broadcast": 2.5,
        "bonus.bandwidth_allreduce": 2.5,
    }
    assert rubric.bonus is not None and rubric.bonus.cap == 5
    assert all(item.bonus for item in rubric.bonus.items)


def test_a9_scoring_kinds_and_targets():
    rubric = load_rubric(A9, CASE_IDS, DEGENERATE)
    broadcast = rubric.item("task1.broadcast")
    assert broadcast.functions == ("src/collectives.py::my_broadcast",)
    assert isinstance(broadcast.scoring, CasesScoring)
    assert [(c.match, c.share, c.requires_passing) for c in broadcast.scoring.components] == [
        (("test_broadcast[*",), 0.8, None),
        (("test_broadcast_inplace[*",), 0.2, "values"),
        (("test_broadcast_noncontig[*",), 0, None),
    ]
    assert [c.advisory for c in broadcast.scoring.components] == [False, False, True]
    assert broadcast.scoring.weight("test_broadcast[ws1-src0-float32-4x5]") == 0  # degenerate: the pack says
    assert broadcast.scoring.weight("test_broadcast[ws4-src2-float32-4x5]") == 1
    assert broadcast.scoring.degenerate["test_broadcast[ws1-src0-float32-4x5]"].startswith("world size 1:")
    assert isinstance(rubric.item("task1.diagram").scoring, DeliverableScoring)
    written = rubric.item("task1.written").scoring
    assert isinstance(written, WrittenScoring)
    assert [(q.id, q.points, q.explain) for q in written.questions] == [("Q1", 5, 1), ("Q2", 5, 1), ("Q3", 5, 1)]
    assert dict(written.questions[2].fields)["rank1"] == (0, 10, 1, 11, 2, 12)
    design = rubric.item("task2.design").scoring
    assert isinstance(design, TraceScoring) and sum(c.points for c in design.checks) == 10
    assert {c.judge for c in design.checks} == {"record"}
    assert design.checks[0].conditions == (
        Condition("max_sends_per_rank", min=1),
        Condition("collectives", empty=True),
    )
    bandwidth = rubric.item("bonus.bandwidth_allreduce").scoring
    assert isinstance(bandwidth, TraceScoring) and bandwidth.checks[0].judge == "pass"
    condition = bandwidth.checks[0].conditions[0]
    assert (condition.max, condition.relative_to) == (2.0, "tensor_bytes")


def test_a9_policy_limits_late_and_digest():
    rubric = load_rubric(A9, CASE_IDS, DEGENERATE)
    task1 = rubric.policy.for_function("src/collectives.py", "my_allreduce")
    assert task1.forbids("all_reduce") and task1.forbids("broadcast")
    task2 = rubric.policy.for_function("src/transformer.py", "forward_tensor_parallel")
    assert task2 == FunctionPolicy(frozenset({"all_reduce", "all_gather"}))
    assert task2.forbids("broadcast")
    assert rubric.limits == Limits()  # a9 states the defaults explicitly
    assert (rubric.limits.case_timeout_s, rubric.limits.deadlock_after_s, rubric.limits.memory_mb) == (
        10,
        1.0,
        2048,
    )
    assert rubric.deliverable_files == (
        "all_to_all_schematic.pdf",
        "all_to_all_schematic.png",
        "written_answers_task1.md",
        "written_answers_task1.pdf",
    )
    assert rubric.late is not None and rubric.late.deadline is None
    assert rubric.visibility.hidden is False
    assert rubric.digest == "sha256:" + hashlib.sha256(A9.read_bytes()).hexdigest()
    assert rubric.case_ids == tuple(CASE_IDS)


def test_limits_and_visibility_are_read_from_the_rubric(tmp_path):
    path = load_variant(
        tmp_path,
        ("  case_timeout_s: 10", "  case_timeout_s: 3.5"),
        ("  memory_mb: 2048", "  memory_mb: 512"),
        ("case_ids: visible", "case_ids: hidden"),
    )
    rubric = load_rubric(path, CASE_IDS, DEGENERATE)
    assert (rubric.limits.case_timeout_s, rubric.limits.memory_mb, rubric.limits.nproc) == (3.5, 512, 64)
    assert rubric.visibility.hidden is True


def test_default_rubric_is_the_checkouts_a9():
    assert default_rubric_path().resolve() == A9.resolve()


def test_sections_left_out_take_their_defaults(tmp_path):
    path = tmp_path / "mini.yaml"
    path.write_text(
        "assignment: {id: mini, title: Mini}\n"
        "student_files: [src/collectives.py]\n"
        "tasks:\n"
        "  - id: t\n"
        "    title: T\n"
        "    points: 3\n"
        "    items:\n"
        "      - {id: t.a, title: A, points: 3, cases: {match: 'test_reduce_scatter[*'}}\n"
    )
    rubric = load_rubric(path, CASE_IDS, DEGENERATE)
    assert rubric.limits == Limits(case_timeout_s=10, deadlock_after_s=1.0, memory_mb=2048, output_kb=64)
    assert (rubric.limits.nproc, rubric.limits.cpu_s, rubric.limits.file_size_mb) == (64, 60, 64)
    assert (rubric.limits.submission_mb, rubric.limits.total_timeout_s) == (20, 600)
    assert rubric.bonus is None and rubric.late is None and rubric.deliverable_files == ()
    assert rubric.item("t.a").on_violation == "zero"
    assert rubric.policy.for_function("src/collectives.py", "anything").forbids("all_reduce")


# --------------------------------------------------------------------------- case patterns


@pytest.mark.parametrize(
    ("pattern", "case_id", "expected"),
    [
        ("test_broadcast[*", "test_broadcast[ws4-src2-float32-4x5]", True),
        ("test_broadcast[*", "test_broadcast_inplace[ws4-src1]", False),
        ("*[ws1-*", "test_allgather[ws1-int64-2x3x4]", True),
        ("*[ws1-*", "test_allgather[ws16-int64-2x3x4]", False),
        ("test_trace_ulysses[ws4]", "test_trace_ulysses[ws4]", True),
        ("test_trace_ulysses[ws?]", "test_trace_ulysses[ws8]", True),
        ("test_trace_ulysses[ws?]", "test_trace_ulysses[ws16]", False),
        ("test_allreduce[ws[34]-*", "test_allreduce[ws3-float64-7]", False),  # no character classes
    ],
)
def test_only_star_and_question_mark_are_special(pattern, case_id, expected):
    assert matches((pattern,), case_id) is expected


# --------------------------------------------------------------------------- malformed rubrics


def test_unknown_key_is_reported_at_its_line(tmp_path):
    path = load_variant(tmp_path, ("        title: my_allreduce (sum)\n", "        title: x\n        wieght: 2\n"))
    message = error_of(path)
    assert f"{path}:{line_of(path, 'wieght:')}:9: " in message
    assert "unknown key 'wieght'" in message


def test_items_not_summing_to_the_task_total_are_reported_at_the_task(tmp_path):
    path = load_variant(
        tmp_path,
        ("        title: my_reduce_scatter (sum)\n        points: 6", "        title: r\n        points: 7"),
    )
    message = error_of(path)
    assert f"{path}:{line_of(path, 'points: 50')}:" in message
    assert "task task1: its items' points add up to 51, not 50" in message


def test_a_pattern_matching_no_case_is_reported_at_its_line(tmp_path):
    path = load_variant(tmp_path, ('match: "test_reduce_scatter[*"', 'match: "test_reduce_scater[*"'))
    message = error_of(path)
    assert f"{path}:{line_of(path, 'test_reduce_scater')}:" in message
    assert "case pattern 'test_reduce_scater[*' matches no matrix case" in message


def test_every_cross_field_error_is_listed_in_file_order(tmp_path):
    path = load_variant(
        tmp_path,
        ('match: "test_reduce_scatter[*"', 'match: "nothing[*"'),
        ('match: "test_broadcast_inplace[*"', 'match: "nothing_either[*"'),
    )
    lines = error_of(path).splitlines()
    assert [int(line.split(":")[1]) for line in lines] == [
        line_of(path, "nothing_either[*"),
        line_of(path, "nothing_either[*"),  # the component now matches no weighted case either
        line_of(path, "nothing[*"),
        line_of(path, "nothing[*"),
    ]


def test_schema_errors_come_before_cross_field_checks(tmp_path):
    path = load_variant(
        tmp_path,
        ("  case_timeout_s: 10", "  case_timeout_s: -1"),
        ('match: "test_reduce_scatter[*"', 'match: "nothing[*"'),
    )
    message = error_of(path)
    # Only the shape error: cross-field rules assume a well-formed document.
    reason = "limits.case_timeout_s: -1 is less than or equal to the minimum of 0"
    assert message == f"{path}:{line_of(path, 'case_timeout_s')}:19: {reason}"


MALFORMED = [
    # (edit of a9.yaml, text on the line the error must point at, reason)
    (
        ("cap_percent: 50", "cap_percent: 50\n  cap_percent: 60"),
        "cap_percent: 60",
        "duplicate key 'cap_percent'",
    ),
    (("deadline: null", "deadline: '2025-12-01T23:59'"), "deadline:", "give a time zone"),
    (("deadline: null", "deadline: 'next friday'"), "deadline:", "is not an ISO 8601 time"),
    (
        ("src/transformer.py: [all_reduce, all_gather]", "src/transformer.py: [allreduce_all]"),
        "allreduce_all",
        "'allreduce_all' is not a torch.distributed collective",
    ),
    (
        (
            'share: 0.2, requires_passing: values}\n            - {name: robustness, match: "test_allreduce_',
            'share: 0.2, requires_passing: valeus}\n            - {name: robustness, match: "test_allreduce_',
        ),
        "valeus",
        "requires_passing 'valeus' is not another component of this item",
    ),
    (
        (
            '- {name: in place, match: "test_broadcast_inplace[*", share: 0.2, requires_passing: values}',
            '- {name: in place, match: "test_broadcast_inplace[*", share: 0.2, requires_passing: robustness}',
        ),
        "requires_passing: robustness",
        "test_broadcast_inplace[ws1-src0] has no case of 'robustness' with the same parameters",
    ),
    (("deliverable: diagram", "deliverable: drawing"), "deliverable: drawing", "'drawing' is not declared"),
    (
        ('match: "test_tensor_parallel[*", share: 0.8}', 'match: "test_tensor_parallel[*", share: 0.7}'),
        "output matches forward",
        "component shares add up to 0.9, not 1",
    ),
    (
        (
            '{metric: collectives, empty: true}\n          - case: "test_trace_ulysses',
            '{metric: collectives, max: 1}\n          - case: "test_trace_ulysses',
        ),
        "max: 1",
        "trace check on collectives: give exactly one of empty, contains, excludes",
    ),
    (
        ("judge: record\n            points: 5", "judge: recorded\n            points: 5"),
        "judge: recorded",
        "'recorded' is not one of ['pass', 'record']",
    ),
    (
        (
            "metric: max_bytes_sent_per_rank",
            "all_of: [{metric: tensor_bytes, min: 1}]\n          metric: max_bytes_sent_per_rank",
        ),
        'case: "test_trace_allreduce',
        "give either metric (one condition) or all_of (a list of them)",
    ),
    (
        ('case: "test_trace_broadcast[ws8]"', 'case: "test_trace_*[ws8]"'),
        "test_trace_*",
        "exactly one matrix case",
    ),
    (
        ("        deliverable: diagram\n", "        deliverable: diagram\n        manual: {}\n"),
        "id: task1.diagram",
        "give exactly one of cases, trace, deliverable, written, manual (found: deliverable, manual)",
    ),
    (
        ('match: "test_reduce_scatter[*"', 'match: "test_reduce_scatter[ws1-*"'),
        "test_reduce_scatter[ws1-*",
        "every case it matches has weight 0, so it can never score",
    ),
    (
        (
            "explain: 1\n              fields:\n                shape",
            "explain: 5\n              fields:\n                shape",
        ),
        "explain: 5",
        "Q3: explain must leave points for the fields",
    ),
    (
        ("rank2: [0, 10, 1, 11, 2, 12]", "rank2: [0, ten]"),
        "rank2: [0, ten]",
        "fields.rank2: expected a number or a list of numbers",
    ),
    (
        ("  - src/transformer.py\n", "  - src/transformer.py\n  - src/transformer.py\n"),
        "- src/collectives.py",
        "non-unique",
    ),
    (
        ("functions: [src/collectives.py::my_reduce_scatter]", "functions: [src/other.py::f]"),
        "src/other.py",
        "'src/other.py::f' is not in student_files",
    ),
]


@pytest.mark.parametrize(("edit", "marker", "reason"), MALFORMED)
def test_malformed_rubrics_are_rejected_with_line_and_reason(tmp_path, edit, marker, reason):
    path = load_variant(tmp_path, edit)
    message = error_of(path)
    assert message.count("\n") == 0, message  # one problem, one line
    assert message.startswith(f"{path}:{line_of(path, marker)}:"), message
    assert reason in message


def test_invalid_yaml_is_reported_with_its_position(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("assignment:\n  id: a9\n  title: [unclosed\nstudent_files: []\n")
    message = error_of(path)
    assert message.startswith(f"{path}:") and "invalid YAML" in message


def test_unreadable_rubric_is_a_user_error(tmp_path):
    assert "cannot read rubric" in error_of(tmp_path / "absent.yaml")


# --------------------------------------------------------------------------- grader rubric validate


def test_a9_matches_the_real_matrix_catalog():
    from grader.packs.a9.catalog import all_case_ids

    rubric = load_rubric(A9)  # validated against the catalog: every pattern matches a real case
    assert rubric.case_ids == tuple(all_case_ids())


def test_validate_prints_a_summary_without_importing_torch():
    code = (
        "import sys; from grader.cli import main; status = main(['rubric', 'validate', sys.argv[1]]); "
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported'); sys.exit(status)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(A9)], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "ok: a9, 10 items, 100 points (+ 2 bonus items, capped at 5)\ntorch not imported\n"


def test_validate_prints_each_error_and_fails(tmp_path, capsys):
    rules = 'case_weights:\n  - match: ["*[ws2-*"]\n    weihgt: 0\n\ntasks:\n'
    path = load_variant(tmp_path, ("\ntasks:\n", "\n" + rules))
    assert rubric_module.main_validate(argparse.Namespace(file=path)) == 1
    rule = line_of(path, "*[ws2-*")
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:{rule}:5: case_weights[0]: 'weight' is a required property",
        f"{path}:{rule + 1}:5: case_weights[0].weihgt: unknown key 'weihgt' (expected one of: match, weight)",
    ]


def test_a_degenerate_case_weighs_nothing_whatever_the_rubric_says(tmp_path):
    """One rule for every pack: a case the pack marks degenerate (``Case.degenerate``) has weight 0,
    even where the rubric's own rules would weigh it."""
    rules = 'case_weights:\n  - match: ["*[ws1-*", "*[ws2-*"]\n    weight: 3\n\ntasks:\n'
    rubric = load_rubric(load_variant(tmp_path, ("\ntasks:\n", "\n" + rules)))
    scoring = rubric.item("task1.allreduce").scoring
    assert isinstance(scoring, CasesScoring)
    assert scoring.weight("test_allreduce[ws1-float64-7]") == 0
    assert scoring.weight("test_allreduce[ws2-float32-4x5]") == 3
    assert scoring.weight("test_allreduce[ws3-float64-7]") == 1


def test_a4_marks_world_size_1_and_one_accumulation_step_degenerate():
    from grader.pack import load_pack

    degenerate = load_pack("a4").degenerate()
    assert degenerate["test_grad_accumulation[ws1-k1-s1]"].startswith("accumulation_steps 1:")
    assert "test_grad_accumulation[ws1-k2-s1]" not in degenerate
    assert degenerate["test_data_parallel[ws1-s2]"].startswith("world size 1:")
    assert "test_data_parallel[ws4-s2]" not in degenerate
    assert "test_single_step[ws1-s1]" not in degenerate  # Part 1 is one device by design: nothing is skipped


def test_a_rubric_is_loaded_once_per_process_for_the_same_bytes(tmp_path):
    """``cli.resolve_rubric`` checks a rubric, then the command loads it: the second load is the
    first's result, and an edited file is read afresh."""
    path = load_variant(tmp_path)
    first = load_rubric(path)
    assert load_rubric(path) is first
    path.write_text(path.read_text().replace("title: ", "title: edited ", 1))
    assert load_rubric(path) is not first
