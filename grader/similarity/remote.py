"""Fingerprinting where the grading runs: ``grader batch --cluster SPEC --similarity``.

A Dask task that grades a student also fingerprints them on its worker (``grader.batch.cluster``), the
way the client would (``check.fingerprint_student``), and the client only indexes the fingerprints and
scores the pairs.  What is never evidence travels inside the task as text (the starter's and the
``--boilerplate`` files' graded code, read by the client), since a worker may see neither the grader's
checkout nor the instructor's files.  The fingerprint comes back as JSON bytes, not a pickled
``Fingerprint`` (which Dask would unpickle inside ``result()``, before anything could check it), and the
client checks them field by field: a reply that is not what this module writes is that student's
problem, never the batch's end.  Nothing of the student's runs: their code is parsed, as on the client.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.pack import AssignmentPack, load_pack
from grader.rubric import Rubric
from grader.similarity.check import Fingerprinted, fingerprint_student, judged


@dataclass(frozen=True)
class SimilarityTask:
    """What a worker needs to fingerprint one student as the client would."""

    student: str
    rubric: Rubric = field(repr=False)
    never_texts: tuple[str, ...] = field(repr=False)  # the starter's and boilerplate's code, never evidence


def similarity_task(rubric: Rubric, pack: AssignmentPack, boilerplate: Iterable[Path]) -> SimilarityTask:
    """The task's part every student shares, read here, on the client; ``student`` is set per task."""
    from grader.similarity.extract import starter_code

    return SimilarityTask("", rubric, tuple(piece.source for piece in starter_code(pack, boilerplate)))


def fingerprint_here(task: SimilarityTask, source: str) -> bytes:
    """On the worker: the student at ``source`` (the worker's path to the submission) fingerprinted and
    encoded.  The grade is already done: a failure here is the student's problem, sent back as such."""
    from grader.similarity.fingerprints import never_evidence

    try:
        pack = load_pack(task.rubric.assignment.pack)
        one = fingerprint_student(task.student, source, pack, task.rubric, never_evidence(task.never_texts))
    except Exception as exc:  # the grade's reply must still go back
        one = Fingerprinted(None, f"it could not be fingerprinted on its worker ({type(exc).__name__}: {exc})")
    return encode(one)


def encode(one: Fingerprinted) -> bytes:
    """``{"problem": ...}`` or the fingerprint's fields; ``positions`` as pairs, in their order."""
    if one.found is None:
        return json.dumps({"problem": one.problem}).encode()
    found = one.found
    return json.dumps(
        {
            "text": found.text,
            "filtered": found.filtered,
            "offsets": found.offsets.tolist(),
            "positions": list(found.positions.items()),
        }
    ).encode()


def decode(data: bytes) -> Fingerprinted:
    """A worker's reply as ``encode`` writes it, checked; anything else is the student's problem.  The
    comparable size is counted here, from the positions, not taken on the reply's word."""
    import numpy as np

    from grader.similarity.fingerprints import Fingerprint, covered

    if not data:
        return Fingerprinted(None, f"{MALFORMED}: its worker sent none")
    try:
        reply = json.loads(data)
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return Fingerprinted(None, f"{MALFORMED}: not JSON ({type(exc).__name__})")
    if isinstance(reply, dict) and set(reply) == {"problem"} and isinstance(reply["problem"], str):
        return Fingerprinted(None, reply["problem"] or MALFORMED)
    why = _malformed(reply)
    if why:
        return Fingerprinted(None, f"{MALFORMED}: {why}")
    offsets = np.array(reply["offsets"], dtype=np.int64).reshape(-1, 2)
    positions = {value: at for value, at in reply["positions"]}
    return judged(covered(Fingerprint(reply["text"], reply["filtered"], offsets, positions)))


MALFORMED = "the fingerprint its worker sent back could not be read"


def _malformed(reply: Any) -> str:
    """What is wrong with a decoded reply that is not a problem; "" when it is a fingerprint."""
    from grader.similarity.fingerprints import HASH_MASK, K

    if not isinstance(reply, dict) or set(reply) != {"text", "filtered", "offsets", "positions"}:
        return "not a fingerprint's fields"
    text, filtered, offsets, positions = reply["text"], reply["filtered"], reply["offsets"], reply["positions"]
    if not isinstance(text, str) or not isinstance(filtered, str):
        return "its text is not text"
    # copydetect's rows: (a position in the tokens, -1 before the first; characters removed before it)
    if not isinstance(offsets, list) or not all(
        isinstance(row, list) and len(row) == 2 and _within(row[0], -1, len(filtered)) and _within(row[1], 0, len(text))
        for row in offsets
    ):
        return "its offsets are not pairs of positions in its tokens and its text"
    if not isinstance(positions, list) or not all(
        isinstance(pair, list)
        and len(pair) == 2
        and _within(pair[0], 0, HASH_MASK)
        and isinstance(pair[1], list)
        and pair[1]
        and all(_within(at, 0, len(filtered) - K) for at in pair[1])
        for pair in positions
    ):
        return "its fingerprints are not hashes at positions of its tokens"
    if len({value for value, _ in positions}) != len(positions):
        return "a fingerprint is listed twice"
    return ""


def _within(value: Any, low: int, high: int) -> bool:
    """An int (not a bool) in [low, high]."""
    return type(value) is int and low <= value <= high
