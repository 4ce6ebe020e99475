"""The ``script`` reader: a Python file whose module level must never run (A4's ``assignment4.py``
starts NCCL on GPUs), read as one chunk."""

from __future__ import annotations

from pathlib import Path

from grader.handin import Chunk, Extraction, LastRead, extract


def read(path: Path) -> Extraction:
    """The definitions and imports of the script at ``path`` (nothing of it runs here); a rank's later
    cases reuse the last read while the file's bytes are the same (``LastRead``)."""
    return _last(path)


def _read(path: Path, source: str) -> Extraction:
    return extract([Chunk(source, path.name, str(path))], path.name)


_last = LastRead(_read)
