"""A student's laptop: the grader without root.  Where unprivileged user namespaces work (most
distributions, GitHub's runners), the group's PID, network, mount and IPC namespaces are built inside
a user namespace of its own (rootless), so the capture and the private loopback stay on; only the
layers that truly need root (a cgroup, a uid per rank) report themselves off, with the reason, and
honest code scores exactly what it scores as root.

Two ways to be unprivileged: ``unshare --user`` maps this process's user to an unprivileged uid in a
user namespace of its own (the grader sees ``geteuid() != 0`` and holds no capability, while this
Python stays readable, as for a laptop's owner); and a real unprivileged account (created if need be)
that the test drops to.  The first also grades every A9 and A4 entry of the fidelity corpus, all in
one process, and each case's verdict and item's score must be the full sandbox's.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import fidelity

REPO = Path(__file__).resolve().parents[1]
UNPRIVILEGED = ["unshare", "--user", "--map-user=61001", "--map-group=61001", sys.executable]
NEEDS_ROOT = {"cgroup", "grading_cgroup", "uid"}  # rootless: no cgroup is delegated, and one uid is mapped
STUDENT = "grader-student"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="maps root to a user: needs root"),
]


@pytest.mark.parametrize(("tree", "total", "bonus"), [("reference/a9", 105, 5), ("reference/a9-naive", 100, 0)])
def test_without_root_honest_code_scores_the_same_and_says_what_is_off(
    tmp_path: Path, tree: str, total: float, bonus: float
) -> None:
    out = tmp_path / "out"
    cmd = [*UNPRIVILEGED, "-m", "grader", "grade"]
    done = subprocess.run([*cmd, tree, "--out", str(out), "--format", "json"], cwd=REPO, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert (result["score"], result["bonus_score"]) == (total, bonus)
    layers = result["isolation"]
    off = {name for name, state in layers.items() if state.startswith("off")}
    assert off == NEEDS_ROOT, layers
    assert all(layers[name].startswith("off: ") and len(layers[name]) > 6 for name in off)  # with the reason
    assert_rootless(result)


#: grades each (entry name, submission) pair of its arguments in this one process (a Python and a torch
#: import for them all, each session's host started beside the grading before), and writes each one's
#: runtime layer and Record to the file named first
GRADE_ENTRIES = """
import dataclasses, json, sys
from grader.matrix.host import keep_spare
from grader.pack import load_pack
from grader.pipeline import grade
from tests.fidelity import Record, pack_of
graded = {}
with keep_spare():
    for name, path in zip(sys.argv[2::2], sys.argv[3::2]):
        result = grade(path, load_pack(pack_of(name)).rubric)
        graded[name] = {"mode": result.isolation["mode"], **dataclasses.asdict(Record.of(result))}
open(sys.argv[1], "w").write(json.dumps(graded))
"""


def test_rootless_gives_every_fidelity_entry_the_full_sandboxs_verdicts(
    tmp_path: Path, full_grades: fidelity.FullGrades
) -> None:
    """Every case's verdict and every item's score of each A9 and A4 entry, rootless as in the full
    sandbox (whose gradings ``test_fidelity_corpus`` made, when it ran in this session)."""
    names = fidelity.entries("a9", "a4")
    shared = Path(tempfile.mkdtemp(prefix="grader-rootless-corpus-"))  # pytest's tmp_path is root's alone
    try:
        os.chmod(shared, 0o755)
        args = []
        for name in names:
            args += [name, str(fidelity.build(fidelity.CORPUS / name, fidelity.spec(name), shared / name))]
        out = shared / "graded.json"
        done = subprocess.run([*UNPRIVILEGED, "-c", GRADE_ENTRIES, str(out), *args], cwd=REPO, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        graded = json.loads(out.read_text())
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert sorted(graded) == names
    differ = {}
    for name in names:
        assert graded[name]["mode"] == "on: rootless (an unprivileged user namespace)", name
        full = fidelity.Record.of(full_grades.get(name, tmp_path))
        differ[name] = full.differences(fidelity.Record.from_json(graded[name]))
    assert {name: d for name, d in differ.items() if d} == {}, "(full, rootless)"


def assert_rootless(result: dict[str, object]) -> None:
    """The rootless layers, exactly: what is on, what is off and why, and the traffic measured."""
    layers = result["isolation"]
    assert isinstance(layers, dict)
    assert layers["mode"] == "on: rootless (an unprivileged user namespace)"
    assert layers["uid"] == "off: a rootless user namespace maps one uid (a uid per rank needs root)"
    assert layers["cgroup"].startswith("off: needs root")
    on = ("zygote", "salt", "pid_namespace", "network", "measured_traffic", "filesystem", "ipc", "seccomp")
    assert "net.core.rmem_max" in layers["measured_traffic"]
    for name in (*on, "audit_hooks", "rlimits", "nproc", "prctl", "fds"):
        assert layers[name].startswith("on"), (name, layers[name])
    traces = [t for t in result["trace"].values() if t]  # type: ignore[union-attr]
    # counted on the group's own loopback; a large case may overflow the capped buffer (then: records)
    measured = [t for t in traces if t["measured"]]
    assert len(measured) > 0.8 * len(traces), (len(measured), len(traces))


def _student_account() -> tuple[int, int]:
    """An ordinary account's uid and gid (created here if missing), never root's."""
    try:
        entry = pwd.getpwnam(STUDENT)
    except KeyError:
        if not shutil.which("useradd"):
            pytest.skip("no useradd to create an unprivileged account with")
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", STUDENT], check=True)
        entry = pwd.getpwnam(STUDENT)
    return entry.pw_uid, entry.pw_gid


def test_as_an_unprivileged_account_the_group_is_rootless_and_scores_the_same(tmp_path: Path) -> None:
    from grader.sandbox.isolation import _readable_by

    uid, gid = _student_account()
    python = Path(os.path.realpath(sys.executable))
    needed = [python, *(Path(p) for p in site.getsitepackages()), REPO]
    unreadable = [p for p in needed if not _readable_by(p, uid, gid)]
    if unreadable:  # e.g. a Python under /root (mode 700): `chmod o+x /root` lets the account reach it
        pytest.skip(f"the account {STUDENT} cannot reach {unreadable[0]}")
    out = Path(tempfile.mkdtemp(prefix="grader-student-out-"))
    try:
        os.chown(out, uid, gid)
        cmd = [sys.executable, "-m", "grader", "grade", "reference/a9", "--out", str(out), "--format", "json"]
        env = {"PATH": os.environ["PATH"], "HOME": str(out), "LANG": "C.UTF-8"}
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, env=env, user=uid, group=gid, extra_groups=[])
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        result = json.loads((out / "results.json").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert (result["score"], result["bonus_score"]) == (105, 5)
    assert_rootless(result)
