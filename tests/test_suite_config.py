"""How the grader's own suite runs: it never runs a submission's code (the corpora are data), and the
modules that share a worker share one under pytest-xdist."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def test_corpus_directories_are_never_collected(pytestconfig: pytest.Config) -> None:
    # tests/corpus/hostile/shipped_config carries a conftest.py that turns every failure into a pass
    assert "corpus" in pytestconfig.getini("norecursedirs")


def test_the_modules_that_share_a_worker_run_on_one_under_xdist() -> None:
    """``--dist loadgroup`` (``scripts/test.sh``) keeps a group on one worker only if each test carries
    its group's mark before xdist reads it.  Once it did not: every module's tests were dealt to both
    workers, two ``test_isolation`` tests took the same free uid at once and counted each other's
    tasks, and the gradings shared through ``graded`` and ``full_grades`` were made on both."""
    quick = (
        "tests/test_isolation.py::test_without_a_uid_the_uid_layer_says_why",
        "tests/test_isolation.py::test_the_tasks_of_a_uid_are_every_thread_of_its_processes_and_nothing_else",
        "tests/test_rubric.py::test_a9_has_exactly_the_course_items_and_points",
        "tests/test_rubric.py::test_a9_scoring_kinds_and_targets",
        "tests/test_rubric.py::test_a9_policy_limits_late_and_digest",
        "tests/test_rubric.py::test_default_rubric_is_the_checkouts_a9",
    )
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v", *quick]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # CI's: this run's own JUnit file
    done = subprocess.run(cmd, cwd=Path(__file__).parent.parent, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .*?(PASSED|SKIPPED) tests/(\w+)\.py::\w+@(\w+)", done.stdout, re.MULTILINE)
    assert len(ran) == len(quick), done.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, _, module, group in ran:
        assert group == module  # neither shares its worker with another module (conftest.SHARED_WORKER)
        workers.setdefault(module, set()).add(worker)
    assert {module: len(on) for module, on in workers.items()} == {"test_isolation": 1, "test_rubric": 1}, workers
