"""The torch releases the grader is tested with, and the check a local grading makes at its start.

A grade compares what a student's code computes and sends under the installed torch with what the
grader expects; a torch nobody graded the references with may change a dtype rule, Gloo's behaviour or
an import the zygote makes, and the student would see a grade that differs from the grade of record.
So an untested torch is refused with a message that says which to install: never a wrong grade.
`GRADER_UNTESTED_TORCH=1` grades anyway, with a warning, for whoever is testing a new release
(`scripts/gpu-check.sh` on a machine's own torch).  The docker backend grades with the image's torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import metadata

from grader.errors import UserError

#: (major, minor) releases every pack's reference is graded with: `.ci/run` and the suite (2.13.0 CPU),
#: `.github/workflows/student-platforms.yml` (2.13.0 CPU on Linux, macOS, Windows), the course image.
#: pyproject.toml's torch range says the same (tests/test_torch_support.py keeps the two together).
TESTED = ((2, 13),)
INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
ALLOW_ENV = "GRADER_UNTESTED_TORCH"


def installed_torch() -> str | None:
    """The installed torch's version from its metadata, without importing it (seconds saved for a
    grading whose ranks import it anyway); None when none is installed."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of `2.13.0+cpu`, `2.11.0+cu130`, `2.14.0.dev20260101`; None if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def check_torch(version: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """None when `version` is a tested release; a warning to print when it is not but ALLOW_ENV=1 is set;
    otherwise a UserError that says what is installed, what is tested and how to install it."""
    tested = ", ".join(f"{major}.{minor}" for major, minor in TESTED)
    if version is None:
        raise UserError(f"torch is not installed: install the tested release first ({INSTALL})")
    if release(version) in TESTED:
        return None
    said = f"torch {version} is installed, but the grader is tested with torch {tested} only"
    if environ.get(ALLOW_ENV) == "1":
        return f"warning: {said}; grading anyway ({ALLOW_ENV}=1): the grade may differ from the grade of record"
    raise UserError(
        f"{said}, and a grade under another release could differ from the grade of record. "
        f"Install the tested one, CPU build ({INSTALL}), or set {ALLOW_ENV}=1 to grade anyway."
    )
