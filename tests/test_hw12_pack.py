"""HW12 on the engine (issue 25): a notebook hand-in on the threads runtime.

The notebook is read, never run; the definitions the handout names run in sandboxed rank processes
with the grader's own copies of the handout's given code.  The reference notebook earns every point
in every output format; the fidelity corpus (``tests/corpus/fidelity/hw12_*``) holds the realistic
wrong notebooks and their exact scores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from grader.cli import main
from grader.pack import load_pack
from grader.results import schema_path

ROOT = Path(__file__).resolve().parent.parent
PACK = load_pack("hw12")


def test_every_case_id_names_its_handout_part_and_an_item_of_the_rubric() -> None:
    from grader.rubric import load_rubric

    rubric = load_rubric(PACK.rubric)
    parts = {"part1", "part2", "part3_1", "part3_2", "part3_3"}
    for case in PACK.cases():
        part = next(p for p in sorted(parts, key=len, reverse=True) if case.test.startswith(f"test_{p}_"))
        items = [item.id for item in rubric.items() if item.id.startswith(f"{part}.")]
        assert items, case.name
    assert {c.world_size for c in PACK.cases() if c.test.startswith("test_part1")} == set(range(1, 9))
    assert sum(task.points for task in rubric.tasks) == 6.5


def test_a_rank_of_hw12_holds_no_catalog_and_no_expected_value() -> None:
    code = (
        "import json, sys\n"
        "from grader.runtimes import RankSide\nfrom grader.runtimes.torchdist import zygote\n"
        f"zygote.preload({PACK.rank_side!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('grader.packs.hw12'))))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd="/")
    loaded = set(json.loads(done.stdout))
    assert loaded == {f"grader.packs.hw12{m}" for m in ("", ".bodies", ".context", ".given", ".names", ".trusted")}


def test_a_cases_arrival_orders_come_from_the_grading_secret_not_from_its_name() -> None:
    """The seed of a case's arrival orders (the one number a rank is sent besides its tensors) is the
    same for the same case and secret, and another for another secret: a student who has read the
    catalog cannot tell which orders come."""
    from grader.packs.hw12 import expected

    def seed(case_name: str, salt: str) -> int:
        case = next(c for c in PACK.cases() if c.name == case_name)
        return int(expected.prepare(case, salt).inputs[0]["seed"])

    gather, reduce = "test_part1_all_gather[ws5-float32-3x4]", "test_part1_all_reduce[ws5-sum-float32-3x4]"
    assert seed(gather, "one secret") == seed(gather, "one secret")
    assert len({seed(gather, f"secret {i}") for i in range(20)}) == 20
    assert seed(gather, "one secret") != seed(reduce, "one secret")


def test_a_rank_never_runs_the_handouts_plotting_imports_installed_or_not(tmp_path: Path) -> None:
    """The reference notebook imports matplotlib and scikit-learn for its driver code: a rank runs neither
    import, so a grade is the same on a machine that has them (and no rank process pays for them)."""
    from types import SimpleNamespace

    from grader.packs.hw12 import bodies

    (tmp_path / "hw12.ipynb").write_text((ROOT / "reference" / "hw12" / "hw12.ipynb").read_text())
    space, _ = bodies.namespace(SimpleNamespace(sandbox=str(tmp_path)))
    assert "plt" not in space and "make_moons" not in space
    assert {"np", "torch", "nn", "threading", "copy"} <= set(space)


@pytest.mark.slow
def test_the_reference_notebook_earns_every_point_in_every_format(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["grade", str(ROOT / "reference" / "hw12"), "--pack", "hw12", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    jsonschema.validate(results, json.loads(schema_path().read_text()))
    assert (results["score"], results["max_score"]) == (6.5, 6.5)
    assert all(case["verdict"] == "pass" for case in results["cases"]) and len(results["cases"]) == len(PACK.cases())
    assert json.loads((out / "gradescope.json").read_text())["score"] == 6.5
    classroom = json.loads((out / "classroom.json").read_text())
    assert sum(test["score"] for test in classroom["tests"]) == pytest.approx(6.5)
    assert "test_part3_3_tp_training[ws8-m1]" in (out / "junit.xml").read_text()
    assert "**Score: 6.5/6.5**" in (out / "summary.md").read_text()
    # rescoring the finished grading under the same rubric runs no student code and changes nothing
    assert main(["rescore", str(out), "--rubric", str(PACK.rubric)]) == 0
    assert json.loads((out / "results.json").read_text())["score"] == 6.5
