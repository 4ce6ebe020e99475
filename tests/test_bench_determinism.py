"""``scripts/bench-determinism.py`` says a tree moved when any case's verdict differs between its
gradings, a case one grading lacks included, and says nothing of a tree whose gradings agree."""

from __future__ import annotations

import runpy
from pathlib import Path

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "bench-determinism.py"))
moved = BENCH["moved"]


def test_a_verdict_that_differs_between_gradings_is_reported() -> None:
    first = ({"a": "pass", "b": "crash"}, "1.0")
    second = ({"a": "pass", "b": "wrong"}, "1.0")
    assert moved([first, second, first]) == ["b"]


def test_a_case_missing_from_one_grading_has_moved() -> None:
    assert moved([({"a": "pass", "b": "pass"}, "2.0"), ({"a": "pass"}, "1.0")]) == ["b"]


def test_gradings_that_agree_move_nothing() -> None:
    same = ({"a": "hang", "b": "pass"}, "1.0")
    assert moved([same, ({"a": "hang", "b": "pass"}, "1.0"), same]) == []


def test_every_fidelity_entry_and_bundled_tree_is_a_tree_to_grade(tmp_path: Path) -> None:
    found = BENCH["trees"](tmp_path)
    from tests.fidelity import ENTRIES

    assert set(ENTRIES) <= set(found)
    assert {"student_template/hw12", "reference/a9", "reference/a9-naive"} <= set(found)
    assert found["reference/a9-naive"][1] == "a9" and found["student_template/hw12"][1] == "hw12"
    assert all(tree.is_dir() for tree, _ in found.values())
