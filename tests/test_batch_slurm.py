"""`grader batch --cluster slurm` on a real single-node Slurm (``tests/slurm.py``): the class is graded
through real ``sbatch`` jobs of dask-jobqueue as the local path grades it, the salt is nowhere in Slurm's
scripts, state or logs, and a worker job cancelled mid-grade costs a regrade, never the student's row.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path

import pytest
import yaml
from slurm import job_of, running_slurm, unavailable
from test_batch import submission
from test_batch_cluster import SALT, _wait_for_grade, batch, written

pytest.importorskip("dask_jobqueue", reason='dask-jobqueue is an optional extra: pip install "dist-grader[cluster]"')
pytestmark = pytest.mark.slow  # each job starts a Dask worker that checks torch imports: tens of seconds


@pytest.fixture(scope="module")
def slurm():
    why = unavailable()
    if why:
        pytest.skip(why)
    with running_slurm() as running, pytest.MonkeyPatch.context() as env:
        env.setenv("SLURM_CONF", str(running.conf))  # for the sbatch and scancel dask-jobqueue runs
        yield running


def cluster_config(tmp_path: Path, slurm) -> Path:
    """The cluster guide's example (docs/instructors/cluster.md), shrunk to this machine: one grade per job,
    two jobs at most."""
    config = {
        "queue": "grading",
        "cores": 1,
        "processes": 1,
        "memory": "2GB",
        "walltime": "00:20:00",
        "python": sys.executable,
        "job_script_prologue": [f"cd {tmp_path}"],
        "log_directory": str(tmp_path / "jobs"),
        "scheduler_options": {"host": "127.0.0.1", "dashboard_address": ":0"},
        "max_jobs": 2,
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_class_graded_through_sbatch_jobs_equals_the_local_path_and_the_salt_stays_out_of_slurm(tmp_path, slurm):
    roster = tmp_path / "roster"
    submission(roster, "a9-alice")
    submission(roster, "a9-bob", "forbidden")
    submission(roster, "a9-dave", "crash")
    secret = tmp_path / "secret"
    secret.write_text(SALT)
    log = tmp_path / "grades.log"
    batch(roster, tmp_path / "local", log, secret_file=secret)
    progress = StringIO()
    config = cluster_config(tmp_path, slurm)
    batch(
        roster, tmp_path / "slurm", log, secret_file=secret, cluster="slurm", cluster_config=config, progress=progress
    )

    assert written(tmp_path / "slurm") == written(tmp_path / "local")
    assert progress.getvalue().splitlines()[-1].startswith("[3/3]")
    assert len(log.read_text().splitlines()) == 6  # three grades here, three in jobs
    jobs_dir = tmp_path / "jobs"
    assert list(jobs_dir.glob("*.out")) or list(jobs_dir.glob("*.err")), "no Slurm job ran"
    for root in (slurm.root, jobs_dir):  # job scripts Slurm saved, its state and logs, the jobs' logs
        for path in root.rglob("*"):
            if path.is_file():
                assert SALT.encode() not in path.read_bytes(), path


def test_a_worker_job_cancelled_mid_grade_costs_a_regrade_and_nothing_else(tmp_path, slurm):
    roster = tmp_path / "roster"
    submission(roster, "a9-alice", "sleep=8")
    submission(roster, "a9-bob")
    log, out = tmp_path / "grades.log", tmp_path / "out"
    batch(roster, tmp_path / "local", log)
    log.unlink()
    done: dict[str, object] = {}
    config = cluster_config(tmp_path, slurm)
    runner = threading.Thread(
        target=lambda: done.update(rows=batch(roster, out, log, cluster="slurm", cluster_config=config))
    )
    runner.start()
    first = _wait_for_grade(log, "a9-alice", timeout=300)
    job = job_of(first)
    subprocess.run(["scancel", job], check=True, timeout=30, env=os.environ)
    runner.join(timeout=600)

    rows = {r.student: r for r in done["rows"]}  # type: ignore[attr-defined]
    assert {name: row.status for name, row in rows.items()} == {"alice": "graded", "bob": "graded"}
    names = [line.split()[0] for line in log.read_text().splitlines()]
    assert names.count("a9-alice") == 2 and names.count("a9-bob") == 1
    assert written(out) == written(tmp_path / "local")
