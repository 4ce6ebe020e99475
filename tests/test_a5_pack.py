"""Assignment 5 on the engine (issue 26): a Markdown report's snippets, run in the grader's ranks.

The reference report earns every automatic point (Q1 and Q7's explanation wait for an instructor); a report whose
pipeline_communicate deadlocks is a hang that names each stage's waiting call, within seconds; a
stage that runs the whole model fails whatever its numbers, since it holds only its own layers'
weights; and every output format carries the per-question placement notes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.cli import main
from grader.pack import load_pack
from grader.pipeline import grade
from grader.results import ItemStatus, Verdict

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reference" / "a5"
pytestmark = pytest.mark.slow


def test_the_reference_report_earns_every_automatic_point(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["grade", str(REFERENCE), "--pack", "a5", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["score"] == 88  # Q1's 10 points and Q7's explanation's 2 wait for an instructor
    assert all(case["verdict"] == "pass" for case in result["cases"]), result["cases"]
    items = {item["id"]: item for task in result["tasks"] for item in task["items"]}
    assert items["q1_seeding.explanation"]["status"] == ItemStatus.PENDING_REVIEW.value
    assert items["q7_communicate.explanation"]["status"] == ItemStatus.PENDING_REVIEW.value
    assert sum("placed:" in note for note in result["notes"]) == 9
    for name in ("summary.md", "gradescope.json", "classroom.json", "junit.xml"):
        assert (out / name).is_file()
    assert "Q8 placed" in (out / "summary.md").read_text()


BROKEN = {
    # Q7: stage 1 never sends a gradient back, so stage 0 waits for it forever
    "    elif operation == 'send_backward':\n        if pp_is_first_stage: return\n": (
        "    elif operation == 'send_backward':\n        if pp_rank <= 1: return\n"
    ),
    # Q8: every stage runs the whole model on whatever it has
    "    output = model_stage(stage_input)\n": "    output = model(stage_input)\n",
    # Q6: every stage holds a dataloader (whatever a rank says of itself, only what it computes counts)
    'if device_mesh["pp"].get_local_rank() == 0:\n    train_dl_iterator = iter(input)\n': (
        'if device_mesh["pp"].size() > 0:\n    train_dl_iterator = iter(input)\n'
    ),
}


def test_a_deadlock_is_a_hang_naming_each_stage_the_whole_model_on_a_stage_and_data_read_past_the_first_fail(
    tmp_path: Path,
) -> None:
    submission = tmp_path / "report"
    shutil.copytree(REFERENCE, submission)
    text = (submission / "report.md").read_text()
    for old, new in BROKEN.items():
        assert text.count(old) == 1
        text = text.replace(old, new)
    (submission / "report.md").write_text(text)
    result = grade(submission, load_pack("a5").rubric)
    cases = {case.id: case for case in result.cases}
    hung = cases["test_communicate[pp2-l4-b8-m2]"]
    assert hung.verdict is Verdict.HANG
    assert hung.message.startswith("likely deadlock"), hung.message  # found in seconds, not at the time limit
    assert "rank 0 waits in" in hung.message and "src=1" in hung.message
    whole = cases["test_pipelined[pp2-l4-b8-m2]"]
    assert whole.verdict is Verdict.WRONG and "NaN" in whole.message
    # stages 1 and 2 compute from the NaN data they read, and their received input gets no gradient
    assert cases["test_dataloader[pp3-l6-b12-m2]"].verdict in (Verdict.WRONG, Verdict.CRASH)
    # each operation alone: only send_backward's condition is wrong, and only its quarter of Q7 is lost
    conditions = {name: case.verdict for name, case in cases.items() if name.startswith("test_condition[")}
    assert {name for name, verdict in conditions.items() if verdict is not Verdict.PASS} == {
        f"test_condition[send_backward-pp{n}]" for n in (2, 3, 4)
    }
    assert "stage 1 of 2 returned without communicating" in cases["test_condition[send_backward-pp2]"].message
    items = {item.id: item.score for item in result.items()}
    assert items["q7_communicate.code"] == 9 and items["q8_pipelined.code"] == 0 and items["q6_dataloader.code"] == 0
    assert items["q4_baseline.code"] == 12 and items["q10_gradient_check.code"] == 6  # charged once


def test_a_q7_operation_is_judged_from_what_each_stage_posted_alone() -> None:
    """recv_forward at pp=3: the first stage posts nothing and returns None, every other stage one
    irecv from the previous stage, returned; anything else names the stage and what it did."""
    import torch

    from grader.pack import Prepared
    from grader.packs.a5.bodies import IRECV, ISEND, RETURNED_NONE, RETURNED_POSTED
    from grader.packs.a5.judge import judge

    case = next(c for c in load_pack("a5").cases_of("test_condition") if c.id == "recv_forward-pp3")
    shape = case.params["shapes"]

    def reply(*ops: tuple[int, int], returned: int) -> dict[str, torch.Tensor]:
        flat = [len(ops)]
        for kind, peer in ops:
            flat += [kind, peer, 0, len(shape), *shape]
        return {"posted": torch.tensor(flat), "returned": torch.tensor([returned])}

    def verdict(*replies: dict[str, torch.Tensor]) -> tuple[str, str] | None:
        return judge(case, Prepared([], []), list(replies), None)

    first, second, third = (
        reply(returned=RETURNED_NONE),
        reply((IRECV, 0), returned=RETURNED_POSTED),
        reply((IRECV, 1), returned=RETURNED_POSTED),
    )
    assert verdict(first, second, third) is None
    assert verdict(reply((IRECV, -1), returned=RETURNED_POSTED), second, third) == (
        "wrong",
        "pipeline_communicate('recv_forward') on stage 0 of 3 posted an operation with stage -1: "
        "the first stage has no such neighbour",
    )
    assert verdict(first, reply(returned=RETURNED_NONE), third) == (
        "wrong",
        "pipeline_communicate('recv_forward') on stage 1 of 3 returned without communicating: "
        "it must receive from stage 0",
    )
    forged = {"posted": torch.tensor([10**12, IRECV, 0, 0, 10**12]), "returned": torch.tensor([RETURNED_POSTED])}
    assert verdict(first, forged, third) == (  # an untrusted count is not believed: no endless loop
        "wrong",
        "pipeline_communicate('recv_forward') on stage 1 of 3 posted 5 operations: it must receive from stage 0, once",
    )
    assert verdict(first, second, reply((ISEND, 1), returned=RETURNED_NONE)) == (
        "wrong",
        "pipeline_communicate('recv_forward') on stage 2 of 3 posted an isend to stage 1: it must receive from stage 1",
    )


def test_a_forged_count_in_a_distribute_layers_reply_is_not_believed() -> None:
    """A reply is untrusted: a stage that claims 10**12 layers is judged on the numbers it sent."""
    import torch

    from grader.pack import Prepared
    from grader.packs.a5.judge import judge

    case = next(c for c in load_pack("a5").cases_of("test_distribute_layers") if c.id == "even")
    verdict = judge(case, Prepared([], []), [{"layers": torch.tensor([10**12, 0, 1])}], None)
    assert verdict is not None and verdict[0] == "wrong", verdict


def test_a_rank_compiles_a_program_once_runs_it_afresh_in_every_case_and_drops_it_for_the_next() -> None:
    """Every case of a question sends a rank the same program: each statement is compiled once, and
    each case's modules are its own (a class attribute a case changed is the starter's again in the
    next).  A program of another question, which holds the grader's answer to this one, is let go as
    soon as this question's program is read, before any of its student code runs."""
    import gc
    import weakref

    from grader.packs.a5 import bodies
    from grader.packs.a5.splice import program

    text = (REFERENCE / "report.md").read_text()
    report = str(REFERENCE / "report.md")
    q5 = bodies._program(program(text, "Q5")["program"], report)
    assert bodies._program(program(text, "Q5")["program"], report) is q5
    first, second = (bodies._module("pipeline_parallel", q5, "pipeline") for _ in range(2))
    first.PipelineStage.changed_by_a_case = True
    assert first.PipelineStage is not second.PipelineStage
    assert not hasattr(second.PipelineStage, "changed_by_a_case")
    assert first.distribute_layers.__code__ is second.distribute_layers.__code__  # compiled once
    assert second.distribute_layers.__code__.co_filename == report  # the student's Q5 answer, named as theirs

    q7 = weakref.ref(bodies._program(program(text, "Q7")["program"], report))  # the grader's Q8 loop is in it
    del q5, first, second
    bodies._program(program(text, "Q8")["program"], report)
    gc.collect()
    assert q7() is None


def test_a_rank_holds_no_session_module_and_no_answer_of_the_grader() -> None:
    """The zygote preloads the rank side (the bodies and the statements' decoder) and nothing of the
    session's: no reader, splicer, catalog, baseline or judge, and no line of the grader's answers
    (``solution.md``): a case is sent its program, with the graded question's answer left out."""
    import subprocess
    import sys

    from grader.sandbox import isolation

    answers = (ROOT / "grader" / "packs" / "a5" / "solution.md").read_text()
    marker = "stage_input = next(train_dl_iterator).to(device_id)"  # a line of the grader's Q8 answer
    assert marker in answers
    code = (
        "import gc, json, sys\n"
        "from grader.runtimes import RankSide\nfrom grader.runtimes.torchdist import zygote\n"
        "zygote.preload(RankSide('grader.packs.a5.bodies', 'torchdist'))\n"
        "gc.unfreeze()\n"  # the zygote froze its objects, which hides them from gc.get_objects: see every one
        "def texts(o):\n"  # the strings a container or an object's attributes hold
        "    try:\n"
        "        o = o if isinstance(o, (dict, list, tuple, set)) else object.__getattribute__(o, '__dict__')\n"
        "    except (AttributeError, TypeError):\n"
        "        return []\n"
        "    values = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple, set)) else ()\n"
        "    return [v for v in values if isinstance(v, str)]\n"
        f"m = bytes.fromhex({marker.encode().hex()!r}).decode()\n"  # not the line itself, in this code
        "held = any(m in s and s is not m for o in gc.get_objects() for s in texts(o))\n"
        "print(json.dumps([held, sorted(m for m in sys.modules if m.startswith('grader.packs.a5'))]))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd="/")
    held, loaded = json.loads(done.stdout)
    assert set(loaded) == {"grader.packs.a5", "grader.packs.a5.bodies", "grader.packs.a5.tree"}
    assert not held, "a line of the grader's answers is in a rank's memory"
    hidden = isolation.default_hide()  # nor on a rank's disk: the package is covered by an empty folder
    assert any((ROOT / "grader" / "packs" / "a5" / "solution.md").resolve().is_relative_to(h) for h in hidden)


def test_the_report_form_earns_nothing_and_says_why_per_question(tmp_path: Path) -> None:
    result = grade(ROOT / "student_template" / "a5", load_pack("a5").rubric)
    assert result.score == 0
    assert sum("NOT placed" in note for note in result.notes) >= 7
