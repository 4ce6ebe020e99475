"""Which file of a submission is the hand-in: one rule, by content, whatever the layout.

Students hand in what Colab or Jupyter saved: the handout's own file name
(``Fall25_Hw12_DistributedTraining.ipynb``), ``Copy of ....ipynb``, ``... (1).ipynb``, a ``.py``
export, a report named after themselves, beside the untouched handout, a draft in ``drafts/`` or a
subfolder holding the template.  The rubric's ``hand_in`` says what the hand-in holds
(:class:`~grader.rubric.model.HandIn`); this module reads every file of the right kind (a student
file's suffix), at the top, in subfolders and in archives alike, and says which one to take and
why, or that none fits and what was there.  The rule, in order:

1. A copy of the pack's starter (equal by digest, or by its code's tokens once comments, blank lines
   and outputs are left out) never wins over any other candidate that holds the handout's names:
   finished work that kept the starter's ``pass`` lines beats the untouched handout.
2. The most of the handout's names held, then the fewest unfinished bodies, then the shallowest
   folder, then the most code, then the first by path.  A file's name counts for nothing: a file
   named as the rubric names it is one candidate among the others.

The candidates are untrusted files read in the grader itself, so they are only read as data: at
most the rubric's per-file limit of bytes each (the caller's), a notebook through ``json`` (its code
cells' text, nothing else), and every file searched with one anchored regular expression per name.
Nothing is parsed as Python, imported or run.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from grader.text import shown

if TYPE_CHECKING:
    from grader.rubric import Rubric

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
    starter: bool = False  # a copy of the pack's starter (:func:`prints`)

    @property
    def folder(self) -> str:
        """The subfolder it lives in ("" at the top of the hand-in)."""
        parent = str(PurePosixPath(self.path).parent)
        return "" if parent == "." else parent


@dataclass(frozen=True)
class Choice:
    """The candidate taken (None: none fits) and the sentence that says why, for the student."""

    taken: Candidate | None
    why: str
    #: every candidate holding any of the handout's names, the taken one first: more than one is a choice
    rivals: tuple[Candidate, ...] = field(default=())


#: A line that only leaves a body unfinished, as the handout's TODO sites do.
_STUB = re.compile(r"^[ \t]*(?:pass|\.\.\.|raise[ \t]+NotImplementedError\b.*)[ \t]*(?:#.*)?$", re.MULTILINE)


def _code_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"^(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(name)}\b", re.MULTILINE)


def _heading_pattern(name: str) -> re.Pattern[str]:
    """A line that opens a section with ``name``: ``## Q5: ...``, ``**Q5.**``, ``> Q5)``."""
    opening = r"^[ \t]{0,3}(?:#{1,6}[ \t]*)?(?:[*_>][ \t]*)*"
    return re.compile(opening + re.escape(name) + r"\b", re.MULTILINE | re.IGNORECASE)


def read(path: str, data: bytes, names: Sequence[str], starters: frozenset[str] = frozenset()) -> Candidate:
    """What the file at ``path`` (its bytes, already bounded by the caller) holds of ``names``;
    ``starters`` are the pack's starter files' :func:`prints`."""
    text = _text(path, data)
    pattern = _heading_pattern if _suffix(path) in ("md", "markdown") else _code_pattern
    found = tuple(n for n in names if pattern(n).search(text))
    stubs = len(_STUB.findall(text)) if pattern is _code_pattern else 0
    return Candidate(
        path, found, stubs, len(text), starter=bool(starters) and not starters.isdisjoint(_prints(path, data))
    )


def prints(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """What identifies each of a pack's starter files (name, bytes): its digest, and the digest of its
    code's tokens without comments and blank lines (a notebook's code cells: a handout run once in Colab
    keeps its code and gains outputs and execution counts)."""
    return frozenset(p for path, data in files for p in _prints(path, data))


def starter_prints(rubric: Rubric) -> frozenset[str]:
    """:func:`prints` of the rubric's pack's starter files of a student file's kind
    (none without ``hand_in``, or where the pack ships no starter: a wheel does not)."""
    from grader.manual_items import rubric_pack  # the pack registry, loaded only for a hand_in rubric

    pack = rubric_pack(rubric) if rubric.hand_in is not None else None
    suffixes = {PurePosixPath(name).suffix.lower() for name in rubric.student_files}
    files: list[tuple[str, bytes]] = []
    for place in pack.starter if pack is not None else ():
        for path in sorted(place.rglob("*")) if place.is_dir() else [place]:
            if path.suffix.lower() in suffixes and path.is_file():
                files.append((path.name, path.read_bytes()))
    return prints(files)


#: Characters past which a file is compared with the starters by digest only: a handout is tens of
#: kilobytes, and a candidate's tokens are read in the grader (a committed 60 MB script took seconds).
TOKENS_UP_TO = 1 << 20


def _prints(path: str, data: bytes) -> tuple[str, ...]:
    text = _text(path, data)
    if len(text) > TOKENS_UP_TO:
        return (_sha(data),)
    return (
        _sha(data),
        _sha(_tokens(text).encode() if _suffix(path) in ("py", "ipynb") else " ".join(text.split()).encode()),
    )


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tokens(text: str) -> str:
    """The code's tokens, one per line, without comments, blank lines or layout; its lines stripped
    of comments where it does not tokenize (IPython's ``!`` lines, a broken cell)."""
    kept: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER):
                kept.append(f"{token.type} {token.string}")
    except (tokenize.TokenError, SyntaxError, ValueError):
        return "\n".join(line for raw in text.splitlines() if (line := raw.split("#", 1)[0].rstrip()).strip())
    return "\n".join(kept)


def _suffix(path: str) -> str:
    return path.rsplit(".", 1)[-1].lower() if "." in path else ""


def _text(path: str, data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return _code_cells(text) if _suffix(path) == "ipynb" else text


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
    """The hand-in among ``candidates`` (``kinds`` says which files they are, "notebooks or .py files"),
    by the module's rule.  One candidate is taken as it is; one holding none of ``names`` is never
    taken from several.  The sentence names every candidate, what decided and where the taken one is."""
    if len(candidates) == 1:
        only = candidates[0]
        return Choice(only, f"the only {kinds[:-1] if kinds.endswith('s') else kinds} in the submission{_where(only)}")
    ranked = sorted(candidates, key=_rank)
    best = ranked[0]
    listed = ", ".join(shown(c.path) for c in ranked[:LISTED]) + (
        f" and {len(ranked) - LISTED} more" if len(ranked) > LISTED else ""
    )
    if not best.holds:
        return Choice(None, f"none of the {kinds} ({listed}) holds any of the handout's {', '.join(names)}")
    rivals = tuple(c for c in ranked if c.holds)
    why = f"of the {len(candidates)} {kinds} ({listed}), "
    starters = [c for c in rivals[1:] if c.starter and not best.starter]
    if starters:
        verb = "is" if len(starters) == 1 else "are"
        why += f"{_names(starters)} {verb} the handout's starter, unchanged, never graded over other work; "
    held = f"{len(best.holds)} of {len(names)}: {', '.join(best.holds)}"
    why += f"{'of the rest, ' if starters else ''}the one holding the most of the handout's names ({held})"
    tied = [c for c in rivals[1:] if len(c.holds) == len(best.holds) and c.starter == best.starter]
    if tied:
        why += f"; {_names(tied)} {'holds' if len(tied) == 1 else 'hold'} as many, and {_tie_break(best, tied[0])}"
    return Choice(best, why + _where(best), rivals)


def _rank(c: Candidate) -> tuple[bool, int, int, int, int, str]:
    return (c.starter, -len(c.holds), c.stubs, c.path.count("/"), -c.size, c.path)


def _names(found: Sequence[Candidate]) -> str:
    return ", ".join(shown(c.path) for c in found[:LISTED])


def _where(taken: Candidate) -> str:
    return f"; it is in the subfolder {shown(taken.folder)}" if taken.folder else ""


def _tie_break(best: Candidate, runner_up: Candidate) -> str:
    if best.stubs != runner_up.stubs:
        counts = f"{best.stubs} pass or NotImplementedError lines against {runner_up.stubs}"
        return f"it leaves fewer bodies unfinished ({counts})"
    if best.path.count("/") != runner_up.path.count("/"):
        return "it is the one nearest the top of the hand-in"
    if best.size != runner_up.size:
        return "it holds the most code"
    return "it comes first by name"
