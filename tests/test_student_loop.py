"""A loop a student can debug with (issue 21): ``grader grade -k EXPR`` runs only the matching visible
cases and says the score is partial; ``grader repro CASE_ID`` writes a script that reproduces one
visible case with the course's own harness and says where the result differs; hidden cases stay hidden."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli import main
from grader.errors import UserError
from grader.pipeline import grade
from grader.repro import script
from grader.rubric import load_rubric
from grader.selection import select
from tests.test_hangs import body_start

REPO = Path(__file__).resolve().parents[1]
A9 = load_rubric(None)


def hidden_rubric(tmp_path: Path) -> Path:
    text = (REPO / "rubrics" / "a9.yaml").read_text()
    assert text.count("case_ids: visible") == 1
    path = tmp_path / "hidden.yaml"
    path.write_text(text.replace("case_ids: visible", "case_ids: hidden"))
    return path


def test_k_uses_pytests_grammar_over_the_case_ids() -> None:
    chosen = select(A9, "allreduce and ws4 and not noncontig")
    assert chosen and all("allreduce" in c and "ws4" in c and "noncontig" not in c for c in chosen)
    assert set(select(A9, "test_broadcast[ws2-src1-float32-4x5] or ulysses")) == {
        "test_broadcast[ws2-src1-float32-4x5]",
        *(c for c in A9.case_ids if "ulysses" in c),
    }


@pytest.mark.parametrize(("expression", "why"), [("allreduce and", "-k 'allreduce and'"), ("nosuchcase", "matches no")])
def test_k_refuses_a_bad_expression_or_one_that_matches_nothing(expression: str, why: str) -> None:
    with pytest.raises(UserError, match=re.escape(why)):
        select(A9, expression)


def test_k_and_repro_refuse_a_rubric_that_hides_case_ids(tmp_path: Path) -> None:
    rubric = load_rubric(hidden_rubric(tmp_path))
    with pytest.raises(UserError, match="hides case ids"):
        select(rubric, "allreduce")
    with pytest.raises(UserError, match="inputs stay secret"):
        script(rubric, "test_allreduce[ws3-float64-7]")


def test_repro_names_the_nearest_ids_for_a_typo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["repro", "test_allreduce[ws3-float64-8]"]) == 1
    assert "did you mean test_allreduce[ws3-float64-7]" in capsys.readouterr().err


def test_the_repro_script_is_the_courses_harness_with_the_cases_inputs() -> None:
    text = script(A9, "test_allreduce[ws3-float64-7]")
    compile(text, "repro.py", "exec")  # a valid script
    for shape in (
        "torch.multiprocessing",
        "mp.spawn(",
        "from src.dist_init import init_process_group",
        "WORLD_SIZE = 3",
    ):
        assert shape in text


@pytest.mark.slow
def test_the_repro_script_says_where_a_result_differs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "reference" / "a9", repo)
    out = repo / "repro.py"
    assert main(["repro", "test_allreduce[ws2-float64-7]", "--out", str(out)]) == 0
    ok = subprocess.run([sys.executable, str(out)], cwd=repo, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.count("matches the expected result") == 2, ok.stdout + ok.stderr
    collectives = repo / "src" / "collectives.py"
    broken = body_start("my_allreduce", "    if dist.get_rank() == 1:\n        tensor[2] += 0.5\n")
    collectives.write_text(collectives.read_text().replace(*broken))
    bad = subprocess.run([sys.executable, str(out)], cwd=repo, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0
    assert re.search(r"rank \d: the result differs: .* first at index \(2,\)", bad.stdout), bad.stdout + bad.stderr


@pytest.mark.slow
def test_grade_k_runs_only_the_matching_cases_and_says_the_score_is_partial() -> None:
    result = grade(REPO / "reference" / "a9", keyword="allreduce and ws2 and not noncontig and not inplace")
    ran = {c.id for c in result.cases if c.verdict.value != "not_run"}
    assert ran == set(select(A9, "allreduce and ws2 and not noncontig and not inplace"))
    assert all(c.verdict.value == "pass" for c in result.cases if c.id in ran)
    assert result.notes[0].startswith(f"Partial score: {len(ran)} of {len(A9.case_ids)} cases ran")
    assert result.score < 100
