"""Which Python the README's commands install into (`scripts/python-env.sh`, sourced by install.sh,
grade-example.sh and test.sh): a distribution's externally managed Python (PEP 668) gets the project's
own `.venv`, said so; a venv, or a Python pip installs into, is used as it is (`.ci/run` relies on it).

Real interpreters, not fakes: Debian's `/usr/bin/python3` carries the EXTERNALLY-MANAGED marker on this
project's machines.  The whole first command from a fresh clone (`env -i PATH=/usr/bin:/bin bash
scripts/grade-example.sh`, a torch install) is a manual check: README, "Set up".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION_PYTHON = Path("/usr/bin/python3")


def externally_managed(python: Path) -> bool:
    """The interpreter's own answer: where its stdlib is, and whether the marker lies there."""
    stdlib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return (Path(stdlib) / "EXTERNALLY-MANAGED").is_file()


def source(project: Path, python: Path) -> tuple[str, str, str]:
    """Source a copy of the helper in `project` with PYTHON set: what PYTHON and `python3` then are,
    and what it said."""
    script = 'source scripts/python-env.sh; echo "$PYTHON"; command -v python3'
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(python)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    chosen, python3 = done.stdout.split()
    return chosen, python3, done.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "python-env.sh", tmp_path / "scripts")
    return tmp_path


@pytest.fixture
def distribution_python() -> Path:
    if not DISTRIBUTION_PYTHON.exists() or not externally_managed(DISTRIBUTION_PYTHON):
        pytest.skip(f"{DISTRIBUTION_PYTHON} is not an externally managed Python here")
    return DISTRIBUTION_PYTHON


@pytest.mark.slow  # a venv with pip: ensurepip takes 10 s, and over a minute on a loaded machine
def test_an_externally_managed_python_gets_the_projects_own_venv_and_says_so(project, distribution_python):
    if subprocess.run([str(distribution_python), "-c", "import ensurepip, venv"], check=False).returncode:
        pytest.fail(f"{distribution_python} cannot make a venv: apt-get install python3-venv", pytrace=False)
    venv = project / ".venv"

    chosen, python3, said = source(project, distribution_python)

    assert chosen == str(venv / "bin" / "python") and python3 == str(venv / "bin" / "python3")
    assert "creating the project's own virtual environment" in said and "externally managed (PEP 668)" in said
    assert subprocess.run([chosen, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0
    # made once: the next script (install.sh after grade-example.sh, or a second run) reuses it
    again = source(project, distribution_python)
    assert again[:2] == (chosen, python3) and "creating" not in again[2]


def test_a_venv_is_used_as_it_is_even_one_of_an_externally_managed_python(project, distribution_python, tmp_path):
    """The marker lies in the base's stdlib, which a venv shares: being inside a venv decides first."""
    venv = tmp_path / "own-venv"
    subprocess.run([str(distribution_python), "-m", "venv", "--without-pip", str(venv)], check=True)

    chosen, _, said = source(project, venv / "bin" / "python")

    assert chosen == str(venv / "bin" / "python") and said == ""
    assert not (project / ".venv").exists()


def test_a_python_pip_installs_into_is_used_as_it_is(project):
    """As `.ci/run` installs into the machine's python3 and runs the suite with that very interpreter."""
    base = Path(sysconfig.get_config_var("BINDIR") or "") / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not base.exists() or externally_managed(base):
        pytest.skip(f"no Python outside a venv that pip installs into here ({base})")

    chosen, _, said = source(project, base)

    assert chosen == str(base) and said == ""
    assert not (project / ".venv").exists()
