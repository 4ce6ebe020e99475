"""The hostile and broken corpus: every entry is graded end to end by ``python -m grader grade``.

Each entry in ``tests/corpus/hostile/<name>/`` is a student repo whose ``expected.json`` gives the
exact item scores under the default rubric, a wall-clock bound and why.  Beyond the scores, a
hostile submission must not disturb anything else: the grader exits 0, its output stays small,
no process the entry started survives, and a process of ours started before the run is still alive.

``max_seconds`` is about ten times an entry's time on an idle 2-core machine and always below the
rubric's ``total_timeout_s`` (600): a grading that only ends by running into its overall timeout fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "corpus" / "hostile"
REPO = Path(__file__).resolve().parents[1]
MARKER = b"hostile-corpus"  # in argv or /proc/<pid>/comm of every process an entry starts
MAX_OUT_BYTES = 5 << 20
ENTRIES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.json").is_file())


def marked_processes() -> list[str]:
    """Processes that carry the corpus marker or run from a corpus entry."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_bytes()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone, or not ours to see
        if MARKER in comm or MARKER in cmdline:
            argv = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{pid} {comm.strip().decode()} {argv}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("name", ENTRIES)
def test_hostile_entry(name: str, tmp_path: Path) -> None:
    entry = CORPUS / name
    expected = json.loads((entry / "expected.json").read_text())
    out = tmp_path / "out"
    sentinel = subprocess.Popen(["sleep", "600"])
    try:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "grader", "grade", str(entry), "--out", str(out), "--format", "json"],
                cwd=REPO,
                capture_output=True,
                timeout=expected["max_seconds"],
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name}: grading took longer than {expected['max_seconds']} s (expected.json max_seconds)")
        stderr = done.stderr.decode(errors="replace")[-4000:]
        assert done.returncode == 0, f"{name}: grader exited {done.returncode}\n{stderr}"
        assert sentinel.poll() is None, f"{name}: a process of ours started before the run was killed"
    finally:
        sentinel.kill()
        sentinel.wait()
    result = json.loads((out / "results.json").read_text())
    items = [item for task in result["tasks"] for item in task["items"]]
    failures = [f"{i['id']}: {f['id']} {f['verdict']} {f['message'][:300]}" for i in items for f in i["failures"]]
    scores = {item["id"]: item["score"] for item in items}
    assert scores == expected["items"], f"{name}: {expected['notes']}\nfailed cases:\n" + "\n".join(failures)
    assert result["status"] == "graded"
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert size < MAX_OUT_BYTES, f"{name}: the output directory holds {size} bytes"
    assert marked_processes() == [], f"{name}: processes outlived the grading"
