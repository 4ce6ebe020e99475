"""Instructor scores for manual items (the diagram, written-answer overrides): the file format.

The manual-scores file is kept apart from the cached grading: every batch scores each student again
from the cached matrix run with the file's scores (``grader.scoring.score``, the one place a score is
computed; ``grader.manual_items`` holds the contract: which items, and in what range), so editing the
file never needs a regrade, and removing a line from it restores the automatic score instead of
leaving a stale override behind.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grader.errors import UserError


@dataclass
class ManualScores:
    """One student's instructor scores: item id -> points, and optional comments by item id."""

    scores: dict[str, float] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)


def load_manual(path: Path) -> dict[str, ManualScores]:
    """Read a CSV ``student,item,points[,comment]`` (header optional) or YAML ``{student: {item: points}}``.

    In YAML an item may also be ``{points: 4, comment: "..."}``.  Errors name the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: manual-scores file not found")
    if path.suffix.lower() in (".yaml", ".yml"):
        return _load_yaml(path)
    return _load_csv(path)


def _load_csv(path: Path) -> dict[str, ManualScores]:
    out: dict[str, ManualScores] = {}
    with path.open(newline="", encoding="utf-8-sig") as fh:
        try:
            rows = list(csv.reader(fh))
        except (csv.Error, UnicodeDecodeError) as exc:  # a NUL byte, a field over csv's limit, not UTF-8
            raise UserError(f"{path}: not a readable CSV file ({exc})") from None
    for lineno, row in enumerate(rows, start=1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if lineno == 1 and [c.lower() for c in cells[:3]] == ["student", "item", "points"]:
            continue
        if len(cells) not in (3, 4):
            raise UserError(f"{path}:{lineno}: expected student,item,points[,comment] (quote a comment with commas)")
        student, item, points = cells[:3]
        entry = out.setdefault(student, ManualScores())
        if item in entry.scores:
            raise UserError(f"{path}:{lineno}: a second score for {student} / {item}")
        entry.scores[item] = parse_points(points, f"{path}:{lineno}")
        if len(cells) == 4 and cells[3]:
            entry.comments[item] = cells[3]
    return out


def _load_yaml(path: Path) -> dict[str, ManualScores]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML: {exc}") from exc
    except RecursionError:  # PyYAML builds nested collections recursively
        raise UserError(f"{path}: nested too deeply to be manual scores") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping student -> {{item: points}}")
    out: dict[str, ManualScores] = {}
    for student, items in data.items():
        where = f"{path}: {student}"
        if not isinstance(items, dict):
            raise UserError(f"{where}: expected a mapping item -> points")
        entry = out.setdefault(str(student), ManualScores())
        for item, value in items.items():
            if isinstance(value, dict):
                if "points" not in value:
                    raise UserError(f"{where} / {item}: a mapping needs 'points'")
                entry.scores[str(item)] = parse_points(value["points"], f"{where} / {item}")
                if value.get("comment"):
                    entry.comments[str(item)] = str(value["comment"])
            else:
                entry.scores[str(item)] = parse_points(value, f"{where} / {item}")
    return out


def parse_points(value: Any, where: str) -> float:
    try:
        points = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{where}: points must be a number, got {value!r}") from None
    if not math.isfinite(points):
        raise UserError(f"{where}: points must be finite, got {value!r}")
    return points
