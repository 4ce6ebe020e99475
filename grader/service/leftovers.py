"""What a service killed mid-write leaves in ``state_dir``, swept at its start.

Intake reads a bundle in ``incoming/bundle-*`` and moves the repository it made to
``assignments/<id>/repos/<sid>.git`` just before the submission's row is committed; a grade writes
``submissions/.tmp-<sid>-*`` and swaps an older grading out as ``.old-<sid>-*`` (the batch's writer);
scoring reads a sealed grading into a private copy in :func:`scratch`.  A ``kill -9`` between those
steps leaves them behind, a repository without a row among them.

Another service process may share ``state_dir`` (two processes over one PostgreSQL), and what it is
writing is not a leftover.  Nothing it writes lives longer than a grade: so only what was last
changed longer ago than :func:`stale_after` (twice a grade's timeout, an hour at least) is removed.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.service.config import ServiceConfig
from grader.service.db import Submission

log = logging.getLogger("grader.service")

MIN_AGE_S = 3600.0


def scratch(config: ServiceConfig) -> Path:
    """Where the service's own temporary copies live: in ``state_dir``, so a killed run's are swept
    here at the next start rather than left in the machine's ``/tmp``."""
    path = config.state_dir / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def stale_after(config: ServiceConfig) -> float:
    """Seconds after which nothing a live service process writes can still be in the making."""
    return max(MIN_AGE_S, 2 * config.grade_timeout_s)


def sweep(config: ServiceConfig, sessions: sessionmaker[Session], now: float | None = None) -> list[Path]:
    """Remove the stale leftovers of killed runs; what was removed."""
    cutoff = (time.time() if now is None else now) - stale_after(config)
    state = config.state_dir
    found = _older([*state.glob("incoming/bundle-*"), *state.glob("tmp/*")], cutoff)
    for folder in sorted(state.glob("assignments/*")):
        found += _older([*folder.glob("submissions/.tmp-*"), *folder.glob("submissions/.old-*")], cutoff)
        repos = _older(folder.glob("repos/*.git"), cutoff)
        if repos:
            with sessions.begin() as session:
                rows = set(session.scalars(select(Submission.id).where(Submission.assignment == folder.name)))
            found += [repo for repo in repos if repo.name.removesuffix(".git") not in rows]
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if found:
        log.info("removed %d leftovers of a killed run from %s", len(found), state)
    return found


def _older(paths: Iterable[Path], cutoff: float) -> list[Path]:
    old = []
    for path in paths:
        try:
            if path.lstat().st_mtime < cutoff:
                old.append(path)
        except OSError:  # removed meanwhile by its own process
            pass
    return old
