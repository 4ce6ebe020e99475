"""Where ``pivot_root`` is refused, a rank still becomes the student and grades as anywhere else.

Docker's default seccomp profile refuses ``pivot_root``, and GitHub Classroom's workflow runs the
image under it: the new root cannot be entered, so the rank's own uid works in the host's view of
the files, with its scratch directory (cwd, TMPDIR, HOME) as the session made it.  That directory
must be the rank's own, or every case fails before the student's first line (the reference once
scored 20/100 there).  The refusal is reproduced without Docker: the grading runs under a seccomp
filter that refuses ``pivot_root`` exactly as Docker's does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: run argv[1:] as a command under a seccomp filter that refuses pivot_root with EPERM (Docker's default)
UNDER_DOCKERS_DEFAULT = """
import errno, os, sys
import pyseccomp as sc
f = sc.SyscallFilter(sc.ALLOW)
f.add_rule(sc.ERRNO(errno.EPERM), "pivot_root")
f.load()
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="a uid per rank needs root")
def test_a_rank_without_its_new_root_still_becomes_the_student_and_passes(tmp_path: Path) -> None:
    pytest.importorskip("pyseccomp")
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", UNDER_DOCKERS_DEFAULT, "-m", "grader", "grade", str(REPO / "reference" / "a9")]
    cmd += ["--out", str(out), "-k", "test_allreduce and ws2"]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, timeout=600)
    results = json.loads((out / "results.json").read_text())
    ran = [case for case in results["cases"] if "not selected" not in case["message"]]
    assert ran and all(case["verdict"] == "pass" for case in ran), ran
    assert results["isolation"]["filesystem"].startswith("off")  # pivot_root was refused: no new root
    assert results["isolation"]["uid"] == "on"  # and yet each rank ran as a uid of its own
