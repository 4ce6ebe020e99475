"""Each pack's rationale (docs/rubric-rationale-<id>.md) and default rubric say the same thing, and
the rationale quotes the handout.

Every case pattern, trace probe, deliverable and written question of a default rubric has a row in
its rationale under its item, with the share the rubric gives it; every weighted row quotes at least
one sentence, and every quoted sentence is in the course's handout word for word; an advisory row
(share 0) quotes none, since no sentence requires it.  A9's and A4's handouts are in docs/handouts/;
A5's is the course's own material, never copied into the project (its README says so): it is read
from ../shared/course/a5/HANDOUT.md beside the checkout, where CI has it, and its quotes are skipped,
saying why, where it is not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.rubric import CasesScoring, DeliverableScoring, Rubric, TraceScoring, WrittenScoring, load_rubric

REPO = Path(__file__).resolve().parents[1]
PACKS = ("a9", "a4", "hw12", "a5")
#: at least this many quoted sentences per pack: a rationale that quotes little says little
QUOTES = {"a9": 20, "a4": 10, "hw12": 15, "a5": 10}
#: what a rationale says when its pack has no degenerate case
NONE_DEGENERATE = "No case is degenerate"


def rationale(pack: str) -> str:
    return (REPO / "docs" / f"rubric-rationale-{pack}.md").read_text()


#: handouts the project may not hold a copy of: where the course's material lies, from the repo root
COURSE_HANDOUTS = {"a5": REPO.parent / "shared" / "course" / "a5" / "HANDOUT.md"}


def handout(pack: str) -> str:
    path = COURSE_HANDOUTS.get(pack, REPO / "docs" / "handouts" / f"{pack}.md")
    if not path.is_file():
        pytest.skip(f"{pack}'s handout is the course's material, not the project's: {path} is not beside the checkout")
    return path.read_text()


def flat(text: str) -> str:
    """Emphasis marks and line breaks aside, as a reader compares sentences."""
    return " ".join(text.replace("**", "").split())


def rows(pack: str) -> dict[str, list[tuple[str, float, list[str]]]]:
    """section -> its rows: (family key = the first column's code span, share, quoted sentences)."""
    found: dict[str, list[tuple[str, float, list[str]]]] = {}
    section = ""
    for line in rationale(pack).splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            found[section] = []
        elif section and line.startswith("| `"):
            family, share, handout = (cell.strip() for cell in line.strip("|").split("|", 2))
            found[section].append((family.split("`")[1], float(share), re.findall(r'"([^"]+)"', handout)))
    return found


@pytest.fixture(scope="module", params=PACKS)
def pack(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def rubric(pack: str) -> Rubric:
    return load_rubric(REPO / "rubrics" / f"{pack}.yaml")


def expected_rows(rubric: Rubric) -> dict[str, dict[str, float]]:
    """What the rubric weights, in the rationale's terms: section -> family key -> share."""
    wanted: dict[str, dict[str, float]] = {}
    for item in rubric.items():
        section = wanted.setdefault("bonus" if item.bonus else item.id, {})
        scoring = item.scoring
        if isinstance(scoring, CasesScoring):
            for component in scoring.components:
                section.update({pattern: component.share for pattern in component.match})
        elif isinstance(scoring, TraceScoring):
            for check in scoring.checks:
                section[check.case] = section.get(check.case, 0.0) + check.points / item.points
        elif isinstance(scoring, WrittenScoring):
            section.update({q.id: 1.0 for q in scoring.questions})
        elif isinstance(scoring, DeliverableScoring):
            names = rubric.deliverables[scoring.deliverable].any_of
            section[names[0].rsplit(".", 1)[0]] = 1.0
    return wanted


def test_every_family_the_rubric_weights_has_a_row_with_its_share(pack: str, rubric: Rubric) -> None:
    found = rows(pack)
    for section, families in expected_rows(rubric).items():
        assert section in found, f"docs/rubric-rationale-{pack}.md has no section for {section}"
        for key, share in families.items():
            documented = [s for k, s, _ in found[section] if k == key]  # a probe may have a row per check
            assert documented, f"{section}: no row for {key}"
            assert sum(documented) == pytest.approx(share), f"{section}: {key} has share {share} in the rubric"


def test_no_row_names_a_family_the_rubric_does_not_have(pack: str, rubric: Rubric) -> None:
    wanted = expected_rows(rubric)
    for section, families in rows(pack).items():
        assert section in wanted, f"docs/rubric-rationale-{pack}.md: {section} is not an item of the rubric"
        extra = {key for key, _, _ in families} - set(wanted[section])
        assert not extra, f"{section}: rows for what the rubric does not have: {extra}"


def test_weighted_rows_quote_the_handout_and_advisory_rows_do_not(pack: str) -> None:
    text = flat(handout(pack))
    quoted = 0
    for section, families in rows(pack).items():
        for key, share, quotes in families:
            if share == 0:
                assert not quotes, f"{section}: {key} is advisory, yet quotes a requirement"
                continue
            assert quotes, f"{section}: {key} carries weight but quotes no handout sentence"
            for quote in quotes:
                assert flat(quote) in text, f"{section}: {key}: not in the handout: {quote!r}"
                quoted += 1
    assert quoted > QUOTES[pack]


def test_a_misquote_is_caught() -> None:
    # the check above compares sentences exactly: a changed word is not in the handout
    assert flat("All collectives must be in-place on the input tensor") not in flat(handout("a9"))
    assert flat("All collectives should be in-place on the input tensor") in flat(handout("a9"))


def test_every_reason_a_case_weighs_nothing_is_documented(pack: str) -> None:
    """Degenerate cases (``Case.degenerate``) weigh 0 in every rubric: the rationale gives each reason."""
    from grader.pack import load_pack

    reasons = set(load_pack(pack).degenerate().values())
    if not reasons:  # every case exercises its feature: the rationale says so, and why
        assert flat(NONE_DEGENERATE) in flat(rationale(pack)), f"{pack} marks no case degenerate and does not say why"
    for reason in reasons:
        assert flat(reason) in flat(rationale(pack)), f"docs/rubric-rationale-{pack}.md does not say {reason!r}"
