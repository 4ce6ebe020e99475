"""Issue 11's classes of attack, each held by the layer that stops it, case by case.

Each test runs a hostile corpus entry (``tests/corpus/hostile/<name>``, graded end to end with
exact scores by ``test_hostile_corpus.py``) through the matrix for a few cases, with every layer a
grading uses, and checks the verdict the session decided and why.  The static check is left out
on purpose: what is asserted here is what happens at run time, when the attempt is not caught
before it runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grader.junit import Case, read_junit
from grader.packs.a9 import catalog
from grader.runner import run_matrix

CORPUS = Path(__file__).parent / "corpus" / "hostile"
REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "a9"
FILES = ["src/collectives.py", "src/transformer.py"]
POLICY = {"src/transformer.py": ["all_reduce", "all_gather"]}  # the rubric's policy.allow
pytestmark = pytest.mark.slow


def matrix(
    tmp_path: Path,
    tree: Path,
    prefixes: tuple[str, ...],
    salt: str = "attack",
    sizes: tuple[int, ...] = (2, 4),
    limits: dict[str, float] | None = None,
) -> dict[str, Case]:
    """Verdicts of the cases of these world sizes whose id starts with one of ``prefixes``."""
    box = tmp_path / "sandbox"
    (box / "src").mkdir(parents=True)
    (box / "src" / "__init__.py").write_text("")
    for name in FILES:
        shutil.copy(tree / name, box / name)
    only = [c.name for c in catalog.all_cases() if c.name.startswith(prefixes) and c.world_size in sizes]
    isolation_config = {"sandbox": str(box), "memory_mb": 2048, "nproc": 64, "cpu_s": 60, "file_size_mb": 64}
    run = run_matrix(
        box,
        FILES,
        tmp_path / "work",
        limits or {},
        POLICY,
        salt=salt,
        pack="a9",
        isolation_config=isolation_config,
        only=only,
    )
    cases = read_junit(run.junit)
    assert set(cases) == set(only)
    return cases


def verdicts(cases: dict[str, Case]) -> set[str]:
    return {case.verdict.value for case in cases.values()}


def test_oracle_finds_no_expected_value_to_copy(tmp_path: Path) -> None:
    """Class 1: nothing in a rank holds an expected value; the grader package is not importable."""
    cases = matrix(tmp_path, CORPUS / "oracle_expected_values", ("test_reduce_scatter[",))
    assert verdicts(cases) == {"wrong"}


def test_a_patched_guard_cannot_let_a_collective_through(tmp_path: Path) -> None:
    """Classes 2 and 3: the guard is patched from inside and the trace forged; the wire tells."""
    cases = matrix(tmp_path, CORPUS / "guard_patched", ("test_allreduce[", "test_tensor_parallel["))
    allreduce = [c for name, c in cases.items() if name.startswith("test_allreduce[")]
    assert {c.verdict.value for c in allreduce} == {"tampering"}
    assert all("a built-in all_reduce ran although this task forbids it" in c.message for c in allreduce)
    # the tampering my_allreduce failed Task 1, so Task 2 runs with the grader's own: the patch never
    # runs there, and the honest tensor-parallel code passes (the defect is charged once)
    tensor_parallel = [c for name, c in cases.items() if name.startswith("test_tensor_parallel[")]
    assert {c.verdict.value for c in tensor_parallel} == {"pass"}


@pytest.mark.parametrize(
    ("function", "collective"),
    [("test_broadcast[", "broadcast"), ("test_allgather[", "all_gather"), ("test_all_to_all[", "all_to_all")],
)
def test_routes_around_the_guard_show_on_the_wire(tmp_path: Path, function: str, collective: str) -> None:
    """Class 2: a private binding, the original kept in a stub's closure, a dispatcher op by name."""
    cases = matrix(tmp_path, CORPUS / "unguarded_routes", (function,))
    assert verdicts(cases) == {"tampering"}
    assert all(f"a built-in {collective} ran" in c.message for c in cases.values())


def test_a_trace_of_the_wrong_types_is_that_ranks_crash(tmp_path: Path) -> None:
    """Class 3: every field of a reply is checked; scoring never sees a wrong type."""
    cases = matrix(tmp_path, CORPUS / "forged_trace_types", ("test_broadcast[", "test_allgather["))
    broadcast = {c.verdict.value for n, c in cases.items() if n.startswith("test_broadcast[")}
    assert broadcast == {"crash"}
    assert all("malformed reply" in c.message for n, c in cases.items() if n.startswith("test_broadcast["))
    assert {c.verdict.value for n, c in cases.items() if n.startswith("test_allgather[")} == {"pass"}


def test_no_exit_status_or_frame_of_a_rank_makes_a_grader_error(tmp_path: Path) -> None:
    """Class 4: os._exit(70) and a header nested 200,000 deep are crashes; honest cases after them pass."""
    prefixes = ("test_allgather[", "test_reduce_scatter[", "test_broadcast[")
    cases = matrix(tmp_path, CORPUS / "exit_70_and_deep_frame", prefixes)
    by_function = {p: {c.verdict.value for n, c in cases.items() if n.startswith(p)} for p in prefixes}
    assert by_function == {"test_allgather[": {"crash"}, "test_reduce_scatter[": {"crash"}, "test_broadcast[": {"pass"}}
    exits = [c.message for n, c in cases.items() if n.startswith("test_allgather[")]
    assert all("exited with status 70" in m for m in exits), exits


def test_kill_minus_one_reaches_no_other_grading(tmp_path: Path) -> None:
    """Class 5: two gradings at once; kill(-1) from a rank reaches no process at all (its uid is its
    own, in its group's PID namespace, and kill(-1) spares the caller)."""
    honest: dict[str, Case] = {}
    worker = threading.Thread(
        target=lambda: honest.update(matrix(tmp_path / "honest", REFERENCE, ("test_allgather[", "test_broadcast[")))
    )
    worker.start()
    hostile = matrix(tmp_path / "hostile", CORPUS / "kill_every_process", ("test_allgather[", "test_broadcast["))
    worker.join()
    assert verdicts(honest) == {"pass"}
    assert verdicts(hostile) == {"pass"}


def test_memory_in_a_memfd_is_counted(tmp_path: Path) -> None:
    """Class 7: 3 GiB written to a memfd, never mapped: the rank's cgroup counts it.  Writing 2 GiB
    takes this machine about 3 s, more than the default budget of a small case: the budget is raised
    so that the memory limit, not the clock, is what ends the case."""
    limits = {"case_timeout_floor_s": 30.0, "case_timeout_s": 30.0}
    cases = matrix(tmp_path, CORPUS / "memfd_3gib", ("test_allgather[ws2-float32",), limits=limits)
    assert verdicts(cases) == {"memory"}


@pytest.mark.parametrize("tree", ["reference/a9", "reference/a9-naive"])
def test_honest_code_grades_the_same_under_any_salt(tmp_path: Path, tree: str) -> None:
    """Secret inputs: the verdicts and the measured traces do not depend on the salt."""
    root = Path(__file__).resolve().parents[1] / tree
    prefixes = ("test_allreduce[", "test_all_to_all[", "test_ulysses[", "test_trace_")
    runs = [matrix(tmp_path / salt, root, prefixes, salt, sizes=(2, 4, 8)) for salt in ("a", "bb", "a9")]
    assert all(verdicts(run) == {"pass"} for run in runs)

    def measured(run: dict[str, Case]) -> dict[str, dict]:  # every trace field but the events' times
        return {n: {k: v for k, v in (c.trace or {}).items() if k != "events"} for n, c in run.items() if c.trace}

    assert measured(runs[0]) == measured(runs[1]) == measured(runs[2])
    assert all(trace["measured"] for trace in measured(runs[0]).values())


@pytest.mark.parametrize(
    "function",
    [
        "test_broadcast[ws2-src0-",
        "test_allgather[ws2-",
        "test_allreduce[ws2-",
        "test_reduce_scatter[ws2-",
        "test_all_to_all[ws2-",
    ],
)
def test_no_channel_beside_gloos_streams_carries_data(tmp_path: Path, function: str) -> None:
    """Issue 20, class 1: UDP datagrams, empty datagrams, header fields of Gloo's sockets, a TCP
    stream from another loopback address, urgent data.  The filter refuses each call (a crash that
    names it); had one got through, the wire would show it (``test_traffic.py``)."""
    cases = matrix(tmp_path, CORPUS / "side_channels", (function,), sizes=(2,))
    assert verdicts(cases) == {"crash"}
    assert all("PermissionError: [Errno 1] Operation not permitted" in c.message for c in cases.values())


def test_a_flood_and_a_hidden_collective_never_pass(tmp_path: Path, load: str) -> None:
    """Issue 20, class 2: the loopback flooded, then a forbidden all_to_all through another module's
    attributes: measured, the collective is tampering; lost, the case runs again and a lost
    measurement is tampering too.  Either way, never a pass, and the same verdict on a loaded machine:
    while the flood's messages cross the wire the case is making progress, not hanging (issue 43)."""
    cases = matrix(
        tmp_path, CORPUS / "flood_hidden_all_to_all", ("test_all_to_all[ws2-s0g0", "test_all_to_all[ws4-s0g0")
    )
    assert verdicts(cases) == {"tampering"}
    assert all("all_to_all ran" in c.message or "could not measure" in c.message for c in cases.values())


def test_a_thread_left_running_ends_with_its_case(tmp_path: Path, load: str) -> None:
    """A thread the submission's call leaves spinning is the case's hang, which names it (issue 39: right
    values no longer pass), and its ranks are replaced, so no later case runs beside it; the other
    allgather cases at that world size are not run, as after any hang.  The same on a loaded machine."""
    cases = matrix(tmp_path, CORPUS / "thread_outlives_case", ("test_allgather[ws2-", "test_broadcast[ws2-src0-"))
    allgather = [c for name, c in sorted(cases.items()) if name.startswith("test_allgather[")]
    hung = [c for c in allgather if c.verdict == "hang"]
    assert len(hung) == 1 and {c.verdict for c in allgather} == {"hang", "not_run"}
    assert hung[0].message == (
        "a thread was left running after the case: ranks 0, 1: 'hostile-corpus' at collectives.py:155 in _spin"
    )
    assert all(c.verdict == "pass" and c.message == "" for n, c in cases.items() if n.startswith("test_broadcast["))


def test_a_thread_started_at_import_is_charged_to_its_module_once(tmp_path: Path, load: str) -> None:
    """Issue 39: a spinning thread started by collectives.py's import fails every case of that module
    (a hang naming the thread, as for an import that never finished) after a single run, while
    transformer.py, which imports it, is graded with the grader's collectives in its place."""
    tree = tmp_path / "submission"
    subprocess.run([sys.executable, str(CORPUS / "thread_at_import" / "make.py"), str(tree)], check=True, timeout=60)
    cases = matrix(tmp_path, tree, ("test_broadcast[ws2-src0-", "test_allreduce[ws2-", "test_ulysses[ws2-"))
    ran = [c for n, c in cases.items() if not n.startswith("test_ulysses[")]
    assert {c.verdict for c in ran} == {"hang"}
    assert ran[0].message.startswith("a thread was left running after the case: ranks 0, 1: 'warm-up' at ")
    assert all(c.message.startswith("importing collectives.py leaves a thread running") for c in ran[1:])
    assert {c.verdict for n, c in cases.items() if n.startswith("test_ulysses[")} == {"pass"}
