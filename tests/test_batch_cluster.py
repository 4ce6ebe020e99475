"""`grader batch --cluster`: the same class graded on Dask gives the same gradebook and results as the local
path; a lost worker costs a regrade, never the student's row; a worker that cannot grade stops the batch.

The grades are the fake grader of ``test_batch`` (real Dask, real worker processes, no student code); the
class has a hanging, a crashing and an erroring grade.  ``test_batch_slurm`` does the same on a real Slurm.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from io import StringIO
from pathlib import Path

import pytest
from test_batch import FAKE, a_class, gradebook, invocations, oracle, rubric_variant, submission

from grader.seal import SEAL_FILE, broken, key_path, load_key

distributed = pytest.importorskip("distributed", reason='Dask is an optional extra: pip install "dist-grader[cluster]"')

SALT = "s3cret-salt-of-the-course"


def fake(log: Path) -> list[str]:
    """The fake grader, told where to log in its own environment: a worker started before the test
    does not have the test's."""
    return ["env", f"FAKE_GRADER_LOG={log}", *FAKE]


def batch(roster: Path, out: Path, log: Path, **kwargs):
    from grader.batch import run_batch

    kwargs.setdefault("progress", StringIO())
    return run_batch(roster, out, grade_cmd=fake(log), **kwargs)


def written(out: Path) -> dict[str, object]:
    """Every file a batch wrote, the seconds a grade took aside.  A cache seal holds a digest of the
    outcome, seconds included: what compares is the digests of the rest, and that the seal holds."""
    files: dict[str, object] = {}
    key = load_key(key_path(None))
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.name != ".batch.lock":
            data: object = path.read_bytes()
            if path.name == "batch-outcome.json":
                data = {k: v for k, v in json.loads(path.read_text()).items() if k != "seconds"}
            elif path.name == SEAL_FILE:
                assert broken(path.parent.parent, path.parent.name, key) == "", path
                data = {k: v for k, v in json.loads(path.read_text())["entries"].items() if k != "batch-outcome.json"}
            files[str(path.relative_to(out))] = data
    return files


@pytest.fixture(scope="module", autouse=True)
def nothing_outlives_the_module(tmp_path_factory):
    """Every Dask server (scheduler, nanny, worker) makes its directory in Dask's temporary directory,
    by default /tmp/dask-scratch-space, which stays: here it is the module's.  And Dask's worker
    processes are spawned by multiprocessing, which starts its resource tracker in this process: a
    child of pytest that would live as long as pytest does (and that every later test counting this
    process's children would see); it is stopped after the module's clusters (whatever spawns next
    starts it again)."""
    import dask

    with dask.config.set({"temporary-directory": str(tmp_path_factory.mktemp("dask"))}):
        yield
    from multiprocessing import resource_tracker

    resource_tracker._resource_tracker._stop()


@pytest.fixture(scope="module")
def cluster(nothing_outlives_the_module):
    """A Dask cluster of two worker processes, reached by its address as any existing scheduler is."""
    import dask

    from grader.batch.cluster import MAX_LOSSES

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": MAX_LOSSES}),
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as running,
    ):
        yield running.scheduler_address


@pytest.mark.slow
def test_a_local_cluster_grades_the_class_as_the_local_path_does_and_shares_its_cache(tmp_path, cluster):
    roster, log = a_class(tmp_path), tmp_path / "grades.log"
    progress = StringIO()
    rows = batch(roster, tmp_path / "local", log, timeout=8)
    on_dask = batch(roster, tmp_path / "dask", log, timeout=8, cluster="local:2", progress=progress)

    assert [(r.student, r.status) for r in on_dask] == [(r.student, r.status) for r in rows]
    assert {r.status for r in rows} == {"graded", "timeout", "grader_error", "no_submission"}
    assert written(tmp_path / "dask") == written(tmp_path / "local")
    graded = ["a9-alice", "a9-bob.zip", "a9-carol", "a9-dave", "a9-erin", "a9-gina"]
    assert sorted(invocations(log)) == sorted(2 * graded)
    lines = progress.getvalue().splitlines()
    assert lines[-1].startswith("[7/7]") and "ETA" in lines[-1]
    assert any(line.startswith("dashboard: http") for line in lines) or not _bokeh()

    # Resuming on another cluster (an existing scheduler, by address) grades again only those whose
    # grade did not finish, as a local rerun does.
    log.unlink()
    batch(roster, tmp_path / "local", log, timeout=8, cluster=cluster)
    assert sorted(invocations(log)) == ["a9-carol", "a9-dave", "a9-erin"]


def _bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def test_sent_submissions_and_rubric_grade_as_on_a_shared_filesystem_and_the_salt_stays_off_argv(tmp_path, cluster):
    from grader.results import GradeResult

    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    submission(roster, "a9-bob", "forbidden")
    rubric = rubric_variant(tmp_path, "capped", ("  cap: 5\n", "  cap: 1\n"))
    secret = tmp_path / "secret"
    secret.write_text(SALT + "\n")
    log = tmp_path / "grades.log"
    options = {"rubric": rubric, "secret_file": secret}
    batch(roster, tmp_path / "local", log, **options)
    batch(roster, tmp_path / "sent", log, cluster=cluster, send_submissions=True, **options)

    assert gradebook(tmp_path / "sent") == gradebook(tmp_path / "local")
    for name in ("alice", "bob"):
        local = GradeResult.load(tmp_path / "local" / "students" / name / "results.json").to_dict()
        sent = GradeResult.load(tmp_path / "sent" / "students" / name / "results.json").to_dict()
        assert sent["submission"].pop("source").endswith(f"/submission/a9-{name}")  # unpacked on the worker
        local["submission"].pop("source")
        assert sent == local
        assert GradeResult.load(tmp_path / "sent" / "students" / name / "results.json") == oracle(
            tmp_path / "sent", name, rubric
        )
    digest = hashlib.sha256(SALT.encode()).hexdigest()[:12]
    lines = log.read_text().splitlines()
    assert len(lines) == 4 and all(f"salt={digest} argv-clean=True" in line for line in lines)


def test_a_student_whose_worker_dies_mid_grade_is_graded_again_on_another(tmp_path, cluster):
    from grader.rescore import rescore
    from grader.rubric import load_rubric

    roster = tmp_path / "roster"
    submission(roster, "a9-alice", "sleep=6")
    submission(roster, "a9-bob")
    log, out = tmp_path / "grades.log", tmp_path / "out"
    done: dict[str, object] = {}
    runner = threading.Thread(target=lambda: done.update(rows=batch(roster, out, log, cluster=cluster)))
    runner.start()
    first = _wait_for_grade(log, "a9-alice")
    worker = _parent(first)
    os.kill(worker, signal.SIGKILL)  # the worker process, mid-grade: as a node lost or a job preempted
    runner.join(timeout=120)

    rows = {r.student: r for r in done["rows"]}  # type: ignore[attr-defined]
    assert rows["alice"].status == "graded" and rows["bob"].status == "graded"
    assert invocations(log).count("a9-alice") == 2  # graded again, once
    assert not Path(f"/proc/{first}").exists() or _zombie(first)  # the lost grade died with its worker
    assert (out / "students" / "alice" / "results.json").is_file()
    assert rescore(out / "students" / "alice" / "graded", load_rubric()).score == rows["alice"].total


@pytest.mark.slow
def test_a_grade_that_keeps_killing_its_worker_is_a_grader_error_after_bounded_losses(tmp_path, cluster):
    from grader.batch.cluster import MAX_LOSSES

    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    submission(roster, "a9-mallory", "kill-worker")
    log = tmp_path / "grades.log"
    rows = {r.student: r for r in batch(roster, tmp_path / "out", log, cluster=cluster)}
    assert rows["alice"].status == "graded"
    assert rows["mallory"].status == "grader_error"
    assert f"lost {MAX_LOSSES + 1} times" in rows["mallory"].message
    # Dask counts a worker that died before the grade began as a loss too (CI saw 3 grades for 4 losses)
    assert 1 <= invocations(log).count("a9-mallory") <= MAX_LOSSES + 1


def test_a_worker_that_cannot_import_torch_stops_the_batch_with_that_message(tmp_path):
    from grader.errors import UserError

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "torch.py").write_text("raise ImportError('no torch on this node')\n")
    roster = tmp_path / "roster"
    for name in ("a9-alice", "a9-bob", "a9-carol"):
        submission(roster, name)
    log = tmp_path / "grades.log"
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, dashboard_address=":0", env={"PYTHONPATH": str(broken)}
        ) as unfit,
        pytest.raises(UserError) as stopped,
    ):
        batch(roster, tmp_path / "out", log, cluster=unfit.scheduler_address)
    message = str(stopped.value)
    assert message.count("cannot `import torch, grader`") == 1 and "no torch on this node" in message
    assert invocations(log) == []  # nobody was graded, nobody got an error row
    assert not list((tmp_path / "out" / "students").glob("*/batch-outcome.json"))


def test_with_similarity_each_student_graded_on_a_worker_is_fingerprinted_there(tmp_path, cluster, monkeypatch):
    """``--cluster --similarity``: the client never fingerprints a student a worker graded (it would
    fail here: its ``fingerprint`` raises), and the report is byte for byte ``grader similarity``'s.  The
    boilerplate reaches the workers (STAR, erin's code, is given out: erin has nothing to compare), and
    they fingerprint their own copy of each submission (sent, as to workers that do not see the roster).
    Students not graded in the run (cached on a rerun, or nothing handed in) are fingerprinted here."""
    pytest.importorskip("copydetect", reason="the similarity extra: pip install 'dist-grader[similarity]'")
    from grader.similarity import fingerprints
    from grader.similarity.check import run_similarity
    from tests.test_similarity import RING, STAR, STARTER, TREE, disguise

    roster = tmp_path / "roster"
    for name, body in [
        ("a9-alice", RING),
        ("a9-bob", disguise(RING, 4)),
        ("a9-carol", TREE),
        ("a9-dan", disguise(TREE, 5)),
        ("a9-erin", STAR),
        ("a9-gina", STARTER),
    ]:
        submission(roster, name, body=body)
    (roster / "a9-lee").mkdir()  # nothing handed in: no task, compared (as nothing) by the client
    given = tmp_path / "given.py"
    given.write_text(STAR)
    run_similarity(roster, tmp_path / "local", pack_ref="a9", boilerplate=[given])
    expected = {name: (tmp_path / "local" / name).read_bytes() for name in ("similarity.csv", "similarity.html")}

    def on_the_client(*args, **kwargs):
        raise AssertionError("fingerprinted on the client")

    monkeypatch.setattr(fingerprints, "fingerprint", on_the_client)  # the workers are processes of their own
    out, log = tmp_path / "out", tmp_path / "grades.log"
    options = {"cluster": cluster, "send_submissions": True, "similarity": True, "boilerplate": [given]}
    rows = {r.student: r.status for r in batch(roster, out, log, **options)}
    assert rows == {**dict.fromkeys(["alice", "bob", "carol", "dan", "erin", "gina"], "graded"), "lee": "no_submission"}
    found = {name: (out / "similarity" / name).read_bytes() for name in expected}
    assert found == expected
    assert [row.split(",")[:2] for row in found["similarity.csv"].decode().splitlines()[1:]] == [
        ["alice", "bob"],
        ["carol", "dan"],
    ]
    assert b"erin: nothing but the starter" in found["similarity.html"]

    with pytest.raises(AssertionError, match="fingerprinted on the client"):  # everyone cached: the client's work
        batch(roster, out, log, **options)
    monkeypatch.undo()
    batch(roster, out, log, **options)
    assert {name: (out / "similarity" / name).read_bytes() for name in expected} == expected
    assert sorted(invocations(log)) == sorted(f"a9-{name}" for name in rows if name != "lee")  # graded once


def _wait_for_grade(log: Path, name: str, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines() if log.exists() else []:
            if line.split()[0] == name:
                return int(line.split()[1])
        time.sleep(0.1)
    raise AssertionError(f"{name} was never graded")


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_the_real_grader_on_a_local_cluster_grades_hostile_and_honest_work_as_the_local_path(tmp_path):
    """Real gradings: the reference, a hostile entry that signals its parents, one whose import never
    finishes and one that cannot be imported; results equal (the timings and sandbox path aside)."""
    import shutil

    from grader.batch import run_batch

    corpus = Path(__file__).parent / "corpus" / "hostile"
    trees = {
        "reference": Path(__file__).resolve().parents[1] / "reference" / "a9",
        "kill_parents": corpus / "kill_parents",
        "import_never_finishes": corpus / "import_never_finishes",
        "syntax_error": corpus / "syntax_error",
    }
    roster = tmp_path / "roster"
    for name, tree in trees.items():
        shutil.copytree(tree, roster / name, ignore=shutil.ignore_patterns("__pycache__", "expected.json"))
    local = run_batch(roster, tmp_path / "local", jobs=2, progress=StringIO())
    on_dask = run_batch(roster, tmp_path / "dask", cluster="local:2", progress=StringIO())

    assert [(r.student, r.status, r.total) for r in on_dask] == [(r.student, r.status, r.total) for r in local]
    assert {r.status for r in local} == {"graded"}, [r.message for r in local]
    assert (tmp_path / "dask" / "gradebook.csv").read_bytes() == (tmp_path / "local" / "gradebook.csv").read_bytes()
    for name in trees:
        assert _timeless(tmp_path / "dask", name) == _timeless(tmp_path / "local", name), name


SHOW_HOST = """
from grader.matrix.host import Host, attach_server
attach_server()
host = Host.start()
print("host-parent", host.parent, flush=True)
host.close()
"""


def _servers(client) -> dict[int, int]:
    """Each worker process's pid, and its host server's (0: none)."""
    from grader.batch.warm_workers import worker_servers

    def ours(dask_worker) -> tuple[int, int]:  # run by client.run, outside any task: Dask hands it the worker
        server, _ = worker_servers(dask_worker)
        return os.getpid(), server.pid if server is not None else 0

    return dict(client.run(ours).values())


def test_a_local_clusters_directory_is_locked_while_it_runs_and_removed_after(temp_dir):
    """Its scheduler and workers write in a ``grader-dask-*`` directory of the temporary directory, which
    ``tempdirs.sweep`` (every grading's start) leaves alone while the cluster's process lives and
    removes once it is dead (``tests/test_tempdirs.py``: a maker killed with SIGKILL)."""
    from grader import tempdirs
    from grader.batch.cluster import connect, parse_cluster

    with connect(parse_cluster("local:1"), None, 1, StringIO()) as client:
        (scratch,) = temp_dir.glob("grader-dask-*")
        assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.local_directory).startswith(str(scratch))
        assert tempdirs.sweep(grace_s=0) == [] and scratch.is_dir()
    assert not scratch.exists()


@pytest.mark.slow
def test_each_worker_keeps_a_host_server_its_grades_fork_their_hosts_from_until_the_batch_ends(tmp_path):
    """Issue 41 on Dask: a warm client's workers each start a host server of their own, one that lives
    as long as the worker and is replaced if it dies; a warm task's grade forks its host from its
    worker's server, a cold one (``--cold-hosts``) starts it itself; the servers end with the batch's
    client."""
    import tarfile
    from io import BytesIO

    from grader.batch.cluster import GradeTask, connect, grade_on_worker, parse_cluster

    with connect(parse_cluster("local:2"), None, 2, StringIO(), warm=True) as client:
        servers = _servers(client)
        assert len(servers) == 2 and all(servers.values()), servers
        assert {_parent(server) for server in servers.values()} == set(servers)  # each its own worker's child
        parents = {}
        for warm in (True, False):
            task = GradeTask([sys.executable, "-c", SHOW_HOST], str(tmp_path), [], None, 120, warm=warm)
            reply = client.submit(grade_on_worker, task, pure=False).result()
            with tarfile.open(fileobj=BytesIO(reply.output)) as tar:
                log = tar.extractfile("./grade.log").read().decode()  # type: ignore[union-attr]
            parents[warm] = int(log.split("host-parent ")[1].split()[0])
        assert parents[True] in servers.values()
        assert parents[False] not in servers.values() and parents[False] not in servers  # its own grade's
        # a server that died is replaced for its worker's next grade, not left to make the rest cold
        worker, dead = next(iter(servers.items()))
        os.kill(dead, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not _zombie(dead) and time.monotonic() < deadline:
            time.sleep(0.05)
        servers = _servers(client)
        assert servers[worker] not in (0, dead) and _parent(servers[worker]) == worker
    deadline = time.monotonic() + 10
    while not all(_zombie(server) for server in servers.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_zombie(server) for server in servers.values())


def _grade_servers() -> list[int]:
    """The grade servers (``python -m grader.batch.grade_server --serve``) of this test's own cluster: its
    workers are this process's children.  Never another test's: under xdist, killing a server another
    worker's batch holds once left this one with nothing killed and that one regrading."""
    from tests.processes import descendants

    found = []
    for pid in descendants(os.getpid()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"grader.batch.grade_server" in argv and b"--serve" in argv:
            found.append(pid)
    return found


@pytest.mark.slow
def test_a_grade_whose_grade_server_dies_under_it_on_a_worker_is_graded_again(tmp_path, monkeypatch):
    """A warm worker forks each grade from its grade server, and the grade dies with it (PDEATHSIG): the
    worker answers that the grade was lost, not a grade of nothing, and the student is graded again."""
    from grader.batch import run_batch
    from grader.batch.cluster import ClusterGrader
    from grader.batch.grade_server import GRADE_NAME
    from tests.processes import comm, descendants
    from tests.test_spare_host import RUBRIC, TOY

    roster = tmp_path / "roster"
    for name in ("ann", "ben"):
        shutil.copytree(TOY / "submission", roster / name)
    replies: list[str] = []
    submit = ClusterGrader._submit

    def recorded(self, student):
        reply = submit(self, student)
        replies.append(reply.lost)
        return reply

    monkeypatch.setattr(ClusterGrader, "_submit", recorded)
    killed: list[int] = []
    stop = threading.Event()

    def kill_once_it_grades() -> None:
        while not stop.is_set():
            for server in _grade_servers():
                # a grade that has read its command: its fork was answered (a kill before that makes the
                # grade start cold instead, and nothing is lost), and it dies with its server now
                if any(comm(pid) == GRADE_NAME for pid in descendants(server)):
                    os.kill(server, signal.SIGKILL)
                    killed.append(server)
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_once_it_grades)
    killer.start()
    try:
        rows = run_batch(roster, tmp_path / "out", rubric=RUBRIC, cluster="local:2", progress=StringIO())
    finally:
        stop.set()
        killer.join()
    assert killed
    assert [(row.student, row.status, row.total) for row in rows] == [("ann", "graded", 10.0), ("ben", "graded", 10.0)]
    assert len(replies) == 3 and sum(bool(lost) for lost in replies) == 1, replies
    assert "was stopped" in next(lost for lost in replies if lost)


def _timeless(out: Path, student: str) -> dict:
    """A student's results.json but for what depends on the machine's speed: the seconds its stages
    took, trace timestamps, and the measured time budgets quoted in hang messages and feedback."""
    result = json.loads((out / "students" / student / "results.json").read_text())
    for timed in ("timings", "trace"):
        result.pop(timed)
    result["cases"] = [(case["id"], case["verdict"]) for case in result["cases"]]
    for task in result["tasks"]:
        task["items"] = [(item["id"], item["score"], item["status"]) for item in task["items"]]
    return result


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("local", ("local", 2, "", 2)),
        ("local:3", ("local", 3, "", 3)),
        ("tcp://10.0.0.5:8786", ("scheduler", 2, "tcp://10.0.0.5:8786", 1)),
        ("dask://sched:8786", ("scheduler", 2, "tcp://sched:8786", 1)),
        ("slurm", ("slurm", 2, "", 1)),
    ],
)
def test_the_cluster_forms(spec, parsed):
    """And how many gradings share a worker's machine, which each grade's memory share divides by: a
    local cluster's workers all share this one; a remote worker's neighbours are not known (1)."""
    from grader.batch.cluster import parse_cluster

    found = parse_cluster(spec)
    assert (found.kind, found.workers, found.address, found.machine_jobs) == parsed


def test_a_wrong_cluster_form_or_a_cluster_option_alone_is_a_clear_error(tmp_path, capsys):
    from grader import cli

    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    out = str(tmp_path / "out")
    for argv, message in [
        (["--cluster", "local:0"], "local:N takes a positive number"),
        (["--cluster", "pbs"], "expected local[:N], tcp://HOST:PORT"),
        (["--send-submissions"], "go with --cluster"),
    ]:
        assert cli.main(["batch", str(roster), "--out", out, *argv]) == 1
        assert message in capsys.readouterr().err
