"""Property: whatever tree or archive a student hands in, grading ends in a results.json that validates
against the schema with every output written, or in a UserError that says why; never anything else.

The trees are random: names of any bytes (and the names the rubric looks for), folders nested deep,
symlinks, hard links, FIFOs, files around the size limits.  Everything after the intake runs as
``grader grade`` runs it but for the matrix, whose place a fixed junit.xml takes: the matrix is
the runner's (its inputs are ours), while here every stage the submission's bytes and names reach
is exercised, renderers included.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.errors import UserError
from grader.intake import materialize
from grader.packs.a9 import catalog
from grader.render.outputs import OUTPUT_FILES, write_outputs
from grader.render.student_report import render_student_report
from grader.results import schema_path
from grader.rubric import load_rubric
from grader.runtimes.torchdist import static
from grader.scoring import score

# Archives with a member twice are part of what is tried.
pytestmark = pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")

RUBRIC = load_rubric(None, list(catalog.all_case_ids()))
JUNIT = Path(__file__).parent / "fixtures" / "results" / "junit.xml"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))
MAX_FILE, MAX_TOTAL = 96, 512  # small, so that random files cross both limits

WANTED = [n.encode() for n in ("src", "collectives.py", "transformer.py", *RUBRIC.deliverable_files)]
NAMES = st.one_of(
    st.sampled_from([*WANTED, b".git", b"__MACOSX", b"old\xff", b"a\nb", b"\x1b[2J", b"\xe2\x80\xae"]),
    st.binary(min_size=1, max_size=10).filter(lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")),
)
LEAVES = st.one_of(
    st.tuples(st.just("file"), st.binary(max_size=2 * MAX_FILE)),
    st.tuples(st.just("symlink"), st.sampled_from([b"/etc/passwd", b"..", b"src", b"collectives.py", b"\xff"])),
    st.tuples(st.just("fifo"), st.none()),
    st.tuples(st.just("hardlink"), st.none()),
)
TREES = st.recursive(
    LEAVES, lambda inner: st.tuples(st.just("dir"), st.dictionaries(NAMES, inner, max_size=4)), max_leaves=24
)


def build(path: bytes, node: tuple[str, Any], files: list[bytes]) -> None:
    kind, value = node
    if kind == "dir":
        os.mkdir(path)
        for name, child in value.items():
            build(os.path.join(path, name), child, files)
    elif kind == "file":
        with open(path, "wb") as fh:
            fh.write(value)
        files.append(path)
    elif kind == "symlink":
        os.symlink(value, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif files:  # a hard link to a file made before, possibly far away in the tree
        os.link(files[0], path)


def deep_chain(top: bytes, depth: int, leaf: bytes) -> None:
    """``depth`` nested folders under ``top`` with ``leaf`` at the bottom, made one level at a time."""
    path = os.path.join(top, b"deep")
    for _ in range(depth):
        os.mkdir(path)
        path = os.path.join(path, b"d")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.path.join(os.path.dirname(path), leaf), "wb") as fh:
        fh.write(b"# deep\n")


def grade_without_matrix(source: Path | str, work: Path) -> None:
    """The invariant: a valid results.json and every output, or a UserError with a message."""
    try:
        taken = materialize(
            source,
            list(RUBRIC.student_files),
            [d.any_of for d in RUBRIC.deliverables.values()],
            work / "sandbox",
            MAX_FILE,
            MAX_TOTAL,
        )
    except UserError as exc:
        assert str(exc).strip()
        return
    present = sorted(f for f in RUBRIC.student_files if f in taken.present)
    findings = static.analyze_submission(taken.sandbox, present, RUBRIC.policy)
    result = score(RUBRIC, JUNIT, taken.info, findings, taken.sandbox)
    assert all(problem.isprintable() for problem in result.submission.problems), result.submission.problems
    written = write_outputs(result, work / "out", JUNIT)
    assert {p.name for p in written} >= set(OUTPUT_FILES)
    for path in written:
        path.read_bytes().decode("utf-8")
    VALIDATOR.validate(json.loads((work / "out" / "results.json").read_text()))
    render_student_report(result).encode("utf-8")


@given(top=st.dictionaries(NAMES, TREES, max_size=6), depth=st.sampled_from([0, 3, 70]), leaf=st.sampled_from(WANTED))
def test_any_tree_is_graded_or_refused_with_a_message(tmp_path_factory: Any, top: Any, depth: int, leaf: bytes) -> None:
    work = tmp_path_factory.mktemp("tree")
    root = os.path.join(os.fsencode(work), b"submission")
    build(root, ("dir", top), [])
    if depth:
        deep_chain(root, depth, leaf)
    grade_without_matrix(os.fsdecode(root), work)


MEMBER_NAMES = st.one_of(
    st.sampled_from(
        ["src/collectives.py", "a9/src/transformer.py", "../collectives.py", "/etc/transformer.py", "C:/x.py", "src"]
    ),
    st.lists(st.one_of(st.sampled_from(["src", "..", ".", "", "d" * 200]), st.text(max_size=8)), max_size=70).map(
        "/".join
    ),
    st.sampled_from(RUBRIC.deliverable_files),
)
MEMBERS = st.lists(
    st.tuples(MEMBER_NAMES, st.sampled_from(["file", "dir", "symlink"]), st.binary(max_size=2 * MAX_FILE)),
    max_size=12,
)


def zip_archive(path: Path, members: list[tuple[str, str, bytes]]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, kind, data in members:
            info = zipfile.ZipInfo(name.rstrip("/") + "/" if kind == "dir" else name or "x")
            info.external_attr = {"file": 0o100644, "dir": 0o040755, "symlink": 0o120777}[kind] << 16
            zf.writestr(info, b"" if kind == "dir" else data)


def tar_archive(path: Path, members: list[tuple[str, str, bytes]]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, kind, data in members:
            info = tarfile.TarInfo(name or "x")
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}[kind]
            info.linkname = "/etc/passwd" if kind == "symlink" else ""
            info.size = len(data) if kind == "file" else 0
            tf.addfile(info, io.BytesIO(data) if kind == "file" else None)


@given(members=MEMBERS, form=st.sampled_from(["zip", "tar.gz"]), cut=st.integers(0, 400))
def test_any_archive_is_graded_or_refused_with_a_message(
    tmp_path_factory: Any, members: list[tuple[str, str, bytes]], form: str, cut: int
) -> None:
    work = tmp_path_factory.mktemp("archive")
    archive = work / f"submission.{form}"
    (zip_archive if form == "zip" else tar_archive)(archive, members)
    if cut:  # a damaged archive: cut short
        data = archive.read_bytes()
        archive.write_bytes(data[: max(1, len(data) - cut)])
    grade_without_matrix(archive, work)
