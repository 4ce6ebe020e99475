"""The guide "Write your own pack" (docs/packs/write-your-own.md) is true: the tutorial pack it builds
(docs/tutorial/ringpack) grades as the page says, through the commands the page shows.

The page's code is included from the pack's files (MyST ``literalinclude``), and its commands from
``docs/tutorial/grade.sh``, which this module runs once: the reference scores in full, the template 0.
Every include must name a non-empty part of a real file, so a renamed function or a moved marker fails
here as well as in the site's build.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "tutorial"
RINGPACK = TUTORIAL / "ringpack"
GUIDE = REPO / "docs" / "packs" / "write-your-own.md"

INCLUDE = re.compile(r"^```\{literalinclude\} (?P<path>\S+)\n(?P<options>(?::[\w-]+:.*\n)*)", re.M)
OPTION = re.compile(r"^:([\w-]+):\s*(.*)$", re.M)
FENCE = re.compile(r"^```(?P<lang>[^\n`]*)\n(?P<body>.*?)^```$", re.M | re.S)


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def scores(result: dict) -> dict[str, float]:
    return {item["id"]: item["score"] for task in result["tasks"] for item in task["items"]}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[str, Path]:
    """docs/tutorial/grade.sh, run as the guide runs it: its stdout, and the folder of its outputs."""
    out = tmp_path_factory.mktemp("ringpack")
    done = subprocess.run(["bash", str(TUTORIAL / "grade.sh"), str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout, out


def test_the_reference_scores_in_full(graded):
    result = results(graded[1] / "reference")
    assert (result["assignment"], result["score"], result["max_score"]) == ("ring", 30, 30)
    assert scores(result) == {"ring.send_right": 10, "ring.reduce_scatter": 10, "ring.all_gather": 10}


def test_the_template_scores_zero_each_case_not_implemented(graded):
    result = results(graded[1] / "template")
    assert (result["score"], result["max_score"]) == (0, 30)
    failures = [f for task in result["tasks"] for item in task["items"] for f in item["failures"]]
    assert len(failures) == 6 and {f["verdict"] for f in failures} == {"not_implemented"}


def test_every_output_the_guide_names_is_written(graded):
    written = {path.name for path in (graded[1] / "reference").iterdir()}
    named = set(re.findall(r"`(\w+\.(?:json|xml|md))`", GUIDE.read_text().split("## 9. Grade it")[1]))
    assert named and named <= written, named - written


def test_the_output_the_guide_shows_is_what_the_grading_printed(graded):
    (shown,) = [m["body"] for m in FENCE.finditer(GUIDE.read_text()) if m["lang"].strip() == "text"]
    printed = [line.rstrip() for line in graded[0].splitlines()]
    wanted = [line.rstrip() for line in shown.splitlines()]
    assert any(printed[i : i + len(wanted)] == wanted for i in range(len(printed))), graded[0]


def test_a_wrong_ring_send_right_is_charged_once(tmp_path):
    """Sending left instead of right is wrong at world size 3 only; the two functions built on it run
    with the grader's own ring_send_right once it failed, and keep every point (the guide, step 4)."""
    reference = (RINGPACK / "reference" / "ring.py").read_text()
    head, cut, tail = reference.partition("def ring_reduce_scatter")
    swapped = re.sub(r"\(rank ([+-]) 1\)", lambda m: f"(rank {'-' if m[1] == '+' else '+'} 1)", head)
    assert swapped != head
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ring.py").write_text(swapped + cut + tail)
    done = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(tmp_path / "sub"), "--rubric", str(RINGPACK / "rubric.yaml"),
         "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(TUTORIAL)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert scores(results(tmp_path / "out")) == {"ring.send_right": 5, "ring.reduce_scatter": 10, "ring.all_gather": 10}


def includes() -> list[tuple[Path, dict[str, str]]]:
    found = [
        ((GUIDE.parent / m["path"]).resolve(), {k: v.strip().strip('"') for k, v in OPTION.findall(m["options"])})
        for m in INCLUDE.finditer(GUIDE.read_text())
    ]
    assert len(found) >= 10  # the page is made of them
    return found


@pytest.mark.parametrize("path, options", includes(), ids=lambda v: v.name if isinstance(v, Path) else None)
def test_every_include_of_the_guide_is_a_non_empty_part_of_a_real_file(path, options):
    assert path.is_relative_to(TUTORIAL) and path.is_file(), path
    text = path.read_text()
    if "pyobject" in options:
        found = [
            ast.get_source_segment(text, node)
            for node in ast.parse(text).body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == options["pyobject"]
        ]
        assert found and found[0].strip(), f"{path.name} defines no {options['pyobject']}"
        return
    start, end = options["start-after"], options["end-before"]
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if start in line)
    last = next(i for i, line in enumerate(lines) if i > first and end in line)
    assert any(line.strip() for line in lines[first + 1 : last]), f"{path.name}: nothing between {start!r} and {end!r}"


def test_the_guide_runs_no_command_but_those_of_the_script_the_test_runs():
    """No shell block is written into the page: its commands are included from grade.sh, run above."""
    shell = [
        m["lang"] for m in FENCE.finditer(GUIDE.read_text()) if m["lang"].strip() in ("bash", "sh", "console", "shell")
    ]
    assert not shell
    assert (
        TUTORIAL / "grade.sh",
        {"language": "bash", "start-after": "# [grade]", "end-before": "# [/grade]"},
    ) in includes()


def test_every_family_quotes_its_handout_sentence_word_for_word(monkeypatch):
    monkeypatch.syspath_prepend(str(TUTORIAL))
    from ringpack import catalog

    from grader.pack import load_pack

    pack = load_pack("ringpack.pack:PACK")
    handout = (RINGPACK / "handout.md").read_text().splitlines()
    assert all(sentence in handout for _kind, sentence in catalog.FAMILIES.values())
    tests = {
        node.name
        for node in ast.parse((RINGPACK / "test_ring.py").read_text()).body
        if isinstance(node, ast.FunctionDef)
    }
    assert {case.test for case in pack.cases()} == set(catalog.FAMILIES) == tests


def test_the_rank_side_imports_nothing_of_the_session_side():
    """Trust rule 1 of the guide: bodies.py (what a rank imports) never imports the catalog, the expected
    values or the pack object."""
    tree = ast.parse((RINGPACK / "bodies.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    ours = {name for name in imported if name and name.startswith("ringpack")}
    assert ours == {"ringpack.reference.ring"}, ours
