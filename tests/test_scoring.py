"""Scoring: hand-written matrix runs (tests/fixtures/scoring/*.xml, pytest's xunit1 shape) to grades.

Each fixture is one kind of submission; the tests say what score and feedback it must get.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import pytest
from junitparser import JUnitXml, Properties

from grader import __version__
from grader.errors import GraderError, UserError
from grader.junit import read_junit
from grader.late import late_penalty, with_deadline
from grader.manual import ManualScores
from grader.packs.a9.catalog import ONE_RANK
from grader.results import (
    CaseOutcome,
    Finding,
    GradeResult,
    ItemStatus,
    Lateness,
    LatePenalty,
    SubmissionInfo,
    Verdict,
)
from grader.rubric import LatePolicy, Rubric, case_params, load_rubric
from grader.scoring import score

FIXTURES = Path(__file__).parent / "fixtures" / "scoring"
A9 = Path(__file__).parent.parent / "rubrics" / "a9.yaml"
# The fixtures cover a 33-case slice of the matrix; the rubric is checked against that slice.
CASE_IDS = list(read_junit(FIXTURES / "reference.xml"))
#: the stand-in cases at world size 1, marked degenerate as the a9 pack marks its own (weight 0)
DEGENERATE = {c: ONE_RANK for c in CASE_IDS if case_params(c) == "ws1" or case_params(c).startswith("ws1-")}
RUBRIC = load_rubric(A9, CASE_IDS, DEGENERATE)
BOTH_FILES = {"src/collectives.py": "sha256:" + "a" * 64, "src/transformer.py": "sha256:" + "b" * 64}
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
DIAGRAM_MERGED = ManualScores({"task1.diagram": 5.0})
TASK1_CASE_ITEMS = ["task1.broadcast", "task1.allreduce", "task1.allgather", "task1.reduce_scatter", "task1.all_to_all"]


def submission(files: dict[str, str] = BOTH_FILES, submitted_at: str | None = None) -> SubmissionInfo:
    return SubmissionInfo("tests", dict(files), "sha256:" + "c" * 64, submitted_at=submitted_at)


def a9_with(tmp_path: Path, old: str, new: str) -> Rubric:
    text = A9.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "variant.yaml"
    path.write_text(text.replace(old, new))
    return load_rubric(path, CASE_IDS, DEGENERATE)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A submission directory with a valid diagram and the model written answers."""
    (tmp_path / "all_to_all_schematic.pdf").write_bytes(PDF)
    (tmp_path / "written_answers_task1.md").write_bytes((FIXTURES / "written_answers_task1.md").read_bytes())
    return tmp_path


def grade(run: str, root: Path, rubric: Rubric = RUBRIC, **kwargs) -> GradeResult:
    kwargs.setdefault("submission", submission())
    kwargs.setdefault("findings", [])
    return score(rubric, FIXTURES / f"{run}.xml", submission_root=root, **kwargs)  # an absolute run stays one


def scores(result: GradeResult) -> dict[str, float]:
    return {item.id: item.score for item in result.items()}


def reference_with(tmp_path: Path, changes: dict[str, tuple[str, dict[str, object] | None]]) -> str:
    """The reference run with some cases changed: ``{case id: (verdict, trace changes or None)}``.
    Writes ``tmp_path/changed.xml`` and returns its run name for :func:`grade`."""
    xml = JUnitXml.fromfile(str(FIXTURES / "reference.xml"))
    wanted = dict(changes)
    for suite in xml:
        for case in suite:
            if case.name not in wanted:
                continue
            verdict, trace_changes = wanted.pop(case.name)
            for props in case.iterchildren(Properties):
                for prop in props:
                    if prop.name == "verdict":
                        prop.value = verdict
                    elif prop.name == "trace" and trace_changes:
                        prop.value = json.dumps({**json.loads(prop.value), **trace_changes})
    assert not wanted, f"no such cases in the reference run: {list(wanted)}"
    xml.write(str(tmp_path / "changed.xml"))
    return str(tmp_path / "changed")


# --------------------------------------------------------------------------- whole runs


def test_reference_run_earns_full_marks_and_the_bonus(root):
    result = grade("reference", root, manual=DIAGRAM_MERGED)
    assert (result.score, result.max_score, result.bonus_score) == (105, 100, 5)
    assert [(t.id, t.score, t.max_score, t.bonus) for t in result.tasks] == [
        ("task1", 50, 50, False),
        ("task2", 50, 50, False),
        ("bonus", 5, 5, True),
    ]
    statuses = {item.id: item.status for item in result.items()}
    assert statuses.pop("task1.diagram") is ItemStatus.MANUAL
    assert statuses.pop("task1.written") is ItemStatus.PENDING_REVIEW  # the explanations wait for a reader
    assert set(statuses.values()) == {ItemStatus.PASSED}
    assert result.item("task1.broadcast").feedback == "all 3 cases pass"
    assert result.late is None and result.status == "graded"


def test_a_real_diagram_earns_provisional_points_pending_review(root):
    result = grade("reference", root)
    diagram = result.item("task1.diagram")
    assert (diagram.score, diagram.status, diagram.manual) == (5, ItemStatus.PENDING_REVIEW, True)
    assert diagram.feedback == (
        "all_to_all_schematic.pdf is a PDF (0 KiB); its 5 points are provisional until an instructor reviews it"
    )
    assert result.score == 105  # 100 + the bonus


def test_an_instructor_can_take_provisional_diagram_points_back(root):
    result = grade("reference", root, manual=ManualScores({"task1.diagram": 1.0}))
    assert (result.item("task1.diagram").score, result.score) == (1, 101)


def test_star_shaped_collectives_earn_100_and_no_bonus(root):
    result = grade("star", root, manual=DIAGRAM_MERGED)
    assert (result.score, result.bonus_score) == (100, 0)
    assert result.item("bonus.tree_broadcast").feedback == (
        "not met: no rank sends more than log2(8) = 3 messages: max_sends_per_rank = 7 (needs <= 3)"
    )
    assert result.item("bonus.bandwidth_allreduce").feedback == (
        "not met: no rank sends more than 2x the tensor's bytes: "
        "max_bytes_sent_per_rank = 28672 (needs <= 8192 = 2 x tensor_bytes)"
    )


def test_bonus_is_capped(root, tmp_path):
    rubric = a9_with(tmp_path, "bonus:\n  cap: 5", "bonus:\n  cap: 4")
    result = grade("reference", root, rubric, manual=DIAGRAM_MERGED)
    assert (result.bonus_score, result.score, result.tasks[-1].score) == (4, 104, 4)


def test_stubs_score_zero_and_every_item_says_why(tmp_path):
    result = grade("not_implemented", tmp_path)  # and no diagram or answers either
    assert result.score == 0
    for item in result.items():
        assert item.score == 0 and item.status is ItemStatus.FAILED, item.id
        assert item.feedback, item.id
    for item_id in [*TASK1_CASE_ITEMS, "task2.tensor_parallel", "task2.ulysses"]:
        assert "not implemented yet" in result.item(item_id).feedback
    assert result.item("task1.broadcast").feedback.splitlines()[0] == (
        "3/3 cases are not implemented yet: my_broadcast raises NotImplementedError (still the starter stub) "
        "(test_broadcast[ws4-src2-float32-4x5])"
    )
    assert result.item("task1.diagram").feedback == "all_to_all_schematic.pdf or all_to_all_schematic.png missing"
    assert result.item("task1.written").feedback.startswith(
        "written_answers_task1.md or written_answers_task1.pdf missing"
    )
    assert "did not run to the end (not_implemented)" in result.item("task2.design").feedback


def test_identity_collectives_passing_only_world_size_1_score_zero_on_task1(root):
    result = grade("identity", root)
    for item_id in TASK1_CASE_ITEMS:
        item = result.item(item_id)
        assert (item.score, item.status, item.cases.passed) == (0, ItemStatus.FAILED, 0), item_id
        assert "give a wrong result" in item.feedback
        assert "unscored" not in item.feedback  # the world-size-1 cases it passes carry no weight


def test_broadcast_values_right_but_not_in_place_is_partial(root):
    item = grade("broadcast_not_inplace", root).item("task1.broadcast")
    assert (item.score, item.status) == (4.8, ItemStatus.PARTIAL)  # values 0.8 of 6, in place 0 of the 0.2
    message = "my_broadcast returned the right values but left its argument unchanged on rank 0 (it must work in place)"
    assert item.failures == [CaseOutcome("test_broadcast_inplace[ws4-src2]", Verdict.WRONG, message)]
    assert (
        item.feedback == f"2/3 cases pass\n1/3 cases give a wrong result: {message} (test_broadcast_inplace[ws4-src2])"
    )


# --------------------------------------------------------------------------- what the handout asks, once


def test_robustness_the_handout_does_not_ask_for_is_reported_and_costs_nothing(root, tmp_path):
    noncontig = ("crash", None)
    run = reference_with(
        tmp_path,
        {
            "test_broadcast_noncontig[ws4-src2-float32-6x4]": noncontig,
            "test_allgather_input_untouched[ws4]": ("wrong", None),
        },
    )
    result = grade(run, root)
    assert scores(result) == scores(grade("reference", root))
    assert result.item("task1.broadcast").feedback.splitlines()[-1] == (
        "robustness (advisory, no points): 1/1 cases fail, e.g. test_broadcast_noncontig[ws4-src2-float32-6x4]"
    )
    assert result.item("task1.allgather").status is ItemStatus.PASSED
    assert "robustness (advisory, no points): 1/2 cases fail" in result.item("task1.allgather").feedback


def test_in_place_pays_nothing_where_the_values_at_the_same_parameters_are_wrong(root, tmp_path):
    run = reference_with(tmp_path, {"test_broadcast[ws4-src2-float32-4x5]": ("wrong", None)})
    item = grade(run, root).item("task1.broadcast")
    # values: 1 of 2 weighted cases (0.4 of 0.8); in place: its ws4-src2 case passed but does not count
    assert (item.score, item.status) == (2.4, ItemStatus.PARTIAL)
    assert (
        "in place: 1 passing case(s) not counted, since values fails for the same parameters, "
        "e.g. test_broadcast_inplace[ws4-src2]"
    ) in item.feedback


def test_tensor_parallel_shards_pay_nothing_without_a_right_forward(root, tmp_path):
    run = reference_with(
        tmp_path,
        {
            "test_tensor_parallel[ws2-d32h4f64s8b1]": ("wrong", None),
            "test_tensor_parallel[ws4-d64h8f256s16b3]": ("wrong", None),
        },
    )
    item = grade(run, root).item("task2.tensor_parallel")
    assert item.score == 0  # the shards case (ws4-d64h8f256s16b3) passed, but its forward did not


def test_right_values_without_my_all_to_all_earn_no_ulysses_points(root, tmp_path):
    run = reference_with(
        tmp_path,
        {
            "test_ulysses[ws2-d32h4f64s8b1]": ("not_parallel", None),
            "test_ulysses[ws4-d32h4f64s8b1]": ("not_parallel", None),
        },
    )
    ulysses = grade(run, root).item("task2.ulysses")
    assert (ulysses.score, ulysses.status) == (0, ItemStatus.FAILED)
    assert ulysses.feedback.startswith("2/2 cases skip the communication the handout requires")


DESIGN_CHECKS = [
    "tensor parallel communicates with send/recv and no built-in collective",
    "tensor parallel communicates through your Task 1 functions, and no built-in collective",
    "Ulysses communicates with send/recv and no built-in collective",
]


@pytest.mark.parametrize(
    ("tp", "ulysses", "earned"),
    [
        # the numbers do not matter: how each method communicated does
        (("wrong", None), ("wrong", None), [2.5, 2.5, 5]),
        (("not_parallel", None), ("not_parallel", None), [2.5, 2.5, 5]),
        # a method that does not run to the end leaves nothing to judge
        (("not_implemented", None), ("crash", None), [0, 0, 0]),
        # no message at all: no credit, not even for avoiding built-in collectives
        (("pass", {"max_sends_per_rank": 0, "student_functions": []}), ("pass", {"max_sends_per_rank": 0}), [0, 0, 0]),
        # raw send/recv in tensor parallel instead of the Task 1 functions: half of its half
        (("pass", {"student_functions": []}), ("pass", None), [2.5, 0, 5]),
        # a permitted built-in collective costs that method's half of the design marks
        (("pass", {"collectives": ["all_reduce"]}), ("pass", {"collectives": ["all_gather"]}), [0, 0, 0]),
    ],
)
def test_design_is_judged_by_how_each_method_communicates(root, tmp_path, tp, ulysses, earned):
    run = reference_with(tmp_path, {"test_trace_tensor_parallel[ws4]": tp, "test_trace_ulysses[ws4]": ulysses})
    design = grade(run, root).item("task2.design")
    lines = design.feedback.splitlines()
    assert [line.startswith("ok: ") for line in lines] == [bool(points) for points in earned]
    assert [line.split(": ")[1] for line in lines] == DESIGN_CHECKS
    assert design.score == sum(earned)


# --------------------------------------------------------------------------- the communication policy

FINDING = Finding(
    rule="forbidden-collective",
    message="dist.reduce_scatter is not allowed in my_reduce_scatter",
    file="src/collectives.py",
    line=63,
    col=4,
    function="my_reduce_scatter",
    source="dist.reduce_scatter(out, list(chunks))",
)


def test_a_static_finding_zeroes_only_the_item_of_its_function(root):
    clean = scores(grade("reference", root))
    result = grade("reference", root, findings=[FINDING])
    item = result.item("task1.reduce_scatter")
    assert (item.score, item.status, item.findings) == (0, ItemStatus.FAILED, [FINDING])
    assert item.feedback.splitlines()[:2] == [
        "0 points: my_reduce_scatter reaches a collective the rules forbid here:",
        "  src/collectives.py:63: dist.reduce_scatter(out, list(chunks))  "
        "(dist.reduce_scatter is not allowed in my_reduce_scatter)",
    ]
    assert scores(result) == {**clean, "task1.reduce_scatter": 0}
    assert result.findings == [FINDING]


@pytest.mark.parametrize(
    "finding",
    [
        Finding(**{**FINDING.__dict__, "function": "_helper"}),  # a function no item names
        Finding(**{**FINDING.__dict__, "file": "src/transformer.py"}),  # same name, other file
        Finding(**{**FINDING.__dict__, "origin": "runtime"}),  # runtime ones show up as forbidden cases
    ],
)
def test_findings_that_name_no_items_function_zero_nothing(root, finding):
    assert scores(grade("reference", root, findings=[finding])) == scores(grade("reference", root))


def test_a_forbidden_case_zeroes_its_item_and_quotes_the_matrix(root):
    clean = scores(grade("reference", root))
    result = grade("forbidden", root)
    item = result.item("task1.allgather")
    assert (item.score, item.status) == (0, ItemStatus.FAILED)
    assert item.feedback.splitlines()[:2] == [
        "0 points: my_allgather reaches a collective the rules forbid here:",
        "  my_allgather called torch.distributed.all_gather at collectives.py:48 (Task 1 allows send/recv only) "
        "(test_allgather[ws5-int64-2x3x4])",
    ]
    assert scores(result) == {**clean, "task1.allgather": 0}


def test_on_violation_report_lists_the_finding_and_keeps_the_score(root, tmp_path):
    rubric = a9_with(tmp_path, "on_violation: zero", "on_violation: report")
    item = grade("reference", root, rubric, findings=[FINDING]).item("task1.reduce_scatter")
    assert (item.score, item.findings) == (6, [FINDING])
    assert item.feedback.startswith(
        "my_reduce_scatter reaches a collective the rules forbid here (reported, not scored):"
    )


# --------------------------------------------------------------------------- Task 2


def test_missing_transformer_zeroes_task2_and_leaves_task1_intact(root):
    files = {"src/collectives.py": BOTH_FILES["src/collectives.py"]}
    result = grade("missing_transformer", root, submission=submission(files), manual=DIAGRAM_MERGED)
    task1, task2, _bonus = result.tasks
    assert (task1.score, task2.score) == (50, 0)
    for item in task2.items:
        assert (item.score, item.status) == (0, ItemStatus.FAILED)
        assert "transformer.py missing" in item.feedback, item.id
    assert (
        result.item("task2.tensor_parallel").feedback.splitlines()[0] == "3/3 cases cannot run: transformer.py missing"
    )


# --------------------------------------------------------------------------- feedback


def test_failures_are_grouped_by_verdict_with_the_first_message_of_each(root):
    result = grade("mixed", root)
    allreduce = result.item("task1.allreduce")
    hang = (
        "all ranks blocked: rank 1 waits in recv(src=0) at collectives.py:17; "
        "rank 0 waits in recv(src=2) at collectives.py:21"
    )
    assert allreduce.feedback.splitlines() == [
        f"2/3 cases hang: {hang} (test_allreduce[ws3-float64-7])",
        "1/3 cases crash: rank 3 raised IndexError: list index out of range (collectives.py:25) "
        "(test_allreduce_inplace[ws3])",
        f"robustness (advisory, no points): 1/1 cases fail, e.g. {hang} (test_allreduce_noncontig[ws3-float32-6x4])",
    ]
    # one case of each kind first, then the rest
    assert [(f.id, f.verdict) for f in allreduce.failures] == [
        ("test_allreduce[ws3-float64-7]", Verdict.HANG),
        ("test_allreduce_inplace[ws3]", Verdict.CRASH),
        ("test_allreduce[ws8-int64-2x3]", Verdict.HANG),
        ("test_allreduce_noncontig[ws3-float32-6x4]", Verdict.HANG),
    ]


def test_a_case_without_a_verdict_is_the_graders_error(root):
    item = grade("mixed", root).item("task1.reduce_scatter")
    message = "no verdict recorded: RuntimeError: launcher: rank 4 exited before reporting (grader bug)"
    assert item.failures == [
        CaseOutcome("test_reduce_scatter[ws8-float32-16x3]", Verdict.ERROR, message),
        CaseOutcome("test_reduce_scatter_noncontig[ws8-float32-48x4]", Verdict.ERROR, message),
    ]
    assert "could not be run by the grader (not your fault: tell your instructor)" in item.feedback


def test_cases_absent_from_the_junit_count_as_failed_and_not_run(root):
    result = grade("truncated", root, manual=DIAGRAM_MERGED)
    assert (result.tasks[0].score, result.tasks[1].score, result.bonus_score) == (50, 0, 0)
    outcome = result.item("task2.ulysses").failures[0]
    assert outcome == CaseOutcome(
        "test_ulysses[ws2-d32h4f64s8b1]",
        Verdict.ERROR,
        "did not run (the grading run was cut short before this case)",
    )


def test_at_most_five_failures_are_kept(root, tmp_path):
    rubric = a9_with(tmp_path, 'match: "test_reduce_scatter[*"', 'match: "test_*"')
    item = grade("not_implemented", root, rubric).item("task1.reduce_scatter")
    assert item.cases.total > 5
    assert len(item.failures) == 5


def test_hidden_case_ids_show_verdicts_but_no_ids_or_inputs(root, tmp_path):
    rubric = a9_with(tmp_path, "case_ids: visible", "case_ids: hidden")
    result = grade("mixed", root, rubric)
    text = json.dumps(result.to_dict()["tasks"]) + json.dumps(list(result.trace))
    assert "test_" not in text
    assert "collectives.py:17" not in text  # messages describe inputs, so they go too
    allreduce = result.item("task1.allreduce")
    assert allreduce.failures[0] == CaseOutcome("hidden case 8", Verdict.HANG, "")
    assert allreduce.feedback.splitlines()[0] == "2/3 cases hang: hidden case 8"
    assert "hidden case 31" in result.trace  # test_trace_broadcast[ws8], by its place in the matrix


THRESHOLDS = "thresholds\n          thresholds: [{min_fraction: 1.0, share: 1.0}, {min_fraction: 0.5, share: 0.5}]"


@pytest.mark.parametrize(
    ("mode", "run", "points"),
    [
        ("proportional", "broadcast_not_inplace", 4.0),  # 2 of 3 weighted cases pass
        ("all_or_nothing", "broadcast_not_inplace", 0.0),
        ("all_or_nothing", "reference", 6.0),
        (THRESHOLDS, "broadcast_not_inplace", 3.0),
        (THRESHOLDS, "reference", 6.0),  # a fraction exactly at a threshold reaches it
    ],
)
def test_scoring_modes(root, tmp_path, mode, run, points):
    rubric = a9_with(
        tmp_path,
        '          components:\n            - {name: values, match: "test_broadcast[*", share: 0.8}\n'
        '            - {name: in place, match: "test_broadcast_inplace[*", share: 0.2, requires_passing: values}\n'
        '            - {name: robustness, match: "test_broadcast_noncontig[*", share: 0}\n',
        f'          match: ["test_broadcast[*", "test_broadcast_inplace[*"]\n          mode: {mode}\n',
    )
    assert grade(run, root, rubric).item("task1.broadcast").score == points


# --------------------------------------------------------------------------- manual scores


def test_manual_scores_complete_instructor_items(root):
    result = grade("reference", root, manual=ManualScores({"task1.written": 12.5, "task1.diagram": 4}))
    written = result.item("task1.written")
    assert (written.score, written.status, written.manual) == (12.5, ItemStatus.MANUAL, True)
    assert written.feedback.splitlines()[0] == "scored by an instructor: 12.5/15"
    assert result.tasks[0].score == 30 + 4 + 12.5  # the five collectives, the diagram, the answers
    assert result.score == 46.5 + 50 + 5


@pytest.mark.parametrize(
    ("manual", "reason"),
    [
        ({"task1.broadcast": 6}, "not a deliverable, written or manual item"),
        ({"task1.diagram": 6}, "6 is outside 0..5"),
        ({"task9.essay": 1}, "not a deliverable, written or manual item"),
    ],
)
def test_manual_scores_for_the_wrong_items_are_refused(root, manual, reason):
    with pytest.raises(UserError, match=reason):
        grade("reference", root, manual=ManualScores(manual))


# --------------------------------------------------------------------------- late policy

POLICY = LatePolicy(
    deadline=datetime(2025, 12, 1, 23, 59, tzinfo=timezone.utc),
    penalty_percent_per_day=10,
    cap_percent=50,
    grace_minutes=15,
)


@pytest.mark.parametrize(
    ("late_by", "days", "percent"),
    [
        (timedelta(hours=-1), 0, 0),
        (timedelta(minutes=15), 0, 0),  # inside the grace period
        (timedelta(minutes=16), 1, 10),
        (timedelta(days=1, minutes=15), 1, 10),  # the grace period shifts every day boundary
        (timedelta(days=1, minutes=16), 2, 20),
        (timedelta(days=30), 30, 50),  # capped
    ],
)
def test_late_penalty_arithmetic(late_by, days, percent):
    penalty = late_penalty(POLICY, POLICY.deadline + late_by, 80.0)
    assert penalty == LatePenalty(days_late=days, percent=percent, points=80.0 * percent / 100)


def test_late_penalty_needs_a_deadline_and_a_time():
    assert late_penalty(POLICY, None, 80.0) is None
    assert late_penalty(LatePolicy(None, 10, 50), datetime(2030, 1, 1, tzinfo=timezone.utc), 80.0) is None
    naive = datetime(2025, 12, 2, 0, 15)  # read as UTC: 16 minutes late
    assert late_penalty(POLICY, naive, 80.0) == LatePenalty(1, 10, 8.0)


def test_late_penalty_applies_to_the_total_including_bonus(root, tmp_path):
    rubric = a9_with(tmp_path, "deadline: null", "deadline: '2025-12-01T23:59:00+00:00'")
    late = submission(submitted_at="2025-12-03T12:00:00+00:00")  # 1 day 12 h late: 2 days
    result = grade("reference", root, rubric, submission=late, manual=DIAGRAM_MERGED)
    assert result.late == LatePenalty(days_late=2, percent=20, points=21.0)
    assert result.score == 84  # 105 - 20 %
    assert result.lateness is Lateness.LATE
    on_time = datetime(2025, 12, 1, 12, 0, tzinfo=timezone.utc)  # the argument wins over the submission's time
    result = grade("reference", root, rubric, submission=late, submitted_at=on_time)
    assert (result.late, result.lateness) == (LatePenalty(0, 0, 0), Lateness.ON_TIME)


def test_a_deadline_without_a_submission_time_is_unknown_lateness_not_on_time(root, tmp_path):
    rubric = a9_with(tmp_path, "deadline: null", "deadline: '2025-12-01T23:59:00+00:00'")
    result = grade("reference", root, rubric, manual=DIAGRAM_MERGED)
    assert (result.late, result.lateness, result.score) == (None, Lateness.UNKNOWN, 105)
    assert grade("reference", root, manual=DIAGRAM_MERGED).lateness is Lateness.NO_DEADLINE


def test_with_deadline_replaces_the_rubrics_and_needs_a_late_policy():
    deadline = datetime(2026, 1, 10, tzinfo=timezone.utc)
    assert with_deadline(RUBRIC, deadline).late == LatePolicy(deadline, 10, 50, 15)
    with pytest.raises(UserError, match="--deadline needs a `late:` section"):
        with_deadline(dataclasses.replace(RUBRIC, late=None), deadline)


# --------------------------------------------------------------------------- the result itself


def test_the_result_records_what_was_graded_and_is_valid_json(root):
    result = grade("reference", root, isolation={"rlimits": "on"}, timings={"matrix": 12.5})
    assert result.rubric_digest == RUBRIC.digest and RUBRIC.digest.startswith("sha256:")
    assert result.grader_version == __version__
    assert (result.isolation, result.timings) == ({"rlimits": "on"}, {"matrix": 12.5})
    assert result.trace["test_trace_broadcast[ws8]"]["max_sends_per_rank"] == 3
    assert GradeResult.from_dict(json.loads(result.to_json())) == result
    schema_file = Path(__file__).parent.parent / "grader" / "schemas" / "results.schema.json"
    if schema_file.exists():
        jsonschema.validate(result.to_dict(), json.loads(schema_file.read_text()))


def test_an_unreadable_junit_file_is_the_graders_error(root, tmp_path):
    (tmp_path / "junit.xml").write_text("<testsuites><testsuite>")
    with pytest.raises(GraderError):
        score(RUBRIC, tmp_path / "junit.xml", submission(), [], root)
    with pytest.raises(GraderError):
        score(RUBRIC, tmp_path / "absent.xml", submission(), [], root)


def test_a_deadline_option_is_read_one_way_everywhere(tmp_path, capsys, temp_dir):
    """``--deadline`` absent keeps the rubric's; a time replaces it; an empty value is refused with a
    clear message by grade (either backend), batch and rescore alike, before anything runs or is made."""
    from grader.cli import main
    from grader.late import under_deadline_option

    assert under_deadline_option(RUBRIC, None) is RUBRIC
    assert (
        under_deadline_option(RUBRIC, "2026-01-05T12:00:00Z").late.deadline.isoformat() == "2026-01-05T12:00:00+00:00"
    )
    (tmp_path / "roster" / "alice").mkdir(parents=True)
    (tmp_path / "roster" / "alice" / "x.py").write_text("")
    commands = [
        ["grade", str(tmp_path / "roster" / "alice")],
        ["grade", str(tmp_path / "roster" / "alice"), "--backend", "docker"],
        ["batch", str(tmp_path / "roster"), "--out", str(tmp_path / "class")],
        ["rescore", str(tmp_path / "roster" / "alice")],
    ]
    for command in commands:
        for empty in ("", "  "):
            assert main([*command, "--deadline", empty]) == 1, command
            assert "--deadline is empty: give a time" in capsys.readouterr().err, command
    assert not (tmp_path / "class" / "students" / "alice").exists()  # nothing was graded
    assert list(temp_dir.iterdir()) == []  # nor a directory made for it (the docker backend made one per refusal)
