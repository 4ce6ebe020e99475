"""``grader --version`` prints pyproject.toml's version (issue 61, item 5): the installed distribution's
metadata is the one source of it, and ``grader.__version__`` (written into every results.json and cache
key) is the same value."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grader

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def declared() -> str:
    project = PYPROJECT.read_text().split("[project]", 1)[1].split("\n[", 1)[0]
    found = re.search(r'^version = "([^"]+)"$', project, re.M)
    assert found, "pyproject.toml's [project] has no version"
    return found.group(1)


def test_grader_version_prints_pyprojects_version():
    done = subprocess.run([sys.executable, "-m", "grader", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"grader {declared()}"


def test_the_package_reports_the_same_version():
    assert grader.__version__ == declared()
