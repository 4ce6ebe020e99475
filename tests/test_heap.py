"""The session and every rank keep the memory a case frees for the next one (issue 23)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys
from grader.runtimes.torchdist import heap
if sys.argv[1] == "keep":
    heap.keep_freed(heap.RANK_TRIM)
def case():
    buffer = bytearray(8 << 20)  # a case's 8 MiB input, every page written
    del buffer
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
case()
before = faults()
case()
print(faults() - before)
"""


def faults_of_a_second_case(policy: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, policy], capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's thresholds")
def test_a_second_case_reuses_the_pages_the_first_one_freed() -> None:
    assert faults_of_a_second_case("default") > 1000  # glibc's default: 2,048 pages faulted in again
    assert faults_of_a_second_case("keep") < 100
