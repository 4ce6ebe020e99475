"""A service killed mid-write (``kill -9``) leaves temporary directories and a repository without its
row in ``state_dir``; the next start removes those older than any live write can be, and nothing a
second service process sharing ``state_dir`` may be writing now, nor anything a submission owns."""

from __future__ import annotations

import os
import shutil
import time

import pytest

pytest.importorskip("fastapi")

from grader.service import intake
from grader.service.app import open_service
from grader.service.config import load_config
from grader.service.leftovers import stale_after
from tests.oidc_issuer import Issuer
from tests.service_kit import bundle, commit_tree, write_config


def test_a_start_removes_a_killed_runs_stale_leftovers_and_nothing_live_or_owned(tmp_path):
    issuer = Issuer(tmp_path)
    config = load_config(write_config(tmp_path, issuer))
    service = open_service(config)
    repo = tmp_path / "a5-alice"
    sha = commit_tree(repo, {"report.md": b"# My report\n"})
    token = f"Bearer {issuer.token('course-org/a5-alice', sha)}"
    row = intake.receive(config, service.verifier, service.sessions, "a5", token, bundle(repo))
    accepted = intake.repo_path(config, "a5", row.id)
    submissions = config.state_dir / "assignments" / "a5" / "submissions"
    (submissions / row.id).mkdir(parents=True)
    (submissions / row.id / "results.json").write_text("{}")

    def leftovers(age: str) -> list:
        """What a run killed while writing leaves: a bundle being read, a repository moved in before its
        row was committed, a grading being written, an older one being swapped out and a sealed grading's
        private copy being scored."""
        made = [
            config.state_dir / "incoming" / f"bundle-{age}",
            accepted.with_name(f"{age}.git"),
            submissions / f".tmp-{row.id}-{age}",
            submissions / f".old-{row.id}-{age}",
            config.state_dir / "tmp" / f"scoring-{age}",
        ]
        (made[0] / "repo.git").mkdir(parents=True)
        (made[0] / "submission.bundle").write_bytes(b"# v2 git bundle\n")
        shutil.copytree(accepted, made[1])
        (made[2] / "graded").mkdir(parents=True)
        (made[2] / "graded" / "grade.log").write_text("grading...\n")
        made[3].mkdir()
        (made[3] / "results.json").write_text("{}")
        (made[4] / "graded").mkdir(parents=True)
        return made

    stale, live = leftovers("stale"), leftovers("live")
    long_ago = time.time() - stale_after(config) - 60
    for path in [*stale, accepted, submissions / row.id]:
        os.utime(path, (long_ago, long_ago))

    open_service(config)
    for path in stale:
        assert not path.exists(), path
    for path in [*live, accepted, submissions / row.id / "results.json"]:
        assert path.exists(), path
