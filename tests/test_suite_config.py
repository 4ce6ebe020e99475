"""The grader's own suite must never run a submission's code: the corpora are data."""

import pytest


def test_corpus_directories_are_never_collected(pytestconfig: pytest.Config) -> None:
    # tests/corpus/hostile/shipped_config carries a conftest.py that turns every failure into a pass
    assert "corpus" in pytestconfig.getini("norecursedirs")
