"""The runtime half of the policy: the evasion corpus run for real in rank processes.

Every evasion in ``tests/corpus/policy/evasions`` is a ``collectives.py`` whose header names the
function that cheats (``# expect: <rule>@<line> in my_allreduce``).  Run through the matrix with
every layer a grading uses, the cheating function must not pass: the guard names the call
(``forbidden``), or the collective shows on the measured wire (``tampering``), or, for the one
that digs through the garbage collector, the audit hook refuses the attempt; static analysis
reports every one of them with a line number (``tests/test_static_checks.py``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from grader.junit import read_junit
from grader.runner import run_matrix
from grader.runtimes.torchdist import static
from grader.runtimes.torchdist.policy import STRICT

EVASIONS = sorted((Path(__file__).parent / "corpus" / "policy" / "evasions").glob("*.py"))
CASE_OF = {
    "my_broadcast": "test_broadcast[ws2-src0-float32-4x5]",
    "my_allreduce": "test_allreduce[ws2-float32-4x5]",
    "my_allgather": "test_allgather[ws2-float32-4x5]",
    "my_reduce_scatter": "test_reduce_scatter[ws2-float32-8x5]",
    "my_all_to_all": "test_all_to_all[ws2-s2g1-float32]",
}
#: Evasions refused before they reach any collective, so their verdict is the crash of the refused
#: attempt (gc is closed to student code; the store's file lies outside the rank's root; no RPC agent
#: was ever started); the static check reports them.
NOT_A_CALL = {"gc_referents", "default_store", "c_bindings_rpc_autograd"}
pytestmark = pytest.mark.slow


def target(path: Path) -> str | None:
    match = re.search(r"^# expect: \S+ in (my_\w+)", path.read_text(), re.M)
    return match.group(1) if match and match.group(1) in CASE_OF else None


@pytest.mark.parametrize("path", [p for p in EVASIONS if target(p)], ids=lambda p: p.stem)
def test_an_evasion_never_passes_at_run_time(tmp_path: Path, path: Path) -> None:
    box = tmp_path / "sandbox"
    (box / "src").mkdir(parents=True)
    (box / "src" / "__init__.py").write_text("")
    shutil.copy(path, box / "src" / "collectives.py")
    function = target(path)
    assert function is not None
    isolation_config = {"sandbox": str(box), "memory_mb": 2048, "nproc": 64, "cpu_s": 60, "file_size_mb": 64}
    only = [CASE_OF[function]]
    run = run_matrix(
        box,
        ["src/collectives.py"],
        tmp_path / "work",
        {},
        {},
        salt="s",
        pack="a9",
        isolation_config=isolation_config,
        only=only,
    )
    (case,) = read_junit(run.junit).values()
    if path.stem not in NOT_A_CALL:
        assert case.verdict.value in ("forbidden", "tampering"), case.message
        return
    assert case.verdict.value != "pass"
    findings = static.analyze_submission(box, ["src/collectives.py"], STRICT)
    assert any(f.function == function for f in findings), findings
