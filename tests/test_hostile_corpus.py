"""The hostile and broken corpus: every entry is graded end to end by ``python -m grader grade``.

Each entry in ``tests/corpus/hostile/<name>/`` is a student repo whose ``expected.json`` gives the
exact item scores under the default rubric, a wall-clock bound and why.  An entry that cannot be
committed as files (a ``.git`` of its own, a tree 1,100 levels deep, names that are not UTF-8) is a
``make.py`` that builds it: ``python make.py DEST``.  ``expected.json`` may also give ``args`` for
``grader grade``, ``max_bytes`` of named outputs, values ``result`` must hold (dotted paths into
results.json), ``problems`` the submission's problems must mention, and files that must be
``absent`` after the run both beside the submission and in the output directory (what an attack
would leave had it run).

Beyond that, a hostile submission must not disturb anything else: the grader exits 0, every output
is written and is valid UTF-8, the output stays small, no process the entry started survives, and a
process of ours started before the run is still alive.  Each ``grader grade`` forks its session hosts
from this process's one warm host server, as a ``grader batch`` student's does (issue 41), and the
last test grades honest work through that server after the whole corpus: it must be graded exactly
as with no server at all.

``max_seconds`` is about ten times an entry's time on an idle 2-core machine and always below the
rubric's ``total_timeout_s`` (600): a grading that only ends by running into its overall timeout fails.

CI's container stage (``scripts/ci-container-stage.sh``) grades most entries in containers first, and
hands the suite its output folder (``GRADER_CONTAINER_STAGE``).  An entry graded there is checked here on
that grading, with every assertion below but those about this host's processes (a container's end takes
its processes with it), instead of being graded a second time (issue 43).  An entry whose question only a
grading on this host answers says why in its ``expected.json`` (``local``), and is always graded here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grader.matrix.host import kept_server, lend_server
from grader.matrix.warm import HostServer

CORPUS = Path(__file__).parent / "corpus" / "hostile"
REPO = Path(__file__).resolve().parents[1]
MARKER = b"hostile-corpus"  # in argv or /proc/<pid>/comm of every process an entry starts
MAX_OUT_BYTES = 5 << 20
EXIT_S = 10.0  # for processes already killed to leave the process table
OUTPUTS = ("results.json", "junit.xml", "gradescope.json", "classroom.json", "summary.md")
SERVERS: list[int] = []  # the host server each entry graded here forked its hosts from, in order
ENTRIES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.json").is_file())


def build(entry: Path, tmp_path: Path) -> Path:
    """The submission an entry stands for: the entry itself, or what its ``make.py`` builds."""
    if not (entry / "make.py").is_file():
        return entry
    built = tmp_path / "submission"
    subprocess.run([sys.executable, str(entry / "make.py"), str(built)], check=True, timeout=60)
    return built


def lookup(result: dict[str, Any], dotted: str) -> Any:
    value: Any = result
    for key in dotted.split("."):
        value = value[key]
    return value


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


def container_graded(name: str, expected: dict[str, Any]) -> Path | None:
    """The container stage's output folder for this entry, when CI handed it to the suite, the stage
    graded the entry, and the entry asks nothing only a grading on this host answers."""
    stage = os.environ.get("GRADER_CONTAINER_STAGE")
    if not stage or "local" in expected:
        return None
    out = Path(stage) / name
    return out if (out / "results.json").is_file() else None


@pytest.mark.slow
@pytest.mark.parametrize("name", ENTRIES)
def test_hostile_entry(name: str, tmp_path: Path) -> None:
    entry = CORPUS / name
    expected = json.loads((entry / "expected.json").read_text())
    out = container_graded(name, expected)
    if out is None:
        out = tmp_path / "out"
        grade_here(name, entry, expected, out, tmp_path)
    check_outputs(name, expected, out)


def grade_here(name: str, entry: Path, expected: dict[str, Any], out: Path, tmp_path: Path) -> None:
    """Grade the entry on this host: the grader survives it, and nothing it started outlives it."""
    submission = build(entry, tmp_path)
    args = ["grade", str(submission), "--out", str(out), "--format", "json", *expected.get("args", [])]
    before = set(marked_processes())  # an earlier test's, still on its way out: not this grading's
    sentinel = subprocess.Popen(["sleep", "600"])
    try:
        try:
            server = kept_server()
            SERVERS.append(server.pid if server is not None else 0)
            done = grade_cli(args, expected["max_seconds"], server)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name}: grading took longer than {expected['max_seconds']} s (expected.json max_seconds)")
        stderr = done.stderr.decode(errors="replace")[-4000:]
        assert done.returncode == 0, f"{name}: grader exited {done.returncode}\n{stderr}"
        assert sentinel.poll() is None, f"{name}: a process of ours started before the run was killed"
        for marker in expected.get("absent", []):  # what the attack leaves where it can write, had it run
            assert not (submission / marker).exists(), f"{name}: {marker} beside the submission: the attack ran"
            assert not (out / marker).exists(), f"{name}: {marker} in the output directory: the attack ran"
    finally:
        sentinel.kill()
        sentinel.wait()
        if submission != entry:  # rm copes with a tree too deep for shutil.rmtree
            subprocess.run(["rm", "-rf", str(submission)], check=True)
    assert outlived(before) == [], f"{name}: processes outlived the grading"


def grade_cli(args: list[str], timeout: float, server: HostServer | None) -> subprocess.CompletedProcess[bytes]:
    """``python -m grader`` with ``args``, its hosts forked from ``server`` (None: started cold)."""
    with lend_server(server) as (lent, fds):
        return subprocess.run(
            [sys.executable, "-m", "grader", *args],
            cwd=REPO,
            env={**os.environ, **lent},
            pass_fds=fds,
            capture_output=True,
            timeout=timeout,
        )


def outlived(before: set[str]) -> list[str]:
    """The marked processes this grading left, once those already killed have had a moment to exit (a
    PID namespace's members die after its init, on a loaded machine not at once)."""
    deadline = time.monotonic() + EXIT_S
    while (left := [p for p in marked_processes() if p not in before]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def check_outputs(name: str, expected: dict[str, Any], out: Path) -> None:
    """What the grading wrote: every output, valid UTF-8 and small, and exactly the expected scores."""
    for output in OUTPUTS:
        (out / output).read_bytes().decode("utf-8")  # written, and valid UTF-8 whatever the names held
    result = json.loads((out / "results.json").read_text())
    items = [item for task in result["tasks"] for item in task["items"]]
    failures = [f"{i['id']}: {f['id']} {f['verdict']} {f['message'][:300]}" for i in items for f in i["failures"]]
    scores = {item["id"]: item["score"] for item in items}
    assert scores == expected["items"], f"{name}: {expected['notes']}\nfailed cases:\n" + "\n".join(failures)
    assert result["status"] == "graded"
    for dotted, value in expected.get("result", {}).items():
        assert lookup(result, dotted) == value, f"{name}: {dotted}"
    for wanted in expected.get("problems", []):
        assert wanted in result["submission"]["problems"], f"{name}: {result['submission']['problems']}"
    for output, bound in expected.get("max_bytes", {}).items():  # what quotes a submission's output stays small
        assert (out / output).stat().st_size <= bound, f"{name}: {output} holds {(out / output).stat().st_size} bytes"
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert size < MAX_OUT_BYTES, f"{name}: the output directory holds {size} bytes"


def comparable(out: Path) -> dict[str, Any]:
    """A grading's ``results.json`` without what varies between two gradings of the same files: the
    stages' times and the order in which the ranks' messages happened to interleave."""
    result: dict[str, Any] = json.loads((out / "results.json").read_text())
    del result["timings"]
    result["trace"] = {
        case: {key: value for key, value in (trace or {}).items() if key != "events"}
        for case, trace in result["trace"].items()
    }
    return result


@pytest.mark.slow
def test_honest_work_graded_after_the_corpus_through_the_same_server_is_graded_as_with_no_server(
    tmp_path: Path,
) -> None:
    """Last in this module, so after every entry this worker graded here (the container stage's were
    graded in containers of their own): whatever an entry left in the warm server it forked its hosts
    from shows in the next student's results, which must be exactly a cold grading's (issue 41)."""
    server = kept_server()
    assert server is not None and server.alive()
    assert SERVERS[-1:] in ([], [server.pid]), "the server the corpus was graded through is gone"
    results = {}
    for mode, lent in (("warm", server), ("cold", None)):
        out = tmp_path / mode
        done = grade_cli(["grade", str(REPO / "reference" / "a9"), "--out", str(out), "--format", "json"], 300, lent)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
        results[mode] = comparable(out)
    assert results["warm"]["score"] == 105
    assert results["warm"] == results["cold"]
