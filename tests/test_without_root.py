"""A student's laptop: the grader without root.  The layers that need root report themselves off
with the reason, the others stay on, and honest code scores exactly what it scores as root.

The run is a real non-root grading: ``unshare --user`` maps this process's user to an unprivileged
uid in a user namespace of its own, so the grader sees ``geteuid() != 0`` and holds no capability,
while the files it needs (this Python and torch) stay readable, as they are for a laptop's owner.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NEEDS_ROOT = {"cgroup", "measured_traffic", "pid_namespace", "uid", "network"}
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="maps root to a user: needs root"),
]


@pytest.mark.parametrize(("tree", "total", "bonus"), [("reference/a9", 105, 5), ("reference/a9-naive", 100, 0)])
def test_without_root_honest_code_scores_the_same_and_says_what_is_off(
    tmp_path: Path, tree: str, total: float, bonus: float
) -> None:
    out = tmp_path / "out"
    cmd = ["unshare", "--user", "--map-user=61001", "--map-group=61001", sys.executable, "-m", "grader", "grade"]
    done = subprocess.run([*cmd, tree, "--out", str(out), "--format", "json"], cwd=REPO, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert (result["score"], result["bonus_score"]) == (total, bonus)
    layers = result["isolation"]
    off = {name for name, state in layers.items() if state.startswith("off")}
    assert off == NEEDS_ROOT, layers
    assert all(layers[name].startswith("off: ") and len(layers[name]) > 6 for name in off)  # with the reason
    for name in ("zygote", "salt", "filesystem", "ipc", "seccomp", "audit_hooks", "rlimits", "nproc", "prctl"):
        assert layers[name].startswith("on"), (name, layers[name])
    traces = [t for t in result["trace"].values() if t]
    assert traces and not any(t["measured"] for t in traces)  # counts from the ranks' own records
