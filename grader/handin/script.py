"""The ``script`` reader: a Python file whose module level must never run (A4's ``assignment4.py``
starts NCCL on GPUs), read as one chunk."""

from __future__ import annotations

from pathlib import Path

from grader.handin import Chunk, Extraction, extract


def read(path: Path) -> Extraction:
    """The definitions and imports of the script at ``path`` (nothing of it runs here)."""
    source = path.read_bytes().decode("utf-8", "replace")
    return extract([Chunk(source, path.name, str(path))], path.name)
