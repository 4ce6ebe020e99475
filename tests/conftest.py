"""Hypothesis profiles for the property-based tests, chosen with ``HYPOTHESIS_PROFILE``; gradings
several modules share (``graded``); the fidelity corpus's full-mode grades, shared by the tests
that compare against them (``full_grades``); and which modules share a worker when the suite runs on
several (``scripts/test.sh``: pytest-xdist, ``--dist loadgroup``; see :data:`SHARED_WORKER`).

``default`` is small and derandomized: ``.ci/run`` and ``scripts/test.sh`` try the same inputs on
every run, so a result never depends on the day.  ``long`` searches fifty times more inputs, at
random, for a local run before a release (``HYPOTHESIS_PROFILE=long pytest tests/test_properties_*``).
Neither has a deadline: a slow example on a loaded machine is not a failure (speed lives in
benchmarks).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from grader.matrix.host import Host
from grader.results import GradeResult
from grader.runtimes.torchdist.zygote import NUMERICS_ENV
from grader.seal import SEAL_KEY_ENV
from tests.fidelity import FullGrades

ROOT = Path(__file__).resolve().parent.parent

# Tests fork ranks from this process as a zygote does, so it computes as one: a test that ran a
# parallel operation on several OpenMP threads left every later forked rank waiting forever in its
# own first one (CI hung for an hour so).  The setting is read when torch loads, which is later.
assert "torch" not in sys.modules, "conftest must set the numerics environment before torch is imported"
os.environ.update(NUMERICS_ENV)

#: Modules that must run on one worker, one after the other, when the suite runs on several: what they
#: share is a session's gradings (computed once per worker) or the machine's process table, which a
#: test reads whole to prove a grading left nothing behind.  Every other module is a group of its own:
#: its tests stay together, in order, so module-scoped gradings are made once.
SHARED_WORKER = {
    # full_grades: the fidelity corpus graded once, compared with the portable and rootless runtimes
    "test_fidelity_corpus": "fidelity",
    "test_portable": "fidelity",
    "test_without_root": "fidelity",
    # graded: the references and the template graded once
    "test_matrix": "graded",
    "test_pipeline": "graded",
    "test_neighbours": "graded",
    # processes that carry the hostile corpus's marker, looked for on the whole machine
    "test_hostile_corpus": "marked",
    "test_lifecycle": "marked",
    "test_sandbox_attacks": "marked",
}


#: The longest groups, started first (about 17 and 10 minutes in one stream): a worker that took one of
#: them last would run on alone at the end while the other waits.
FIRST = ("fidelity", "marked")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks to name each test's group
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def group(item: pytest.Item) -> str:
        module = item.module.__name__.rpartition(".")[2] if item.module is not None else item.nodeid
        return SHARED_WORKER.get(module, module)

    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))
    items.sort(key=lambda item: FIRST.index(group(item)) if group(item) in FIRST else len(FIRST))  # stable


settings.register_profile(
    "default", max_examples=20, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("long", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session", autouse=True)
def seal_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The key ``grader batch`` seals its cache with (``grader.seal``): one of the session's, never the
    user's own (``~/.local/state``), inherited by every batch a test starts in a subprocess."""
    path = tmp_path_factory.mktemp("seal") / "seal.key"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SEAL_KEY_ENV, str(path))
        yield path


@pytest.fixture(scope="session", autouse=True)
def spare_host() -> Iterator[None]:
    """Gradings in this process start the next one's session host beside them (``grader.matrix.host.
    keep_spare``): the suite grades hundreds of trees one after another.  A test that counts this
    process's children turns it off (``keep_spare(False)``)."""
    from grader.matrix.host import keep_spare

    with keep_spare():
        yield


@pytest.fixture(scope="session")
def full_grades() -> FullGrades:
    """The fidelity corpus's full-mode grades, shared by every test that needs one (see ``tests.fidelity``)."""
    return FullGrades()


@dataclass(frozen=True)
class Graded:
    """One ``grader grade <tree> --out <out> --format json`` of a snapshot of a tree of this checkout."""

    tree: Path  # the snapshot that was graded (a batch may grade the same files again)
    out: Path
    result: GradeResult


@pytest.fixture(scope="session")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Graded]:
    """The grading of ``reference/a9``, ``reference/a9-naive`` or ``student_template/a9`` (a path from
    the checkout's root), done once per session whoever asks: a full grading costs a minute or more,
    and several modules read the same one (what each asserts stays its own).  A snapshot is graded,
    so every reader sees the grading of the same files even if the tree is edited meanwhile."""
    from grader.cli import main

    done: dict[str, Graded] = {}

    def grade(tree: str) -> Graded:
        if tree not in done:
            root = tmp_path_factory.mktemp("graded")
            snapshot = Path(
                shutil.copytree(ROOT / tree, root / Path(tree).name, ignore=shutil.ignore_patterns("__pycache__"))
            )
            out = root / "out"
            assert main(["grade", str(snapshot), "--out", str(out), "--format", "json"]) == 0
            done[tree] = Graded(snapshot, out, GradeResult.load(out / "results.json"))
        return done[tree]

    return grade


@pytest.fixture(params=["idle", "contended"])
def load(request: pytest.FixtureRequest) -> Iterator[str]:
    """The machine as a test finds it ("idle"), or with a process spinning on every core beside the
    grading ("contended"): a verdict that may follow the machine's load is asserted under both (issue 43)."""
    spinners = []
    if request.param == "contended":
        spin = [sys.executable, "-I", "-c", "while True: pass"]
        spinners = [subprocess.Popen(spin) for _ in range(os.cpu_count() or 1)]
    try:
        yield request.param
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own temporary directory (``TMPDIR``), empty at its start: what the code under test
    makes or leaves there is the test's to see, never in the machine's /tmp."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    return temp


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Host]:
    """Every session host (``grader.matrix.host``) started from here on, in order."""
    hosts: list[Host] = []
    start = Host.start

    def recorded() -> Host:
        hosts.append(start())
        return hosts[-1]

    monkeypatch.setattr(Host, "start", staticmethod(recorded))
    return hosts


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[Host]:
    """Every session host a grading took from here on, in order."""
    hosts: list[Host] = []
    take = Host.take

    def recorded() -> Host:
        hosts.append(take())
        return hosts[-1]

    monkeypatch.setattr(Host, "take", staticmethod(recorded))
    return hosts
