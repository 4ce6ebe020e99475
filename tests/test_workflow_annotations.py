"""GitHub Classroom (issue 21): findings and the lines hangs and crashes were at become annotations on the
student's files, written from results.json; every student-controlled string is escaped so that it cannot
become a workflow command (``::add-mask::``, ``::stop-commands::``, ``::set-output``) or a fake row of
the job summary's tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from grader.cli import main
from grader.render.markdown import escape
from grader.render.workflow import MAX_ANNOTATIONS, commands_for, escape_data, escape_property, workflow_safe

FILES = {"src/collectives.py": "sha256:0", "src/transformer.py": "sha256:1"}


def result(findings: Sequence[Any] = (), cases: Sequence[Any] = ()) -> dict[str, Any]:
    return {"submission": {"files": FILES}, "findings": list(findings), "cases": list(cases)}


def test_a_finding_and_a_hang_become_errors_on_the_students_lines() -> None:
    finding = {
        "rule": "forbidden-collective",
        "message": "dist.all_reduce is forbidden here",
        "file": "src/collectives.py",
        "line": 17,
    }
    hang = {
        "id": "test_allreduce[ws4-float32-7]",
        "verdict": "hang",
        "message": "timed out after 2.0 s: rank 1 waits in recv(src=0) at collectives.py:42 in my_allreduce (0% CPU)",
    }
    passed = {"id": "test_broadcast[ws2]", "verdict": "pass", "message": ""}
    assert commands_for(result([finding], [hang, passed])) == [
        "::error file=src/collectives.py,line=17,title=policy%3A forbidden-collective::"
        "dist.all_reduce is forbidden here",
        "::error file=src/collectives.py,line=42,title=hang in test_allreduce[ws4-float32-7]::"
        "timed out after 2.0 s: rank 1 waits in recv(src=0) at collectives.py:42 in my_allreduce (0%25 CPU)",
    ]


def test_student_strings_cannot_end_a_property_or_start_a_command() -> None:
    hostile = "x%0A::add-mask::secret\r\n::stop-commands::token,file=evil:1"
    finding = {"rule": hostile, "message": hostile, "file": "src/collectives.py", "line": 3}
    (command,) = commands_for(result([finding]))
    assert command.count("\n") == 0 and command.count("\r") == 0
    head, _, message = command.partition("::")[2].partition("::")
    assert message == escape_data(hostile) and "%250A" in message  # a literal "%0A" stays literal
    assert head == "error file=src/collectives.py,line=3,title=" + escape_property("policy: " + hostile)
    assert "," not in head.split("title=", 1)[1] and ":" not in head.split("title=", 1)[1]


def test_only_the_submissions_own_files_are_annotated_and_at_most_ten() -> None:
    elsewhere = {"rule": "r", "message": "m", "file": "/etc/passwd", "line": 1}
    many = [{"rule": "r", "message": "m", "file": "src/transformer.py", "line": n} for n in range(1, 30)]
    crash_elsewhere = {"id": "c", "verdict": "crash", "message": "ValueError at torch.py:3"}
    commands = commands_for(result([elsewhere, *many], [crash_elsewhere]))
    assert len(commands) == MAX_ANNOTATIONS and all("file=src/transformer.py" in c for c in commands)


def test_a_malformed_results_json_gives_no_annotation_rather_than_a_crash() -> None:
    assert commands_for({"submission": [], "findings": {"x": 1}, "cases": [None, 3]}) == []
    assert commands_for(result([{"file": "src/collectives.py", "line": True}])) == []


def test_grader_annotate_prints_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(result([{"rule": "r", "message": "m", "file": "src/collectives.py", "line": 5}])))
    assert main(["annotate", str(path)]) == 0
    assert capsys.readouterr().out == "::error file=src/collectives.py,line=5,title=policy%3A r::m\n"
    (tmp_path / "bad.json").write_text("{")
    assert main(["annotate", str(tmp_path / "bad.json")]) == 1


def test_no_line_the_grader_prints_can_be_a_workflow_command() -> None:
    text = "ok\n::add-mask::s3cret\n  ::stop-commands::tok\n##[set-output name=x]y\nrank 0: ::not at the start"
    safe = workflow_safe(text)
    assert [line.lstrip()[:2] for line in safe.splitlines()] == ["ok", "| ", "| ", "| ", "ra"]
    assert "rank 0: ::not at the start" in safe


def test_markdown_keeps_student_text_out_of_table_rows_and_command_lines() -> None:
    row = escape("wrong | 0/6 | PASS |\n| fake | row")
    assert "\n" not in row and "|" not in row.replace("\\|", "")
    lines = escape("first\n::stop-commands::token\nlast", multiline=True).splitlines()
    assert not any(line.lstrip().startswith("::") for line in lines)
