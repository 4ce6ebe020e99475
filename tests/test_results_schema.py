"""grader/schemas/results.schema.json describes GradeResult.to_dict() exactly, and cannot drift from it."""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from grader.results import (
    SCHEMA_VERSION,
    CaseOutcome,
    CaseTally,
    Finding,
    GradeResult,
    ItemResult,
    ItemStatus,
    Lateness,
    LatePenalty,
    SubmissionInfo,
    TaskResult,
    TimeSource,
    Verdict,
    schema_path,
)

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "results").glob("*.json"))
SCHEMA = json.loads(schema_path().read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


def sample() -> GradeResult:
    """Every field set to something other than its default, every optional one present."""
    finding = Finding(
        rule="forbidden-collective",
        message="dist.all_reduce is not allowed here",
        file="src/collectives.py",
        line=42,
        col=8,
        function="allreduce",
        source="dist.all_reduce(t)",
        origin="runtime",
    )
    item = ItemResult(
        id="t1.allreduce",
        title="Allreduce",
        score=6.67,
        max_score=10.0,
        status=ItemStatus.PARTIAL,
        feedback="Wrong values for world size 3.",
        cases=CaseTally(passed=8, total=12),
        findings=[finding],
        failures=[CaseOutcome("test_allreduce[ws3-float64-7]", Verdict.WRONG, "rank 1 differs")],
        bonus=True,
        manual=True,
    )
    return GradeResult(
        assignment="a9",
        score=4.0,
        max_score=10.0,
        tasks=[TaskResult("task1", "Collectives", 6.67, 10.0, [item], bonus=True)],
        submission=SubmissionInfo(
            source="https://example.org/student.git",
            files={"src/collectives.py": "sha256:" + "ab" * 32},
            digest="sha256:" + "cd" * 32,
            commit="0123456789abcdef0123456789abcdef01234567",
            submitted_at="2025-03-02T09:30:00+00:00",
            problems=["src/extra.py is not named by the rubric and was left out"],
            submitted_at_source=TimeSource.PUSH,
        ),
        grader_version="0.1.0",
        rubric_digest="sha256:" + "ef" * 32,
        status="error",
        error="the matrix runner died",
        bonus_score=1.0,
        late=LatePenalty(days_late=2, percent=20.0, points=1.33),
        lateness=Lateness.LATE,
        findings=[finding],
        trace={"test_trace_broadcast[ws8]": {"sends": [1, 2], "collectives": []}},
        isolation={"rlimits": "on", "mount_namespace": "off: unshare failed"},
        timings={"matrix": 12.5},
    )


def test_schema_is_valid_draft_2020_12_and_versioned() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA_VERSION in SCHEMA["$id"]
    assert SCHEMA["properties"]["schema_version"]["const"] == SCHEMA_VERSION


def test_sample_validates_and_round_trips() -> None:
    result = sample()
    VALIDATOR.validate(result.to_dict())
    assert GradeResult.from_dict(result.to_dict()) == result
    assert GradeResult.from_dict(json.loads(result.to_json())) == result


def test_defaults_validate() -> None:
    minimal = GradeResult("a9", 0.0, 100.0, [], SubmissionInfo("dir", {}, "sha256:00"), "0.1.0", "x")
    VALIDATOR.validate(minimal.to_dict())


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_files_are_valid_canonical_results(path: Path) -> None:
    raw = json.loads(path.read_text())
    VALIDATOR.validate(raw)
    result = GradeResult.load(path)
    assert result.to_dict() == raw
    assert path.read_text() == result.to_json(), "fixtures are written by GradeResult.to_json()"


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("surprise",), 1),
        (("tasks", 0, "items", 0, "cases", "skipped"), 0),
        (("tasks", 0, "items", 0, "failures", 0, "verdict"), "timeout"),
        (("tasks", 0, "items", 0, "status"), "ok"),
        (("tasks", 0, "items", 0, "findings", 0, "origin"), "guess"),
        (("tasks", 0, "items", 0, "bonus"), _DELETE),
        (("late", "points"), "1.33"),
        (("score",), -1),
        (("status",), "done"),
        (("isolation", "uid"), "maybe"),
        (("submission", "files", "src/collectives.py"), "md5:00"),
        (("schema_version",), "0.9"),
        (("schema_version",), "1.0"),
        (("submission", "submitted_at_source"), "commit_date"),
        (("submission", "submitted_at_source"), _DELETE),
        (("lateness",), "probably_late"),
    ],
    ids=lambda v: "/".join(map(str, v)) if isinstance(v, tuple) else None,
)
def test_schema_rejects_what_the_model_cannot_produce(path: tuple[Any, ...], value: Any) -> None:
    data = copy.deepcopy(sample().to_dict())
    *parents, last = path
    node = data
    for key in parents:
        node = node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    assert not VALIDATOR.is_valid(data)


# --- drift: the schema mirrors the dataclasses field by field, type by type --------------------

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _hint_types(hint: Any) -> set[str]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_hint_types(arg) for arg in typing.get_args(hint)))
    if origin is list:
        return {"array"}
    if origin is dict or dataclasses.is_dataclass(hint):
        return {"object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"string"}
    return {_SCALARS[hint]}


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return _resolve(SCHEMA["$defs"][ref.removeprefix("#/$defs/")]) if ref else node


def _schema_types(node: dict[str, Any]) -> set[str]:
    node = _resolve(node)
    if "anyOf" in node:
        return set().union(*(_schema_types(n) for n in node["anyOf"]))
    if "type" in node:
        return set(node["type"]) if isinstance(node["type"], list) else {node["type"]}
    values = node["enum"] if "enum" in node else [node["const"]]
    return {_SCALARS[type(v)] for v in values}


def _nested(hint: Any) -> list[Any]:
    """The dataclasses and enums inside a field's type (through Optional, list, dict)."""
    if dataclasses.is_dataclass(hint) or (isinstance(hint, type) and issubclass(hint, enum.Enum)):
        return [hint]
    return [found for arg in typing.get_args(hint) for found in _nested(arg)]


def _subschemas(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Where a property's referenced definitions hide: directly, in items, or in anyOf."""
    node = {k: v for k, v in node.items() if k != "description"}
    if "$ref" in node:
        return [_resolve(node)]
    found = [*_subschemas(node["items"])] if "items" in node else []
    return found + [sub for option in node.get("anyOf", []) for sub in _subschemas(option)]


def _check(cls: Any, node: dict[str, Any], where: str, seen: set[Any]) -> None:
    if cls in seen:
        return
    seen.add(cls)
    if issubclass(cls, enum.Enum):
        assert node["enum"] == [member.value for member in cls], where
        return
    names = [f.name for f in dataclasses.fields(cls)]
    assert list(node["properties"]) == names, f"{where}: properties differ from {cls.__name__} fields"
    assert node["required"] == names, f"{where}: to_dict() always writes every field"
    assert node["additionalProperties"] is False, where
    hints = typing.get_type_hints(cls)
    for name in names:
        prop = node["properties"][name]
        if hints[name] is not Any and typing.get_origin(hints[name]) is not dict:
            assert _schema_types(prop) == _hint_types(hints[name]), f"{where}.{name}"
        nested = _nested(hints[name])
        if typing.get_origin(hints[name]) is dict:
            nested = []  # free-form maps (files, isolation, timings, trace) are checked above as objects
            assert _schema_types(prop) == {"object"}, f"{where}.{name}"
        subs = _subschemas(prop)
        assert len(subs) == len(nested), f"{where}.{name}: schema and type nest differently"
        for sub_cls, sub_node in zip(nested, subs, strict=True):
            _check(sub_cls, sub_node, f"{where}.{name}", seen)


def test_schema_mirrors_every_dataclass_field_recursively() -> None:
    seen: set[Any] = set()
    _check(GradeResult, SCHEMA, "GradeResult", seen)
    assert {Finding, CaseTally, CaseOutcome, ItemResult, TaskResult, SubmissionInfo, LatePenalty} <= seen
    assert {Verdict, ItemStatus} <= seen
    defined = set(SCHEMA["$defs"])
    assert defined == {cls.__name__ for cls in seen if cls is not GradeResult}, "no unused definitions"
