"""Grades that agree with the handout: realistic submissions, each graded end to end (issue 13).

Each entry in ``tests/corpus/fidelity/<name>/expected.json`` is a reference (``base``) with a
small edit (``patch``: ``[old, new]`` pairs per file; ``answers_patch`` for the written answers, or
``answers_file`` to replace them; ``replace``: a file of the base -> the entry's own file handed in
instead, as HW12's export is; ``files``: submission path -> a file of the entry that replaces it, as
the ``a5_*`` reports do), the exact item scores its pack's default rubric must give it (``pack``,
``a9`` unless named; the ``a4_*`` entries are Assignment 4's, the ``hw12_*`` HW12's, the ``a5_*``
Assignment 5's), and ``why``: what the handout says about that submission.  Solutions written the
way the handout suggests earn full marks; side components, cheats, hard-coded world sizes, Task 1
bugs seen again in Task 2, hedged written answers and Assignment 4's classic mistakes each earn what
the handout says, and no more.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from grader.pack import load_pack
from grader.pipeline import grade

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus" / "fidelity"
ENTRIES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.json").is_file())
ANSWERS = "written_answers_task1.md"
pytestmark = pytest.mark.slow


def build(entry: Path, spec: dict[str, Any], dest: Path) -> Path:
    """The submission an entry stands for: its base tree with the entry's edits applied."""
    shutil.copytree(REPO / spec["base"], dest)
    edits: dict[str, list[list[str]]] = dict(spec.get("patch", {}))
    if "answers_patch" in spec:
        edits[ANSWERS] = spec["answers_patch"]
    for name, pairs in edits.items():
        text = (dest / name).read_text()
        for old, new in pairs:
            assert text.count(old) == 1, f"{entry.name}: {name} has {text.count(old)} copies of {old!r}"
            text = text.replace(old, new)
        (dest / name).write_text(text)
    if "answers_file" in spec:
        shutil.copy(entry / spec["answers_file"], dest / ANSWERS)
    for name, instead in spec.get("replace", {}).items():  # a file handed in another form (HW12's export)
        (dest / name).unlink()
        shutil.copy(entry / instead, dest / instead)
    for name, source in spec.get("files", {}).items():
        shutil.copy(entry / source, dest / name)
    return dest


@pytest.mark.parametrize("name", ENTRIES)
def test_fidelity_entry(name: str, tmp_path: Path) -> None:
    entry = CORPUS / name
    spec = json.loads((entry / "expected.json").read_text())
    rubric = load_pack(spec.get("pack", "a9")).rubric
    result = grade(build(entry, spec, tmp_path / "submission"), rubric)
    items = {item.id: item.score for item in result.items()}
    differ = {k: (want, items.get(k)) for k, want in spec["items"].items() if abs(items.get(k, -1) - want) > 0.005}
    assert differ == {}, f"{name}: (expected, got) {differ}\n{spec['why']}"
    assert set(items) == set(spec["items"])
