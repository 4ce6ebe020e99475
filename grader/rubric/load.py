"""Loading a rubric: read it, parse it with positions, check its shape, then build it and check the
rest against its pack's matrix."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.errors import UserError
from grader.rubric.build import Builder
from grader.rubric.model import Rubric
from grader.rubric.source import Positions, parse, report, schema_errors


def default_rubric_path() -> Path:
    """The default pack's rubric (``grader.pack``): what ``grader grade`` uses when given none."""
    from grader.pack import load_pack

    return load_pack(None).rubric


def load_rubric(
    path: Path | None = None, case_ids: Sequence[str] | None = None, degenerate: dict[str, str] | None = None
) -> Rubric:
    """Load and validate a rubric; ``UserError`` lists every problem as ``FILE:LINE:COL: reason``.

    ``case_ids`` are the matrix cases patterns must match, and ``degenerate`` those of them that weigh
    nothing (id -> why); by default both are the rubric's pack's (``AssignmentPack.degenerate``).
    """
    path = Path(path) if path is not None else default_rubric_path()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read rubric: {exc.strerror}") from exc
    try:
        if case_ids is None and degenerate is None:
            return _load_as_packed(path, raw)
        return _load(path, raw, case_ids, degenerate)
    except RecursionError:  # PyYAML and the schema validator walk nested collections recursively
        raise UserError(f"{path}: nested too deeply to be a rubric") from None


@functools.lru_cache(maxsize=8)
def _load_as_packed(path: Path, raw: bytes) -> Rubric:
    """A rubric checked against its own pack is parsed and checked once per process for the same
    bytes, however many stages ask (``cli.resolve_rubric``, then the command); a Rubric is frozen."""
    return _load(path, raw, None, None)


def _load(path: Path, raw: bytes, case_ids: Sequence[str] | None, degenerate: dict[str, str] | None) -> Rubric:
    data, positions = parse(path, raw.decode("utf-8", errors="replace"))
    errors = schema_errors(data, positions)
    if errors:
        raise UserError(report(errors))
    if case_ids is None:
        ids, degenerate = _pack_cases(data["assignment"], positions)
    else:
        ids, degenerate = tuple(case_ids), degenerate or {}
    builder = Builder(positions, ids, degenerate)
    rubric = builder.rubric(data, path, "sha256:" + hashlib.sha256(raw).hexdigest())
    if builder.errors:
        raise UserError(report(builder.errors))
    return rubric


def _pack_cases(assignment: dict[str, Any], positions: Positions) -> tuple[tuple[str, ...], dict[str, str]]:
    """The case ids of the rubric's pack and its degenerate ones (id -> why); a pack that cannot be
    loaded is an error at its line."""
    from grader.pack import load_pack

    ref = assignment.get("pack", assignment["id"])
    try:
        pack = load_pack(ref)
        return tuple(pack.case_ids()), pack.degenerate()
    except UserError as exc:
        key = "pack" if "pack" in assignment else "id"
        raise UserError(positions.error(("assignment", key), f"assignment.{key}: {exc}")[1]) from None
