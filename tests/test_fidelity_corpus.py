"""Grades that agree with the handout: realistic submissions, each graded end to end (issue 13).

Each entry in ``tests/corpus/fidelity/<name>/expected.json`` is a reference (``base``) with a
small edit (``patch``: ``[old, new]`` pairs per file; ``answers_patch`` for the written answers, or
``answers_file`` to replace them; ``replace``: a file of the base -> the entry's own file handed in
instead, as HW12's export is; ``files``: submission path -> a file of the entry that replaces it, as
the ``a5_*`` reports do; ``copies``: submission path -> a file of the repo (a starter) handed in beside
the work; ``rename``: a file of the base -> the name a student's tool saved it under),
the exact item scores its pack's default rubric must give it (``pack``,
``a9`` unless named; the ``a4_*`` entries are Assignment 4's, the ``hw12_*`` HW12's, the ``a5_*``
Assignment 5's), and ``why``: what the handout says about that submission.  Solutions written the
way the handout suggests earn full marks; side components, cheats, hard-coded world sizes, Task 1
bugs seen again in Task 2, hedged written answers and Assignment 4's classic mistakes each earn what
the handout says, and no more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fidelity import ENTRIES, FullGrades, spec

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ENTRIES)
def test_fidelity_entry(name: str, tmp_path: Path, full_grades: FullGrades) -> None:
    expected = spec(name)
    result = full_grades.get(name, tmp_path)
    items = {item.id: item.score for item in result.items()}
    differ = {k: (want, items.get(k)) for k, want in expected["items"].items() if abs(items.get(k, -1) - want) > 0.005}
    failing = [f"{c.id}: {c.verdict.value}: {c.message[:300]}" for c in result.cases if c.verdict.value != "pass"]
    why = "\n".join([expected["why"], "cases not passed:", *failing[:30]])  # a mismatch says which case and why
    assert differ == {}, f"{name}: (expected, got) {differ}\n{why}"
    assert set(items) == set(expected["items"])
