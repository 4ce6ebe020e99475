"""Which file of a submission is the hand-in when none has the name the rubric gives it.

Students hand in what Colab or Jupyter saved: the handout's own file name
(``Fall25_Hw12_DistributedTraining.ipynb``), ``Copy of ....ipynb``, ``... (1).ipynb``, a ``.py``
export, a report named after themselves.  The rubric's ``hand_in`` says what the hand-in holds
(:class:`~grader.rubric.model.HandIn`); this module reads the files of the right kind (a student
file's suffix) and says which one to take and why, or that none fits and what was there.

The candidates are untrusted files read in the grader itself, so they are only read as data: at
most the rubric's per-file limit of bytes each (the caller's), a notebook through ``json`` (its code
cells' text, nothing else), and every file searched with one anchored regular expression per name.
Nothing is parsed as Python, imported or run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from grader.text import shown

#: Files of the right kind read at most, per submission: a committed virtual environment holds thousands.
MAX_CANDIDATES = 64
#: Files named in the sentence that says the hand-in is missing.
LISTED = 8


@dataclass(frozen=True)
class Candidate:
    """A file that may be the hand-in, and what of the handout it holds."""

    path: str  # relative to the submission's root, as the student named it
    holds: tuple[str, ...]  # the rubric's names it defines (code) or heads a section with (Markdown)
    stubs: int  # lines that leave a body unfinished (``pass``, ``...``, ``raise NotImplementedError``)
    size: int  # characters of its code (a notebook's code cells) or text


@dataclass(frozen=True)
class Choice:
    """The candidate taken (None: none fits) and the sentence that says why, for the student."""

    taken: Candidate | None
    why: str


#: A line that only leaves a body unfinished, as the handout's TODO sites do.
_STUB = re.compile(r"^[ \t]*(?:pass|\.\.\.|raise[ \t]+NotImplementedError\b.*)[ \t]*(?:#.*)?$", re.MULTILINE)


def _code_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"^(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(name)}\b", re.MULTILINE)


def _heading_pattern(name: str) -> re.Pattern[str]:
    """A line that opens a section with ``name``: ``## Q5: ...``, ``**Q5.**``, ``> Q5)``."""
    opening = r"^[ \t]{0,3}(?:#{1,6}[ \t]*)?(?:[*_>][ \t]*)*"
    return re.compile(opening + re.escape(name) + r"\b", re.MULTILINE | re.IGNORECASE)


def read(path: str, data: bytes, names: Sequence[str]) -> Candidate:
    """What the file at ``path`` (its bytes, already bounded by the caller) holds of ``names``."""
    text = data.decode("utf-8", "replace")
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix == "ipynb":
        text = _code_cells(text)
    pattern = _heading_pattern if suffix in ("md", "markdown") else _code_pattern
    found = tuple(n for n in names if pattern(n).search(text))
    return Candidate(path, found, len(_STUB.findall(text)) if pattern is _code_pattern else 0, len(text))


def _code_cells(text: str) -> str:
    """A notebook's code cells, one after another; "" for a file that is not a notebook's JSON."""
    try:
        notebook = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    sources: list[str] = []
    for cell in cells if isinstance(cells, list) else []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            lines = source if isinstance(source, list) else [source]
            sources.append("".join(line for line in lines if isinstance(line, str)))
    return "\n".join(sources)


def choose(candidates: Sequence[Candidate], names: Sequence[str], kinds: str) -> Choice:
    """The hand-in among ``candidates`` (``kinds`` says which files they are, "notebooks or .py files").

    One candidate is taken as it is.  Of several, the one holding the most of ``names``; where that
    ties, the one with the fewest unfinished bodies (the handout's untouched copy beside the work
    keeps its ``pass`` lines), then the most code, then the first by name.  One holding none of
    ``names`` is never taken from several."""
    if len(candidates) == 1:
        return Choice(candidates[0], f"the only {kinds[:-1] if kinds.endswith('s') else kinds} in the submission")
    ranked = sorted(candidates, key=lambda c: (-len(c.holds), c.stubs, -c.size, c.path))
    best = ranked[0]
    listed = ", ".join(shown(c.path) for c in ranked[:LISTED])
    if not best.holds:
        return Choice(None, f"none of the {kinds} ({listed}) holds any of the handout's {', '.join(names)}")
    why = (
        f"of the {len(candidates)} {kinds} ({listed}), the one holding the most of the handout's names "
        f"({len(best.holds)} of {len(names)}: {', '.join(best.holds)})"
    )
    tied = [c for c in ranked[1:] if len(c.holds) == len(best.holds)]
    if tied:
        others = ", ".join(shown(c.path) for c in tied[:LISTED])
        why += f"; {others} {'holds' if len(tied) == 1 else 'hold'} as many, and {_tie_break(best, tied[0])}"
    return Choice(best, why)


def _tie_break(best: Candidate, runner_up: Candidate) -> str:
    if best.stubs != runner_up.stubs:
        counts = f"{best.stubs} pass or NotImplementedError lines against {runner_up.stubs}"
        return f"it leaves fewer bodies unfinished ({counts})"
    if best.size != runner_up.size:
        return "it holds the most code"
    return "it comes first by name"
