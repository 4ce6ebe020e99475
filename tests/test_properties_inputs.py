"""Property: whatever an instructor's files hold, the grader answers with a result or a UserError that
says what is wrong; never anything else.

Manual-score files (CSV and YAML, any bytes) are loaded and merged into a result, which must still
validate against the schema; rubrics are the packaged one with any part replaced or removed, or any
text at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from grader.errors import UserError
from grader.junit import read_junit
from grader.manual import load_manual
from grader.packs.a9 import catalog
from grader.results import GradeResult, SubmissionInfo, schema_path
from grader.rubric import default_rubric_path, load_rubric
from grader.scoring import score

CASE_IDS = list(catalog.all_case_ids())
DEGENERATE = {c.name: c.degenerate for c in catalog.all_cases() if c.degenerate}
RESULT = GradeResult.load(Path(__file__).parent / "fixtures" / "results" / "graded.json")
RUN = Path(__file__).parent / "fixtures" / "scoring" / "reference.xml"
SCORED = load_rubric(default_rubric_path(), list(read_junit(RUN)))  # the rubric, checked against that run
VALIDATOR = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
DEEP = "[" * 5000 + "]" * 5000
ITEM_IDS = [item.id for item in RESULT.items()]

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), st.sampled_from(ITEM_IDS)
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(SCALARS, inner, max_size=4))
)
CELLS = st.one_of(
    st.sampled_from(["alice", "student", "item", "points", *ITEM_IDS, "4", "-1", "1e400", "nan", "", "#"]),
    st.text(max_size=8),
)
CSV_TEXT = st.lists(st.lists(CELLS, max_size=5).map(",".join), max_size=6).map("\n".join)


def dumped(value: Any) -> str:
    """``value`` as YAML; keys YAML cannot write as such (None, floats) are written all the same."""
    return yaml.safe_dump(value, allow_unicode=True)


def manual_invariant(path: Path) -> None:
    try:
        scores = load_manual(path)
    except UserError as exc:
        assert str(exc).strip()
        return
    submission = SubmissionInfo("s", {}, "sha256:" + "0" * 64)
    for entry in scores.values():
        try:
            merged = score(SCORED, RUN, submission, [], path.parent, manual=entry)
        except UserError as exc:
            assert str(exc).strip()
            continue
        VALIDATOR.validate(merged.to_dict())


@given(text=st.one_of(CSV_TEXT, st.text()), raw=st.binary(max_size=40), as_bytes=st.booleans())
@example(text="alice,task1.broadcast,1e400", raw=b"", as_bytes=False)
@example(text="a,b,c\0", raw=b"", as_bytes=False)
def test_any_manual_csv_is_merged_or_refused_with_a_message(
    tmp_path_factory: Any, text: str, raw: bytes, as_bytes: bool
) -> None:
    path = tmp_path_factory.mktemp("manual") / "scores.csv"
    path.write_bytes(raw if as_bytes else text.encode("utf-8", "surrogatepass"))
    manual_invariant(path)


@given(value=st.one_of(VALUES, st.dictionaries(st.text(max_size=5), st.dictionaries(SCALARS, VALUES))), raw=st.text())
@example(value=None, raw=DEEP)
@example(value={"alice": {"task1.broadcast": 10**400}}, raw="")
def test_any_manual_yaml_is_merged_or_refused_with_a_message(tmp_path_factory: Any, value: Any, raw: str) -> None:
    path = tmp_path_factory.mktemp("manual") / "scores.yaml"
    path.write_text(raw or dumped(value), encoding="utf-8", errors="surrogatepass")
    manual_invariant(path)


def rubric_invariant(path: Path) -> None:
    try:
        rubric = load_rubric(path, CASE_IDS, DEGENERATE)
    except UserError as exc:
        assert str(exc).strip()
        return
    assert rubric.max_score >= 0


def replace_at(document: Any, path: list[Any], value: Any, delete: bool) -> Any:
    """``document`` with the node at ``path`` replaced by ``value`` (or removed)."""
    if not path:
        return value
    node = document
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return document


@st.composite
def mutated_rubrics(draw: st.DrawFn) -> str:
    document = yaml.safe_load(default_rubric_path().read_text())
    path: list[Any] = []
    node = document
    while isinstance(node, dict | list) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node, key=str) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        node = node[key]
    mutated = replace_at(document, path, draw(VALUES), delete=bool(path) and draw(st.booleans()))
    return dumped(mutated)


@given(text=st.one_of(mutated_rubrics(), st.text()))
@example(text=DEEP)
@example(text="a: &x [1]\nb: *x\n")
@example(text="null: null\n")  # a key that is not a string
@example(text="\x1f")  # a character YAML's reader refuses before parsing
def test_any_rubric_loads_or_is_refused_with_a_message(tmp_path_factory: Any, text: str) -> None:
    path = tmp_path_factory.mktemp("rubric") / "rubric.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    rubric_invariant(path)
