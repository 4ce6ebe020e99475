"""The fidelity corpus (``tests/corpus/fidelity``), shared by the tests that grade it: how an entry's
submission is built, and each entry's full-sandbox grade, graded once per test session.

``test_fidelity_corpus`` checks every entry's full-mode item scores against its ``expected.json``;
the runtime tests (issue 21) check that the portable and rootless runtimes give every case the same
verdict and every item the same score.  Both read the same full-mode grade (:class:`FullGrades`,
the ``full_grades`` fixture of ``tests/conftest.py``), so no entry is graded in full mode twice.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.pack import load_pack
from grader.pipeline import grade
from grader.results import GradeResult

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus" / "fidelity"
ENTRIES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.json").is_file())
ANSWERS = "written_answers_task1.md"


def spec(name: str) -> dict[str, Any]:
    """An entry's ``expected.json``."""
    data: dict[str, Any] = json.loads((CORPUS / name / "expected.json").read_text())
    return data


def pack_of(name: str) -> str:
    return str(spec(name).get("pack", "a9"))


def entries(*packs: str) -> list[str]:
    """The entries of these packs, in name order."""
    return [name for name in ENTRIES if pack_of(name) in packs]


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
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(entry / source, dest / name)
    for name, source in spec.get("copies", {}).items():  # a file of the repo (a starter) handed in beside the work
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / source, dest / name)
    for name, saved_as in spec.get("rename", {}).items():  # a hand-in under the name Colab gave it
        (dest / name).rename(dest / saved_as)
    return dest


@dataclass(frozen=True)
class Record:
    """What a grading decided, as the runtimes must agree on it: every case's verdict, every item's score."""

    verdicts: dict[str, str]
    items: dict[str, float]

    @classmethod
    def of(cls, result: GradeResult) -> Record:
        return cls({c.id: c.verdict.value for c in result.cases}, {i.id: i.score for i in result.items()})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        return cls(dict(data["verdicts"]), {k: float(v) for k, v in data["items"].items()})

    def differences(self, other: Record) -> dict[str, tuple[object, object]]:
        """Case ids and item ids whose verdict or score differ (``(self's, other's)``); {} when equal."""
        out: dict[str, tuple[object, object]] = {}
        for mine, theirs in ((self.verdicts, other.verdicts), (self.items, other.items)):
            for key in mine.keys() | theirs.keys():
                if mine.get(key) != theirs.get(key):
                    out[key] = (mine.get(key), theirs.get(key))
        return out


def grade_entry(name: str, dest: Path, isolation: str = "auto") -> GradeResult:
    """Build entry ``name`` at ``dest`` and grade it under its pack's default rubric."""
    entry_spec = spec(name)
    submission = build(CORPUS / name, entry_spec, dest)
    return grade(submission, load_pack(pack_of(name)).rubric, isolation=isolation)


@dataclass
class FullGrades:
    """Each entry's full-mode grading, done at most once per test session (by whichever test asks first)."""

    results: dict[str, GradeResult] = field(default_factory=dict)

    def get(self, name: str, scratch: Path) -> GradeResult:
        if name not in self.results:
            self.results[name] = grade_entry(name, scratch / f"full-{name}")
        return self.results[name]
