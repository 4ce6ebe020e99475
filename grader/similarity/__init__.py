"""The instructor's copy check: ``grader similarity ROSTER --pack P --out DIR [--boilerplate FILE ...]``.

Per student, the graded code as the pack reads it (``grader.similarity.extract``: the functions the
rubric grades, a notebook's definitions, a report's snippets), never run.  What is never evidence: the
pack's starter and the instructor's ``--boilerplate`` files, k-gram by k-gram, and code more than
``common`` students share.  Each student is fingerprinted once and pairs are found through an index of
shared fingerprints (``grader.similarity.fingerprints``, on copydetect).  ``grader batch --similarity``
runs it over the batch's roster after the grading, into ``DIR/similarity/``, and the class report links
each student to their highest pair; with ``--cluster``, each student is fingerprinted on the worker that
grades them (``grader.similarity.remote``).

Writes ``DIR/similarity.csv`` (pairs at or above ``--floor``, highest first) and ``DIR/similarity.html``.
"""

from __future__ import annotations

from grader.errors import UserError

#: pairs below this similarity are not listed: independent solutions of these handouts share a few
#: idioms (a ring's ``(rank + 1) % world``), which the tests' corpus keeps well under it
FLOOR = 0.3
#: a fingerprint held by more than this many students is the class's common code (MOSS's default ``-m``)
COMMON = 10


def require() -> None:
    """Fail now, not after a batch's grading, when the similarity check cannot run here: copydetect is an
    optional extra."""
    try:
        import copydetect.utils  # noqa: F401
    except ImportError as exc:
        raise UserError(
            f"the similarity check needs copydetect ({exc}): pip install 'dist-grader[similarity]'"
        ) from None
