"""The package alone, as a student installs it (issue 38): a fresh venv holding CPU torch and
`pip install` of this checkout, non-editable and without extras, grades every pack's reference to its
exact score.  The rest of the suite cannot see an undeclared import: its environment has the dev and
cluster extras, whose dashboard pulled numpy in while the HW12 pack imported it undeclared.

One venv per session (installing torch is most of this test's cost) and the four gradings in one test.
`pytest -m fresh_venv` finds it; `.ci/run` runs it through the suite.  `TORCH_INDEX_URL` is honoured as
`scripts/install.sh` honours it; `TORCH_SPEC` likewise.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.fresh_venv]

#: each pack's reference, handed in as its handout asks (scripts/student_platforms.py)
REFERENCES = ["reference/a9", "reference/a4", "reference/hw12", "reference/a5"]
#: what a clone has not, or the build must not see: git's data, build outputs, caches, a local venv
NOT_SHIPPED = (".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".venv", "out", "artifacts", ".hypothesis")


def platforms() -> ModuleType:
    spec = importlib.util.spec_from_file_location("student_platforms", ROOT / "scripts" / "student_platforms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def pip_install(python: Path, *args: str) -> None:
    """This interpreter's pip installs into the venv (`--python`): the venv needs no pip of its own.
    No byte-compiling: it doubles torch's install time and the grader compiles what it imports."""
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="session")
def student_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python of a venv made from the base interpreter (never this environment's site-packages),
    with torch first, as the students' guide says (docs/students/index.md), then the checkout as a student's
    pip builds it."""
    venv = tmp_path_factory.mktemp("student-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    index = os.environ.get("TORCH_INDEX_URL")
    pip_install(python, os.environ.get("TORCH_SPEC", "torch==2.13.0"), *(["--index-url", index] if index else []))
    # A copy of the checkout, as a student's pip gets it: setuptools builds in the tree it is given, and
    # its build/ and egg-info stay in the copy, not in this checkout
    checkout = tmp_path_factory.mktemp("checkout") / "dist-grader"
    source = Path(shutil.copytree(ROOT, checkout, ignore=shutil.ignore_patterns(*NOT_SHIPPED)))
    pip_install(python, str(source))
    return python


def test_the_package_alone_grades_every_packs_reference_exactly(student_python, tmp_path):
    module = platforms()
    expected = {tree: (pack, want) for tree, pack, want in module.EXPECTED}
    grades = [module.grade(str(student_python), tree, *expected[tree], tmp_path) for tree in REFERENCES]
    wrong = [f"{g.tree}: {g.score} (want {g.want:g}) {g.stderr}" for g in grades if g.score != g.want]
    assert not wrong, "\n".join(wrong)
