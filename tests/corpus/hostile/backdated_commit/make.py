"""Build this entry's submission: ``python make.py DEST``.

The reference solution committed with author and committer dates two weeks before the deadline
(``GIT_COMMITTER_DATE``), as if pushed on time; expected.json grades it with the deadline and the
push time GitHub recorded, three weeks later.  The commit's own dates must change nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[4] / "reference" / "a9"
BACKDATED = "2026-01-01T09:00:00+00:00"


def build(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest)
    env = {**os.environ, "GIT_AUTHOR_DATE": BACKDATED, "GIT_COMMITTER_DATE": BACKDATED}
    ident = ["-c", "user.name=Student", "-c", "user.email=student@example.org", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "done well before the deadline"]):
        subprocess.run(["git", *ident, *args], cwd=dest, env=env, capture_output=True, check=True)
    return dest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
