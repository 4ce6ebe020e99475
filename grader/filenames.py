"""How a rubric names a deliverable's file: a name, or (a name with ``*``) a pattern such as ``*.log``.

Decided here once for intake (which finds and copies the file), the pipeline (which keeps it beside
the outputs for a rescore) and scoring (which reads it).  A pattern matches file names with
``fnmatch``'s rules, case-sensitively, never ``/``; where several match, the first in sorted
order is the one.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path


def is_pattern(name: str) -> bool:
    return "*" in name


def name_matches(file_name: str, name: str) -> bool:
    """Whether a file called ``file_name`` is what the rubric's ``name`` stands for."""
    return fnmatch.fnmatchcase(file_name, name) if is_pattern(name) else file_name == name


def entries_named(directory: Path, name: str) -> list[Path]:
    """``directory/name``, or for a pattern every entry of ``directory`` it matches, sorted (whether
    each exists, and is a file, is the caller's question)."""
    if not is_pattern(name):
        return [directory / name]
    try:
        return sorted(directory / e.name for e in os.scandir(directory) if fnmatch.fnmatchcase(e.name, name))
    except OSError:
        return []
