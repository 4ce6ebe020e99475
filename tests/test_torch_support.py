"""An honest torch range (issue 38): pyproject.toml declares the releases the grader is tested with,
and a local grading under any other torch stops at its start with a message that says which to
install, never with a grade nobody checked.  The version is faked: only one torch is installed here."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from grader import torch_support
from grader.cli import main
from grader.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def declared_torch() -> Requirement:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(r for r in map(Requirement, dependencies) if r.name == "torch")


def test_pyproject_declares_exactly_the_tested_releases():
    spec = declared_torch().specifier
    for major, minor in torch_support.TESTED:
        assert f"{major}.{minor}.0" in spec and f"{major}.{minor}.9" in spec
    untested = ["2.0.0", "2.11.0", "2.12.1", "2.14.0", "3.0.0"]
    assert not [v for v in untested if v in spec and torch_support.release(v) not in torch_support.TESTED]


def test_the_installed_torch_is_a_tested_one():
    """The suite itself runs on a tested release, or its grades would prove nothing about the range."""
    assert torch_support.check_torch(torch_support.installed_torch(), environ={}) is None


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "2.13.1+cu130"])
def test_a_tested_release_grades_whatever_its_build(version):
    assert torch_support.check_torch(version, environ={}) is None


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.0.1", "2.14.0.dev20260101+cpu", "3.0.0"])
def test_another_release_is_refused_with_what_to_install(version):
    with pytest.raises(UserError) as refused:
        torch_support.check_torch(version, environ={})
    said = str(refused.value)
    assert f"torch {version} is installed" in said and "tested with torch 2.13 only" in said
    assert torch_support.INSTALL in said and "GRADER_UNTESTED_TORCH=1" in said


def test_no_torch_at_all_says_what_to_install():
    with pytest.raises(UserError, match="torch is not installed"):
        torch_support.check_torch(None, environ={})


def test_grading_anyway_is_a_choice_that_is_said():
    warning = torch_support.check_torch("2.11.0+cu130", environ={"GRADER_UNTESTED_TORCH": "1"})
    assert warning is not None and "torch 2.11.0+cu130" in warning and "may differ" in warning


def test_grade_stops_before_any_work_under_an_untested_torch(monkeypatch, tmp_path, capsys):
    """Through the CLI as a student runs it: exit status 1, the message, and no output written."""
    monkeypatch.setattr(torch_support.metadata, "version", lambda name: "2.11.0+cu130")
    monkeypatch.delenv("GRADER_UNTESTED_TORCH", raising=False)
    out = tmp_path / "out"

    assert main(["grade", str(ROOT / "reference" / "a9"), "--out", str(out)]) == 1

    err = capsys.readouterr().err
    assert err.startswith("grader: torch 2.11.0+cu130 is installed") and torch_support.INSTALL in err
    assert not out.exists()
