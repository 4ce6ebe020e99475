"""The ``notebook`` reader: a Jupyter/Colab notebook, or the same notebook exported as ``.py``.

The notebook is read as it is and never run top to bottom: its code cells in document order, each
a chunk ("hw12.ipynb, cell 7", counted among code cells from 1, as the student sees them when
scrolling).  Execution counts and saved outputs are ignored: they are data a student can edit,
never evidence of what ran, so a definition repeated across cells is taken from the last cell, as a
fresh "Restart and run all" would.  IPython's syntax (``!cmd``, ``%magic``, ``get_ipython()``) is
read as IPython reads it, as a statement that does nothing here, wherever it stands, and so is its
help syntax (``torch.tensor_split?``); a cell magic that runs its body as Python (``%%time``,
``%%capture``) is read as its body, any other (``%%bash``, ``%%timeit``) is skipped and said so
(:mod:`grader.handin.ipython`).  An exported notebook (``jupyter nbconvert --to script``, Colab's
"Download .py", VS Code) is split at its ``# In[ ]:`` or ``# %%`` markers into the same cells, and
its cell magics (nbconvert's ``run_cell_magic`` calls, Colab's commented-out cells) read alike.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat  # at import: the zygote preloads it for every rank of a notebook pack

from grader.handin import PART, Chunk, Extraction, LastRead, extract
from grader.handin.ipython import read_cell

#: A cell's first line in an export; ``# %%time`` is a cell magic Colab commented out, no marker.
_MARKER = re.compile(r"^# (?:In\[[ 0-9]*\]:|%%(?:[ \t]|$))")


class NotebookError(ValueError):
    """The file is neither a notebook nor a script: the message says what is wrong with it."""


def read(path: Path) -> Extraction:
    """The definitions and imports of the notebook (or exported script) at ``path``; a rank's later
    cases reuse the last read while the file's bytes are the same (``LastRead``)."""
    return _last(path)


def warm_up() -> None:
    """The first notebook nbformat reads builds its schema validator (about 0.1 s): a zygote calls this
    once, so the ranks it forks never pay it."""
    _cells_of_json('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "warm-up")


def _read(path: Path, text: str) -> Extraction:
    cells = _cells_of_json(text, path.name) if text.lstrip().startswith("{") else _cells_of_script(text)
    chunks: list[Chunk] = []
    skipped: list[str] = []
    for n, source in enumerate(cells, start=1):
        cell = read_cell(source)
        skipped += [f"cell {n} is {why}" for why in cell.skipped]
        if cell.python:
            chunks.append(Chunk(cell.python, f"{path.name}{PART}cell {n}", f"{path}{PART}cell {n}"))
    found = extract(chunks, path.name)
    found.skipped = skipped
    return found


_last = LastRead(_read)


def _cells_of_json(text: str, name: str) -> list[str]:
    try:
        notebook = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises JSON, validation and version errors of many types
        raise NotebookError(f"{name} is not a readable notebook: {str(exc)[:300]}") from None
    return [str(cell.get("source", "")) for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"]


def _cells_of_script(text: str) -> list[str]:
    cells: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if _MARKER.match(line):
            cells.append([])
        cells[-1].append(line)  # the marker line stays (a comment): line numbers match the file's cell
    return ["".join(lines) for lines in cells if "".join(lines).strip()]
