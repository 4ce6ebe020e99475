"""Winnowing fingerprints of normalised code, an index of shared fingerprints, and each pair's similarity.

The normalisation, winnowing and region arithmetic are copydetect's (``copydetect.utils``: Pygments
tokens, every name a ``V``, function names ``F``, strings ``S``, comments and whitespace dropped;
Schleimer, Wilkerson and Aiken's robust winnowing).  Two of its steps are ours, for the reasons given
where they are: the k-gram hash (copydetect's is Python's ``hash``, salted per process) and the removal
of starter code (copydetect's assumes each hash occurs once in a document).

Each document is fingerprinted once; pairs come from an index of fingerprints to the documents that
hold them, so a class of n costs n fingerprints plus the pairs that share one, never n² comparisons.
A fingerprint held by more than ``common`` documents is the class's common code, not evidence (MOSS's
``-m``): it is dropped like the starter's, and keeps the index's lists short.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from copydetect.utils import filter_code, get_copied_slices, winnow

from grader.similarity import COMMON

#: copydetect's defaults: a shared run shorter than K normalised characters is never evidence (noise), and
#: one of K + WINDOW - 1 = 30 or more always shares a fingerprint (the guarantee)
K = 25
WINDOW = 6
#: a shared run shorter than this many normalised characters is an idiom every solution of a handout writes
#: (``rank, world = (dist.get_rank(), dist.get_world_size())`` is 30), not evidence: a few of them could
#: otherwise be the whole of a small document's code
MIN_RUN = 40
#: a document's comparable size is never taken as less than this many normalised characters (about seven
#: lines of code): two students whose own code is Q2's three obvious assertions (45) share all of it, and
#: a share of so little is no evidence; the smallest complete hand-in of the corpus, A5's, holds 229
SMALLEST = 200
#: k-gram hashes are 52 bits: winnowing compares them as float64 (copydetect's Python fallback), exactly so
HASH_MASK = (1 << 52) - 1


@dataclass(frozen=True)
class Fingerprint:
    """A document's winnowed fingerprints and what maps them back onto its text."""

    text: str  # the document as the instructor reads it
    filtered: str  # its normalised tokens
    offsets: np.ndarray  # copydetect's map from a position in ``filtered`` back to ``text``
    positions: dict[int, list[int]] = field(repr=False)  # fingerprint -> where it starts in ``filtered``
    coverage: int = 0  # normalised characters in runs of fingerprints (``covered``): its comparable size


@dataclass(frozen=True)
class Pair:
    """Two documents' shared code: per document, the share of it the other holds (in [0, 1]) and the shared
    regions of its text."""

    a: int
    b: int
    share_a: float  # the share of document a's comparable code that b holds too
    share_b: float
    regions_a: list[tuple[int, int]]  # [start, end) character ranges of document a's text
    regions_b: list[tuple[int, int]]

    @property
    def similarity(self) -> float:
        """Containment: the larger share (see :func:`similar_pairs`)."""
        return max(self.share_a, self.share_b)


def normalise(text: str) -> tuple[str, np.ndarray]:
    """copydetect's token filter, as Python: what renaming, comments and layout cannot change."""
    filtered, offsets = filter_code(text, "graded.py", language="python")
    return filtered, offsets


def kgram_hashes(filtered: str) -> np.ndarray:
    """Every k-gram's hash.  Stable (blake2b), where copydetect's Python ``hash`` is salted per process:
    the same class gets the same report on every run and on every machine."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(filtered[i : i + K].encode(), digest_size=8).digest(), "little") & HASH_MASK
            for i in range(len(filtered) - K + 1)
        ],
        dtype=np.int64,
    )


def never_evidence(texts: Iterable[str]) -> frozenset[int]:
    """Every k-gram of the starter and boilerplate, not only the winnowed ones: a student's winnowing
    picks other k-grams of the same starter lines than the starter's own winnowing does."""
    found: set[int] = set()
    for text in texts:
        found.update(int(h) for h in kgram_hashes(normalise(text)[0]))
    return frozenset(found)


def fingerprint(parts: Sequence[str], never: frozenset[int] = frozenset()) -> Fingerprint:
    """The winnowed fingerprints of a document made of ``parts`` (its definitions, its snippets), less
    those in ``never`` (the starter's k-grams).  Each part is fingerprinted alone, so that no k-gram spans
    two of them: the order of a student's definitions changes nothing, and two untouched starters share
    no k-gram across the seam between two functions either."""
    text, filtered, offsets = "", "", [np.array([[0, 0]], dtype=np.int64)]
    positions: dict[int, list[int]] = {}
    for part in parts:
        own, moved = normalise(part)
        if len(moved):  # copydetect's map is per part: shift it to the whole document's
            offsets.append(moved.astype(np.int64) + np.array([len(filtered), len(text) - len(filtered)]))
        hashes = kgram_hashes(own)
        if len(hashes):
            selected, where = winnow(hashes, WINDOW, remove_duplicates=False)
            for value, at in zip(selected.tolist(), where.tolist(), strict=True):
                if value not in never:
                    positions.setdefault(value, []).append(len(filtered) + at)
        text += part
        filtered += own
    return covered(Fingerprint(text, filtered, np.concatenate(offsets), positions))


def covered(found: Fingerprint) -> Fingerprint:
    """``found`` with its comparable size counted from its positions: the normalised characters of its runs
    of ``MIN_RUN`` or more, the only code of it that can count as shared (an exact copy shares all of it)."""
    runs = _runs(np.array([at for where in found.positions.values() for at in where], dtype=np.int64))
    return replace(found, coverage=int(np.sum(runs[1] - runs[0])))


def without(found: Fingerprint, dropped: frozenset[int] | set[int]) -> Fingerprint:
    """``found`` less the fingerprints ``dropped``, its comparable size counted again.  Ours, not
    copydetect's ``boilerplate=``: that one intersects with ``assume_unique`` though a document's hashes
    repeat, so a repeated line of the student's own could be taken for starter code."""
    if not dropped.intersection(found.positions):
        return found
    kept = {h: at for h, at in found.positions.items() if h not in dropped}
    return covered(replace(found, positions=kept))


def similar_pairs(found: Sequence[Fingerprint], common: int = COMMON) -> list[Pair]:
    """Every pair of documents sharing a fingerprint that at most ``common`` documents hold, with its
    similarity: the larger of the two documents' shares of their comparable code that the other holds
    (containment, JPlag's "maximum similarity").  Code a copy adds, used or not, lowers only the copy's
    own share, never its source's: a copy padded with ten times its size in library code still holds
    all of its source.  The symmetric measure (shared code over both documents, Dolos's) fell to 0.19
    for such a copy, below honest pairs.  Containment's weak side, a small document, is guarded twice:
    only runs of ``MIN_RUN`` characters or more are shared code, and a side's size is ``SMALLEST`` at least."""
    index: dict[int, list[int]] = {}
    for number, document in enumerate(found):
        for value in document.positions:
            index.setdefault(value, []).append(number)
    common_code = {value for value, holders in index.items() if len(holders) > common}
    kept = [without(document, common_code) for document in found]
    candidates = {
        pair for holders in index.values() if 1 < len(holders) <= common for pair in itertools.combinations(holders, 2)
    }
    return [_compare(a, b, kept[a], kept[b]) for a, b in sorted(candidates)]


def _compare(a: int, b: int, first: Fingerprint, second: Fingerprint) -> Pair:
    shared = first.positions.keys() & second.positions.keys()
    slices_a = _runs(np.array([at for h in shared for at in first.positions[h]], dtype=np.int64))
    slices_b = _runs(np.array([at for h in shared for at in second.positions[h]], dtype=np.int64))
    return Pair(
        a, b, _share(slices_a, first), _share(slices_b, second), _regions(slices_a, first), _regions(slices_b, second)
    )


def _runs(positions: np.ndarray) -> np.ndarray:
    """The shared runs starting at ``positions`` (copydetect's slices), less those shorter than ``MIN_RUN``."""
    slices = get_copied_slices(positions, K)
    return slices[:, slices[1] - slices[0] >= MIN_RUN] if slices.shape[1] else slices


def _share(slices: np.ndarray, found: Fingerprint) -> float:
    """The share of ``found``'s comparable code that the shared runs ``slices`` cover (``SMALLEST`` at least)."""
    return min(1.0, int(np.sum(slices[1] - slices[0])) / max(found.coverage, SMALLEST))


def _regions(slices: np.ndarray, found: Fingerprint) -> list[tuple[int, int]]:
    """Shared runs of the normalised text as ranges of the text itself (copydetect's ``compare_files``
    mapping: each position moves by the characters normalisation removed before it)."""
    if slices.shape[1] == 0:
        return []
    raw = slices.astype(np.int64)
    if len(found.offsets):
        moved = np.clip(np.searchsorted(found.offsets[:, 0], raw), 0, found.offsets.shape[0] - 1)
        raw = raw + found.offsets[:, 1][moved]
    return [(int(start), min(int(end), len(found.text))) for start, end in zip(raw[0], raw[1], strict=True)]
