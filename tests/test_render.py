"""Renderers of GradeResult, specified against what their consumers do with them.

The GitHub Classroom output goes through a Python mirror of the reporter
(classroom-resources/autograding-grading-reporter v1, dist/main.js at d13b591), which sums the
scores as JavaScript does: doubles, left to right, printed with JavaScript's number formatting.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

from grader import cli
from grader.render import fmt_points
from grader.render.classroom import (
    ENCODED_LIMIT,
    MESSAGE_LIMIT,
    NAME_LIMIT,
    encode_result,
    render_classroom,
    write_step_output,
)
from grader.render.gradescope import render_gradescope
from grader.render.markdown import STEP_SUMMARY_LIMIT, append_step_summary, render_markdown
from grader.render.outputs import render, write_outputs
from grader.render.terminal import render_terminal, use_color
from grader.results import (
    CaseOutcome,
    CaseTally,
    Finding,
    GradeResult,
    ItemResult,
    ItemStatus,
    LatePenalty,
    SubmissionInfo,
    TaskResult,
    Verdict,
)

FIXTURES = Path(__file__).parent / "fixtures" / "results"

# --- building results -----------------------------------------------------------------------


def item(item_id: str, score: float, max_score: float, **kw: Any) -> ItemResult:
    if "status" not in kw:
        kw["status"] = (
            ItemStatus.PASSED if score >= max_score else ItemStatus.FAILED if score == 0 else ItemStatus.PARTIAL
        )
    return ItemResult(item_id, kw.pop("title", f"Title of {item_id}"), score, max_score, **kw)


def task(task_id: str, *items: ItemResult, bonus: bool = False) -> TaskResult:
    score = sum(i.score for i in items)
    return TaskResult(
        task_id, f"Task {task_id}", score, 0.0 if bonus else sum(i.max_score for i in items), list(items), bonus
    )


def result(*tasks: TaskResult, score: float | None = None, **kw: Any) -> GradeResult:
    """A result as scoring would make it: regular + (capped) bonus - late, floored at 0."""
    regular = sum(t.score for t in tasks if not t.bonus)
    bonus = kw.setdefault("bonus_score", sum(t.score for t in tasks if t.bonus))
    late = kw.get("late")
    if score is None:
        score = round(max(0.0, regular + bonus - (late.points if late else 0.0)), 2)
    max_score = kw.pop("max_score", sum(t.max_score for t in tasks))
    submission = SubmissionInfo("student/", {"src/collectives.py": "sha256:" + "a" * 64}, "sha256:" + "b" * 64)
    return GradeResult("a9", score, max_score, list(tasks), submission, "0.1.0", "sha256:" + "c" * 64, **kw)


FINDING = Finding(
    "forbidden-collective",
    "dist.all_reduce is not allowed in my_allreduce",
    "src/collectives.py",
    88,
    4,
    "my_allreduce",
    "dist.all_reduce(tensor, op=dist.ReduceOp.SUM)",
)


def full_marks() -> GradeResult:
    return result(task("task1", item("t1.a", 25, 25), item("t1.b", 25, 25)), task("task2", item("t2.a", 50, 50)))


def partial_decimals() -> GradeResult:
    # Chosen so that adding the cents as doubles drifts: 0.1 + 0.2 + ... is not 0.3 + ...
    return result(
        task("task1", item("t1.a", 0.1, 1), item("t1.b", 0.2, 1), item("t1.c", 6.67, 10), item("t1.d", 3.33, 10)),
        task("task2", item("t2.a", 8.76, 20), item("t2.b", 12.35, 20), item("t2.c", 0.7, 38)),
    )


def thirds() -> GradeResult:
    # Unrounded shares: 10/3 each, a total of exactly 10.
    return result(task("task1", *(item(f"t1.{n}", 10 / 3, 5) for n in "abc")), score=10.0)


def bonus() -> GradeResult:
    return result(
        task("task1", item("t1.a", 48.5, 50), item("t1.b", 50, 50)),
        task("bonus", item("bonus.a", 2.5, 2.5, bonus=True), item("bonus.b", 0.75, 2.5, bonus=True), bonus=True),
    )


def bonus_capped() -> GradeResult:
    return result(
        task("task1", item("t1.a", 90, 100)),
        task("bonus", item("bonus.a", 2.5, 2.5, bonus=True), item("bonus.b", 2.5, 2.5, bonus=True), bonus=True),
        bonus_score=3.0,
    )


def late() -> GradeResult:
    return result(task("task1", item("t1.a", 50, 50), item("t1.b", 37.5, 50)), late=LatePenalty(3, 10.0, 8.75))


def late_floored() -> GradeResult:
    return result(task("task1", item("t1.a", 3.3, 50), item("t1.b", 0, 50)), late=LatePenalty(20, 100.0, 3.3))


def zero() -> GradeResult:
    return result(task("task1", item("t1.a", 0, 50), item("t1.b", 0, 50)))


def errored() -> GradeResult:
    return result(task("task1", item("t1.a", 12.5, 50)), max_score=100.0, status="error", error="runner died")


SCENARIOS = [full_marks, partial_decimals, thirds, bonus, bonus_capped, late, late_floored, zero, errored]


# --- a mirror of the GitHub Classroom reporter ---------------------------------------------------


@dataclass
class Reported:
    notices: list[str]  # ::notice messages, in order
    failed: str | None  # core.setFailed message (the step fails), None when it succeeds


def run_reporter(runners: str, env: dict[str, str]) -> Reported:
    """dist/main.js: decode each runner's ``<ID>_RESULTS``, print, notify Classroom, set the status."""
    try:
        results = [_decode(env, runner) for runner in runners.split(",")]
        for res in results:  # ConsoleResults reads tests.length of every runner first
            if not isinstance(res.get("tests"), list):
                raise TypeError("Cannot read properties of undefined (reading 'length')")
        notices = _notify_classroom(results)
        if any(res.get("status") == "fail" for res in results):
            return Reported(notices, "Some tests failed.")
        if any(res.get("status") == "error" for res in results):
            return Reported(notices, "Some tests errored.")
        return Reported(notices, None)
    except Exception as exc:
        if not re.fullmatch(r"([a-zA-Z0-9]+,)*[a-zA-Z0-9]+", runners):
            return Reported([], "The runners input must be a comma-separated list of strings.")
        return Reported([], str(exc))


def _decode(env: dict[str, str], runner: str) -> dict[str, Any]:
    encoded = env.get(f"{runner.strip().upper()}_RESULTS")
    if encoded is None:
        raise TypeError("The first argument must be of type string. Received undefined")
    # Node's decoder skips stray characters; ours must emit canonical base64, so decode strictly.
    text = base64.b64decode(encoded, validate=True).decode("utf-8")
    return json.loads(text, parse_constant=_reject_constant)  # JSON.parse knows no NaN/Infinity


def _reject_constant(name: str) -> float:
    raise ValueError(f"Unexpected token {name} in JSON")


def _notify_classroom(results: list[dict[str, Any]]) -> list[str]:
    total, maximum = 0.0, 0.0
    for res in results:
        if not _js_truthy(res.get("max_score")):
            continue  # a runner without max_score is silently left out
        maximum += res["max_score"]
        for test in res["tests"]:
            score = test.get("score")
            total += score if _is_number(score) else float("nan")  # undefined + n is NaN
    if not _js_truthy(maximum):
        return []
    return [
        f"Points {js_number(total)}/{js_number(maximum)}",
        f'{{"totalPoints":{js_json(total)},"maxPoints":{js_json(maximum)}}}',
    ]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _js_truthy(value: Any) -> bool:
    return bool(value) and value == value  # NaN is falsy


def js_number(x: float) -> str:
    """Number.prototype.toString for the range scores live in."""
    if x != x:
        return "NaN"
    if x == int(x) and abs(x) < 1e21:
        return str(int(x))
    assert 1e-7 <= abs(x) < 1e21, x
    return format(Decimal(repr(x)), "f")


def js_json(x: float) -> str:
    return "null" if x != x else js_number(x)


def classroom_env(res: GradeResult) -> dict[str, str]:
    return {"GRADER_RESULTS": encode_result(render_classroom(res))}


def cents(x: float) -> float:
    return float(Decimal(repr(x)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


# --- the mirror is faithful (so that passing it means something) ----------------------------------


def _b64(obj: Any) -> str:
    return base64.b64encode(json.dumps(obj).encode()).decode()


def test_reporter_mirror_sums_scores_as_doubles_and_skips_runners_without_max_score() -> None:
    one = {"status": "pass", "max_score": 1, "tests": [{"score": 0.1}, {"score": 0.2}]}
    none = {"status": "pass", "max_score": 0, "tests": [{"score": 5}]}
    reported = run_reporter("a,b", {"A_RESULTS": _b64(one), "B_RESULTS": _b64(none)})
    assert reported.notices[0] == "Points 0.30000000000000004/1"
    assert reported.failed is None


def test_reporter_mirror_fails_like_the_reporter() -> None:
    no_tests = {"status": "pass", "max_score": 10}
    assert run_reporter("grader", {"GRADER_RESULTS": _b64(no_tests)}).notices == []
    assert run_reporter("grader", {"GRADER_RESULTS": _b64(no_tests)}).failed
    missing_score = {"status": "fail", "max_score": 10, "tests": [{"name": "x"}]}
    assert run_reporter("grader", {"GRADER_RESULTS": _b64(missing_score)}).notices[0] == "Points NaN/10"
    hyphen = run_reporter("my-grader", {})
    assert hyphen.failed == "The runners input must be a comma-separated list of strings."


# --- GitHub Classroom -----------------------------------------------------------------------------


@pytest.mark.parametrize("make", SCENARIOS, ids=lambda f: f.__name__)
def test_classroom_reporter_reports_exactly_the_score(make: Any) -> None:
    res = make()
    reported = run_reporter("grader", classroom_env(res))
    assert reported.notices == [
        f"Points {js_number(cents(res.score))}/{js_number(res.max_score)}",
        f'{{"totalPoints":{js_number(cents(res.score))},"maxPoints":{js_number(res.max_score)}}}',
    ]


def test_partial_credit_drift_is_corrected_without_extra_rows() -> None:
    res = partial_decimals()
    naive = 0.0
    for i in res.items():
        naive += i.score
    assert naive != res.score, "the fixture must make adding cents as doubles drift"
    tests = render_classroom(res)["tests"]
    assert [t["name"].split(":")[0] for t in tests] == [i.id for i in res.items()]
    assert [cents(t["score"]) for t in tests] == [i.score for i in res.items()]


def test_classroom_sum_stays_exact_when_the_last_row_cancels_most_of_it() -> None:
    # 0.18 + 0.25 + 1.34 + 2.1 + 0.54 - 2.98: no double near -2.98 lands the sum on 1.43.
    res = result(
        task("task1", item("t1.a", 0.18, 1), item("t1.b", 0.25, 1)),
        task("bonus", *(item(f"b.{n}", x, 2.5, bonus=True) for n, x in enumerate([1.34, 2.1, 0.54])), bonus=True),
        bonus_score=1.0,
    )
    tests = render_classroom(res)["tests"]
    assert tests[-1]["name"] == "rounding" and cents(tests[-1]["score"]) == 0
    assert run_reporter("grader", classroom_env(res)).notices[0] == "Points 1.43/2"


def test_classroom_sum_is_exact_for_many_random_results() -> None:
    rng = random.Random(20250303)
    for _ in range(400):
        items = []
        for n in range(rng.randint(1, 14)):
            max_score = rng.choice([1, 2, 2.5, 5, 6, 7.5, 10, 15, 20])
            earned = rng.choice([0, max_score, round(rng.uniform(0, max_score), 2), max_score * rng.randint(1, 2) / 3])
            items.append(item(f"t.{n}", earned, max_score))
        bonus_items = [item(f"b.{n}", round(rng.uniform(0, 2.5), 2), 2.5, bonus=True) for n in range(rng.randint(0, 3))]
        tasks = [task("task1", *items)] + ([task("bonus", *bonus_items, bonus=True)] if bonus_items else [])
        earned_total = sum(i.score for i in items)
        cap = rng.choice([None, 1.0])
        bonus_score = (
            min(cap, sum(i.score for i in bonus_items)) if cap is not None else sum(i.score for i in bonus_items)
        )
        before_late = earned_total + bonus_score
        late_penalty = None
        if rng.random() < 0.5:  # 100%: more than everything (the floor at 0)
            percent = rng.choice([5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 100.0])
            late_penalty = LatePenalty(1, percent, round(before_late * percent / 100, 2) + (5 if percent == 100 else 0))
        res = result(*tasks, bonus_score=bonus_score, late=late_penalty)
        if rng.random() < 0.3:
            res.score = max(0.0, before_late - (late_penalty.points if late_penalty else 0))  # unrounded
        rendered = render_classroom(res)
        reported = run_reporter("grader", {"GRADER_RESULTS": encode_result(rendered)})
        assert reported.notices[0] == f"Points {js_number(cents(res.score))}/{js_number(res.max_score)}", res
        for test in rendered["tests"]:
            assert abs(test["score"] * 100 - round(test["score"] * 100)) < 1e-6, "scores are whole cents"


def test_classroom_has_one_test_per_item_scored_with_its_points_then_adjustments() -> None:
    res = late()
    tests = render_classroom(res)["tests"]
    assert [t["name"] for t in tests] == ["t1.a: Title of t1.a", "t1.b: Title of t1.b", "late penalty"]
    assert [t["score"] for t in tests] == [50, 37.5, -8.75]
    assert tests[2]["status"] == "fail" and "3 days late" in tests[2]["message"]


def test_classroom_bonus_items_add_and_the_cap_takes_back() -> None:
    tests = render_classroom(bonus_capped())["tests"]
    assert [(t["name"].split(":")[0], t["score"]) for t in tests] == [
        ("t1.a", 90),
        ("bonus.a", 2.5),
        ("bonus.b", 2.5),
        ("bonus cap", -2),
    ]


def test_classroom_late_penalty_carries_the_floor_at_zero() -> None:
    res = result(task("task1", item("t1.a", 4, 50)), late=LatePenalty(30, 100.0, 50.0))
    tests = render_classroom(res)["tests"]
    assert tests[-1]["name"] == "late penalty" and tests[-1]["score"] == -4
    assert "cannot go below 0" in tests[-1]["message"]


def test_classroom_rounds_shares_so_that_cents_add_up() -> None:
    scores = [t["score"] for t in render_classroom(thirds())["tests"]]
    assert sorted(scores) == [3.33, 3.33, 3.34]


def test_classroom_names_an_unexplained_difference_instead_of_hiding_it() -> None:
    res = result(task("task1", item("t1.a", 10, 10)), score=7.0, max_score=10.0)
    tests = render_classroom(res)["tests"]
    assert tests[-1]["name"] == "score adjustment" and tests[-1]["score"] == -3


@pytest.mark.parametrize(
    ("make", "status", "failure"),
    [
        (full_marks, "pass", None),
        (bonus, "pass", None),  # 98.5 + 3.25 bonus reaches the maximum
        (partial_decimals, "fail", "Some tests failed."),
        (zero, "fail", "Some tests failed."),
        (errored, "error", "Some tests errored."),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_classroom_status_passes_only_at_full_marks(make: Any, status: str, failure: str | None) -> None:
    res = make()
    assert render_classroom(res)["status"] == status
    assert run_reporter("grader", classroom_env(res)).failed == failure


def test_classroom_error_row_says_what_failed_and_costs_nothing() -> None:
    tests = render_classroom(errored())["tests"]
    assert tests[-1] == {
        "name": "grader error",
        "status": "error",
        "score": 0,
        "message": "runner died",
        "test_code": "",
        "filename": "",
        "line_no": 0,
        "duration": 0,
    }


def test_classroom_refuses_a_zero_max_score() -> None:
    # The reporter would silently leave the runner out: "Points 0/0" reaches nobody.
    with pytest.raises(ValueError, match="max_score"):
        render_classroom(result(task("task1"), max_score=0.0))


@pytest.mark.parametrize("make", SCENARIOS, ids=lambda f: f.__name__)
def test_classroom_tests_follow_the_contract(make: Any) -> None:
    rendered = render_classroom(make())
    assert rendered["version"] == 1 and rendered["max_score"] > 0
    assert rendered["tests"]
    for test in rendered["tests"]:
        assert set(test) == {"name", "status", "score", "message", "test_code", "filename", "line_no", "duration"}
        assert test["status"] in {"pass", "fail", "error"}
        assert _is_number(test["score"])
        assert test["line_no"] == 0 and isinstance(test["duration"], int)


def test_classroom_messages_and_names_are_capped() -> None:
    long = item(
        "t1." + "x" * 300,
        1,
        10,
        feedback="feedback " * 500,
        failures=[CaseOutcome("test_allreduce[ws3]", Verdict.CRASH, "Traceback\n" * 300)],
        findings=[FINDING] * 40,
    )
    rendered = render_classroom(result(task("task1", *[long] * 60)))
    assert all(len(t["message"]) <= MESSAGE_LIMIT and len(t["name"]) <= NAME_LIMIT for t in rendered["tests"])
    assert all("\n" not in t["message"] for t in rendered["tests"])
    assert len(encode_result(rendered)) <= ENCODED_LIMIT < 128 * 1024


def test_classroom_pending_review_items_say_so() -> None:
    res = result(task("task1", item("t1.report", 0, 10, status=ItemStatus.PENDING_REVIEW, manual=True)))
    (test,) = render_classroom(res)["tests"]
    assert test["status"] == "fail" and "Pending instructor review" in test["message"]


def test_encode_result_is_one_line_of_standard_base64_that_round_trips() -> None:
    obj = render_classroom(partial_decimals())
    obj["tests"][0]["message"] = "Größe ≠ taille — 形状 🙂 +/ ?"
    encoded = encode_result(obj)
    assert re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", encoded), "standard alphabet, no newline"
    assert json.loads(base64.b64decode(encoded, validate=True).decode("utf-8")) == obj


def test_write_step_output_sets_result_for_the_reporter(tmp_path: Path) -> None:
    output = tmp_path / "github_output"
    output.write_text("earlier=1\n")
    encoded = encode_result(render_classroom(late()))
    assert write_step_output(encoded, {"GITHUB_OUTPUT": str(output)}) == output
    assert output.read_text() == f"earlier=1\nresult={encoded}\n"
    assert write_step_output(encoded, {}) is None


# --- Gradescope ----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", SCENARIOS, ids=lambda f: f.__name__)
def test_gradescope_has_one_test_per_item_and_the_grader_total(make: Any) -> None:
    res = make()
    out = render_gradescope(res)
    assert out["score"] == res.score
    assert [t["name"].split(":")[0] for t in out["tests"]] == [i.id for i in res.items()]
    assert [t["score"] for t in out["tests"]] == [i.score for i in res.items()]
    assert out["output_format"] == "md" and out["stdout_visibility"] == "hidden"
    assert {t["status"] for t in out["tests"]} <= {"passed", "failed"}


def test_gradescope_bonus_items_are_extra_points_not_points_available() -> None:
    out = render_gradescope(bonus())
    bonus_tests = [t for t in out["tests"] if t["name"].startswith("bonus.")]
    assert [(t["score"], t["max_score"]) for t in bonus_tests] == [(2.5, 0), (0.75, 0)]
    assert all("bonus" in t["tags"] and t["name"].endswith("(bonus)") for t in bonus_tests)
    assert sum(t["max_score"] for t in out["tests"]) == bonus().max_score


def test_gradescope_statuses_and_outputs() -> None:
    res = result(
        task(
            "task1",
            item("t1.full", 5, 5),
            item(
                "t1.part",
                2,
                5,
                cases=CaseTally(2, 5),
                failures=[CaseOutcome("test_broadcast[ws4-src1]", Verdict.HANG, "rank 3 hung")],
            ),
            item("t1.manual", 5, 5, status=ItemStatus.MANUAL, manual=True),
            item("t1.review", 0, 5, status=ItemStatus.PENDING_REVIEW, manual=True),
            item("t1.policy", 0, 5, findings=[FINDING]),
        )
    )
    tests = {t["name"].split(":")[0]: t for t in render_gradescope(res, visibility="after_due_date")["tests"]}
    assert {k: t["status"] for k, t in tests.items()} == {
        "t1.full": "passed",
        "t1.part": "failed",
        "t1.manual": "passed",
        "t1.review": "failed",
        "t1.policy": "failed",
    }
    assert "Pending instructor review" in tests["t1.review"]["output"]
    assert "Failing cases (3 of 5 cases failed):" in tests["t1.part"]["output"]
    assert "`test_broadcast[ws4-src1]`: hang: rank 3 hung\n- and 2 more" in tests["t1.part"]["output"]
    assert f"```python\n  {FINDING.source}\n  ```" in tests["t1.policy"]["output"]
    assert tests["t1.manual"]["tags"] == ["task1", "manual"]
    assert {t["visibility"] for t in tests.values()} == {"after_due_date"}


def test_gradescope_rejects_an_unknown_visibility() -> None:
    with pytest.raises(ValueError, match="visibility"):
        render_gradescope(full_marks(), visibility="students")


def test_gradescope_output_states_the_late_penalty() -> None:
    assert "3 days late: -10% (-8.75 points)" in render_gradescope(late())["output"]


def test_gradescope_execution_time_is_the_whole_run_not_the_sum_of_stages_and_total() -> None:
    stages = {"intake": 0.4, "static": 0.6, "matrix": 7.0, "score": 1.0}
    assert render_gradescope(full_marks())["execution_time"] == 0  # no timings recorded
    assert render_gradescope(result(*full_marks().tasks, timings=stages))["execution_time"] == 9
    with_total = result(*full_marks().tasks, timings={**stages, "total": 9.2})
    assert render_gradescope(with_total)["execution_time"] == 9


# --- summary.md ----------------------------------------------------------------------------------


def test_markdown_reports_every_item_failure_and_quoted_finding() -> None:
    res = GradeResult.load(FIXTURES / "graded.json")
    md = render_markdown(res)
    assert "**Score: 73.57/100 (+2.5 bonus, -8.18 late)**" in md
    for i in res.items():
        assert f"`{i.id}`" in md
    for failing in (c for i in res.items() for c in i.failures):
        assert f"`{failing.id}`: {failing.verdict.value}" in md
    for finding in res.findings:
        assert f"```python\n  {finding.source}\n  ```" in md
        assert f"`{finding.file}:{finding.line}:{finding.col}`" in md
    assert "1 day late: -10% (-8.18 points)" in md
    assert "- `uid`: not running as root" in md and "- `mount_namespace`:" in md
    assert "`rlimits`" not in md, "only layers that were off are listed"


def test_markdown_table_has_a_row_per_task_and_item_with_points_and_status() -> None:
    md = render_markdown(late())
    assert "| `t1.a` | Title of t1.a |  | 50/50 | PASS |" in md
    assert "| `t1.b` | Title of t1.b |  | 37.5/50 | PARTIAL |" in md
    assert "| **`task1`** | **Task task1** | | **87.5/100** | |" in md


def test_markdown_keeps_student_text_literal() -> None:
    hostile = item(
        "t1.a",
        0,
        5,
        title="A | B",
        failures=[CaseOutcome("test_x[ws2]", Verdict.CRASH, "<img src=x onerror=alert(1)> [link](http://x) | *")],
        findings=[Finding("forbidden-collective", "m", "src/c.py", 3, source="x = '```'  # fence")],
    )
    md = render_markdown(result(task("task1", hostile)))
    assert re.search(r"(?<!\\)<img", md) is None and "[link](" not in md
    assert "| `t1.a` | A \\| B |" in md
    assert "````python\n  x = '```'  # fence\n  ````" in md, "the fence outgrows backticks in the line"


def test_markdown_shows_the_grader_error_and_submission_problems() -> None:
    md = render_markdown(GradeResult.load(FIXTURES / "error.json"))
    assert "**The grader could not finish:** the matrix runner exited with status 137" in md
    assert "- src/collectives.py is missing" in md


def test_append_step_summary_appends_when_set_and_caps_size(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    assert append_step_summary("# one", env) == summary
    append_step_summary("# two\n", env)
    assert summary.read_text() == "# one\n# two\n"
    assert append_step_summary("# three", {}) is None
    huge = tmp_path / "huge.md"
    append_step_summary("é" * STEP_SUMMARY_LIMIT, {"GITHUB_STEP_SUMMARY": str(huge)})
    assert huge.stat().st_size <= STEP_SUMMARY_LIMIT
    assert huge.read_text(encoding="utf-8").endswith("see summary.md.*\n")


# --- terminal ------------------------------------------------------------------------------------


def test_terminal_ends_with_the_total_line() -> None:
    res = result(
        task("task1", item("t1.a", 50, 50), item("t1.b", 35, 50)),
        task("bonus", item("bonus.a", 2, 2.5, bonus=True), bonus=True),
        score=87.5,
    )
    assert render_terminal(res, color=False).splitlines()[-1] == "Score: 87.5/100 (+2 bonus)"


def test_terminal_table_is_aligned_plain_text() -> None:
    text = render_terminal(GradeResult.load(FIXTURES / "graded.json"), color=False)
    assert "\033" not in text
    lines = text.splitlines()
    table = lines[1 : lines.index("")]
    assert len(table) == 1 + 3 + 12, "a header, then each task followed by its items"
    points_end = table[0].index("Points") + len("Points")
    for row in table[1:]:
        assert row[points_end - 1] != " " and row[points_end : points_end + 2].strip() == "", row
    assert "  task1.reduce_scatter" in text and "PENDING REVIEW" in text


def test_terminal_colours_only_status_and_total_when_asked() -> None:
    text = render_terminal(late(), color=True)
    assert "\033[32mPASS\033[0m" in text and text.rstrip().endswith("\033[0m")
    assert re.sub(r"\033\[\d+m", "", text) == render_terminal(late(), color=False)


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("tty", "env", "expected"),
    [(True, {}, True), (False, {}, False), (True, {"NO_COLOR": "1"}, False), (True, {"NO_COLOR": ""}, True)],
)
def test_use_color_needs_a_terminal_and_no_NO_COLOR(tty: bool, env: dict[str, str], expected: bool) -> None:
    assert use_color(_Stream(tty), env) is expected


# --- outputs -------------------------------------------------------------------------------------

NAMES = {"results.json", "junit.xml", "gradescope.json", "classroom.json", "summary.md"}


def test_write_outputs_writes_every_file_and_nothing_else(tmp_path: Path) -> None:
    res = GradeResult.load(FIXTURES / "graded.json")
    out = tmp_path / "out"
    written = write_outputs(res, out, FIXTURES / "junit.xml")
    assert {p.name for p in written} == NAMES
    assert {p.name for p in out.iterdir()} == NAMES, "no temporary files left behind"
    assert (out / "results.json").read_text() == (FIXTURES / "graded.json").read_text()
    assert (out / "junit.xml").read_bytes() == (FIXTURES / "junit.xml").read_bytes()
    assert json.loads((out / "classroom.json").read_text()) == render_classroom(res)
    assert json.loads((out / "gradescope.json").read_text()) == render_gradescope(res)
    assert (out / "summary.md").read_text() == render_markdown(res)
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in written), "readable by other users"


def test_write_outputs_without_junit(tmp_path: Path) -> None:
    written = write_outputs(full_marks(), tmp_path, None)
    assert {p.name for p in written} == NAMES - {"junit.xml"}


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "results.json").write_text("previous run\n")

    def refuse(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_outputs(full_marks(), tmp_path, None)
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    assert (tmp_path / "results.json").read_text() == "previous run\n"


def test_render_serves_every_cli_format() -> None:
    res = late()
    outputs = {fmt: render(res, fmt, junit_src=FIXTURES / "junit.xml", color=False) for fmt in cli.FORMATS}
    assert GradeResult.from_dict(json.loads(outputs["json"])) == res
    assert outputs["junit"] == (FIXTURES / "junit.xml").read_text()
    assert json.loads(outputs["classroom"]) == render_classroom(res)
    assert json.loads(outputs["gradescope"]) == render_gradescope(res)
    assert outputs["markdown"] == render_markdown(res)
    assert outputs["terminal"] == render_terminal(res, color=False)


def test_text_from_any_bytes_renders_and_writes_in_every_format(tmp_path: Path) -> None:
    # A folder named b"old\xff" arrives as "old\udcff" (PEP 383); a JSON trace may hold a lone surrogate.
    res = full_marks()
    res.submission = SubmissionInfo("sub/old\udcff", {}, "sha256:00", problems=["old\udcff/x.md is a symlink\ud800"])
    res.tasks[0].items[0].feedback = "odd \udcff bytes"
    written = write_outputs(res, tmp_path, None)
    for path in written:
        text = path.read_bytes().decode("utf-8")  # strictly valid UTF-8
        assert "\\xff" in text or "\\udcff" in text, path.name
    for fmt in set(cli.FORMATS) - {"junit"}:
        render(res, fmt, color=False).encode("utf-8")
    summary = append_step_summary(render_markdown(res), {"GITHUB_STEP_SUMMARY": str(tmp_path / "step.md")})
    assert summary is not None and "old\\xff" in summary.read_bytes().decode("utf-8")


def test_render_refuses_junit_without_a_file_and_unknown_formats() -> None:
    with pytest.raises(ValueError, match="junit"):
        render(late(), "junit")
    with pytest.raises(ValueError, match="unknown format"):
        render(late(), "html")


def test_points_are_rounded_half_up_the_same_everywhere() -> None:
    assert [fmt_points(x) for x in (2.675, 0.125, 100.0, 87.5, -8.755, 1 / 3)] == [
        "2.68",
        "0.13",
        "100",
        "87.5",
        "-8.76",
        "0.33",
    ]
