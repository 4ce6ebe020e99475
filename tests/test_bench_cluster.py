"""The class ``scripts/bench-cluster.py`` measures is the one docs/measurements.md describes: the
stated mix for 100 students, exactly one hanging submission, every kind in a small class too."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.bench_kit import load_script


def _bench():
    return load_script("bench-cluster.py")


def _kinds(roster: Path) -> Counter[str]:
    return Counter(p.name.split("-", 1)[1] for p in roster.iterdir())


def test_a_class_of_100_is_the_mix_the_readme_states_with_exactly_one_hanging(tmp_path):
    _bench().build(tmp_path / "class", 100)
    assert _kinds(tmp_path / "class") == {
        "reference": 39,
        "naive": 25,
        "template": 20,
        "syntax-error": 10,
        "import-error": 5,
        "hanging": 1,
    }
    assert (tmp_path / "class" / "s050-hanging" / "src" / "collectives.py").exists()


def test_a_small_class_has_every_kind_and_the_import_error_is_the_reference_plus_a_missing_module(tmp_path):
    bench = _bench()
    bench.build(tmp_path / "class", 6)
    assert set(_kinds(tmp_path / "class")) == set(bench.TREES)
    broken = (tmp_path / "class" / "s005-import-error" / "src" / "collectives.py").read_text()
    reference = (bench.TREES["reference"] / "src" / "collectives.py").read_text()
    assert broken == bench.BROKEN_IMPORT + reference
    assert not list((tmp_path / "class").rglob("expected.json"))  # no grader-side answers in a submission
