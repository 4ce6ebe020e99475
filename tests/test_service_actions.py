"""The instructor's actions that score again without grading (grader.service.actions), on one real A5
grading: manual scores entered and removed (the ``--manual`` file's rules and messages), a manual
file uploaded, a rescore from an edited rubric file (and the refusal of a matrix change), and the
similarity report of the latest submissions.  Then the same actions in the browser (Debian's Chromium,
tests/test_service_pages.py's driver): a manual score typed from the keyboard, a rescore, the report.

One grading is made by the service's own engine (amy, the reference report); bob's submission is a
copy of it sealed as his, with his own repository, so the class has a pair to find.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("copydetect")
pytest.importorskip("selenium")
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from grader.errors import UserError
from grader.manual import ManualScores, load_manual
from grader.rescore import rescore
from grader.results import GradeResult
from grader.rubric import load_rubric
from grader.seal import open_sealed, seal
from grader.service import actions, queue, read
from grader.service.app import open_service
from grader.service.config import load_config
from grader.service.db import GRADED, QUEUED, ManualScore, ScoredUnder, Submission
from grader.service.intake import repo_path
from grader.service.pages import data
from grader.service.workers import Engine, rescore_class, score_kept, submission_dir
from tests.pages_kit import serving
from tests.service_kit import ROOT, commit_tree

A5 = "a5"
EXPLAIN = "q1_seeding.explanation"  # a manual item of 10 points, pending review in the reference's grading
OTHER = "q7_communicate.explanation"  # 2 points
REFUSED = ({EXPLAIN: 11.0}, {"q2_ranks.code": 1.0}, {EXPLAIN: -1.0})  # over, not a manual item, under


class Class:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.rubric = root / "a5.yaml"
        shutil.copy(ROOT / "rubrics" / "a5.yaml", self.rubric)
        config = root / "service.yaml"
        config.write_text(
            f"listen: 127.0.0.1:0\nstate_dir: {root / 'state'}\nworkers: 1\n"
            f"assignments:\n  - id: {A5}\n    rubric: {self.rubric}\n    repo_prefix: a5-\n"
        )
        self.service = open_service(load_config(config))
        self.config = self.service.config
        self.engine = Engine(self.config, self.service.sessions)
        self.key = self.engine.key
        self.ids: dict[str, str] = {}

    def push(self, student: str, tree: Path, status: str = QUEUED) -> Submission:
        """A submission as intake leaves it: a row and a bare repository of the student's commit."""
        work = self.root / f"work-{student}"
        sha = commit_tree(work, tree)
        sid = f"sid-{student}-{len(self.ids)}"
        bare = repo_path(self.config, A5, sid)
        bare.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, capture_output=True)
        row = Submission(
            id=sid, assignment=A5, student=student, repository=f"course-org/a5-{student}", rate_key=student,
            commit=sha, status=status, received_at=time.time(), attempts=0,
        )  # fmt: skip
        with self.service.sessions.begin() as session:
            session.add(row)
        self.ids[student] = sid
        return row

    def row(self, student: str) -> Submission:
        with self.service.sessions.begin() as session:
            found = session.get(Submission, self.ids[student])
            session.expunge(found)
            return found

    def result(self, student: str) -> GradeResult:
        return GradeResult.load(submission_dir(self.config, A5, self.ids[student]) / "results.json")

    def item(self, student: str, item_id: str):
        return next(item for item in self.result(student).items() if item.id == item_id)

    def book(self) -> dict[str, dict[str, str]]:
        return {
            row["student"]: row
            for row in csv.DictReader(io.StringIO(read.gradebook(self.config, self.service.sessions, A5)))
        }

    def enter(self, student: str, scores: dict[str, float], comments: dict[str, str] | None = None, removed=()):
        change = actions.Change(ManualScores(dict(scores), dict(comments or {})), set(removed))
        return actions.enter_manual(self.config, self.service.sessions, self.key, self.assignment, {student: change})

    @property
    def assignment(self):
        return self.config.assignments[A5]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    c = Class(tmp_path_factory.mktemp("actions"))
    c.push("amy", ROOT / "reference" / "a5")
    claimed = queue.claim(c.service.sessions, c.engine.owner, 600)
    assert claimed is not None
    c.engine.grade(claimed)  # the engine's own grade: `grader grade` of amy's commit, sealed, scored
    assert c.row("amy").status == GRADED, c.row("amy").error
    bob = c.push("bob", ROOT / "reference" / "a5", status=GRADED)  # a copy of amy's, sealed as bob's
    there = submission_dir(c.config, A5, bob.id)
    shutil.copytree(submission_dir(c.config, A5, c.ids["amy"]), there)
    seal(there, "graded", c.key, bob.id)
    with c.service.sessions.begin() as session:
        graded = session.get(Submission, bob.id)
        graded.score, graded.max_score, graded.graded_at = c.row("amy").score, c.row("amy").max_score, time.time()
    return c


def test_a_manual_score_rescores_the_latest_grading_and_its_removal_restores_the_automatic_one(course):
    before = course.row("amy").score
    assert course.item("amy", EXPLAIN).status.value == "pending_review" and course.item("amy", EXPLAIN).score == 0
    live = data.version(course.service.sessions, A5)
    course.enter("amy", {EXPLAIN: 7.5}, {EXPLAIN: "clear, one step missing"})
    assert course.row("amy").score == pytest.approx(before + 7.5)
    assert data.version(course.service.sessions, A5) != live  # an open class page shows the new score
    item = course.item("amy", EXPLAIN)
    assert (item.score, item.status.value, item.manual) == (7.5, "manual", True)
    assert "instructor's comment: clear, one step missing" in item.feedback
    assert float(course.book()["amy"]["total"]) == pytest.approx(before + 7.5)  # the gradebook CSV
    assert course.row("bob").score == before  # nobody else's
    form = actions.manual_form(course.service.sessions, course.config, course.assignment, "amy")
    shown = {item.id: item for item in form.items}
    assert {EXPLAIN, OTHER, "q3_tensor_shapes.written"} <= set(shown) and form.sid == course.ids["amy"]
    assert (shown[EXPLAIN].entered, shown[EXPLAIN].max_points, shown[EXPLAIN].score) == (7.5, 10, 7.5)
    live = data.version(course.service.sessions, A5)
    course.enter("amy", {}, removed=[EXPLAIN])
    assert course.row("amy").score == pytest.approx(before)
    assert data.version(course.service.sessions, A5) != live
    assert course.item("amy", EXPLAIN).status.value == "pending_review"
    with course.service.sessions.begin() as session:
        assert session.query(ManualScore).count() == 0


def test_manual_scores_follow_the_manual_files_rules_with_its_messages_and_change_nothing_when_refused(
    course, tmp_path
):
    before = course.row("amy").score
    with tempfile.TemporaryDirectory() as tmp:  # what `grader rescore --manual` says of the same scores
        open_sealed(submission_dir(course.config, A5, course.ids["amy"]), "graded", course.key, Path(tmp))
        expected = []
        for scores in REFUSED:
            with pytest.raises(UserError) as cli:
                rescore(Path(tmp) / "graded", course.assignment.rubric, ManualScores(dict(scores)))
            expected.append(str(cli.value))
    assert "-1 is outside 0..10" in expected[2] and "'q2_ranks.code': not a deliverable" in expected[1]
    for scores, message in zip(REFUSED, expected, strict=True):
        with pytest.raises(UserError) as page:
            course.enter("amy", dict(scores))
        assert f"amy: {message}" in str(page.value)
    bad = tmp_path / "scores.csv"
    bad.write_text("student,item,points\namy,q1_seeding.explanation,lots\n")
    with pytest.raises(UserError) as cli:
        load_manual(bad)
    with pytest.raises(UserError) as page:
        actions.parse_manual_upload("scores.csv", bad.read_bytes())
    assert str(page.value) == str(cli.value).replace(str(bad), "scores.csv")
    with pytest.raises(UserError, match="carol: no graded submission to score yet"):
        course.enter("carol", {EXPLAIN: 1.0})
    assert course.row("amy").score == before
    with course.service.sessions.begin() as session:
        assert session.query(ManualScore).count() == 0


def test_an_uploaded_manual_file_scores_the_class_all_or_nothing(course):
    before = {s: course.row(s).score for s in ("amy", "bob")}
    text = f"student,item,points,comment\namy,{EXPLAIN},4\nbob,{EXPLAIN},10,full marks\nbob,{OTHER},2\n"
    scores = actions.parse_manual_upload("scores.csv", text.encode())
    wrong = {**scores, "amy": ManualScores({EXPLAIN: 40.0})}
    with pytest.raises(UserError, match=re.escape("amy: manual score for q1_seeding.explanation: 40 is outside 0..10")):
        actions.enter_manual(
            course.config,
            course.service.sessions,
            course.key,
            course.assignment,
            {s: actions.Change(m) for s, m in wrong.items()},
        )
    assert {s: course.row(s).score for s in ("amy", "bob")} == before  # bob's good lines were not kept either
    changes = {s: actions.Change(m) for s, m in scores.items()}
    actions.enter_manual(course.config, course.service.sessions, course.key, course.assignment, changes)
    assert course.row("amy").score == pytest.approx(before["amy"] + 4)
    assert course.row("bob").score == pytest.approx(before["bob"] + 12)
    course.enter("amy", {}, removed=[EXPLAIN])
    course.enter("bob", {}, removed=[EXPLAIN, OTHER])
    assert {s: course.row(s).score for s in ("amy", "bob")} == before


def test_a_rescore_from_the_rubric_file_moves_points_and_regrades_nobody_and_refuses_a_matrix_change(course):
    original = course.rubric.read_text()
    before = course.row("amy").score
    course.enter("amy", {OTHER: 2.0})  # a manual score survives the rescore
    try:
        course.rubric.write_text(original.replace("cap_percent: 50", "cap_percent: 40"))
        message = actions.rescore_from_rubric(course.config, course.service.sessions, course.key, A5)
        assert "scoring is unchanged" not in message  # the late policy is part of the scoring
        course.rubric.write_text(original.replace("deadline: null", "deadline: 2020-01-01T00:00:00Z"))
        live = data.version(course.service.sessions, A5)
        message = actions.rescore_from_rubric(course.config, course.service.sessions, course.key, A5)
        assert message.startswith("rescored 2 graded submissions from the cache")
        assert data.version(course.service.sessions, A5) != live
        amy = course.result("amy")
        assert amy.lateness.value == "late" and amy.late is not None
        assert course.row("amy").score == pytest.approx(amy.score) and amy.score < before + 2
        assert course.item("amy", OTHER).score == 2.0
        assert {course.row(s).status for s in ("amy", "bob")} == {GRADED}  # nobody queued again
        with course.service.sessions.begin() as session:
            digest = session.get(ScoredUnder, A5).digest
        assert digest == course.assignment.scoring_digest
        late = course.row("amy").score
        scored_under = course.assignment
        course.rubric.write_text(original.replace("case_timeout_s: 20", "case_timeout_s: 21"))
        with pytest.raises(UserError, match="nothing was changed"):
            actions.rescore_from_rubric(course.config, course.service.sessions, course.key, A5)
        assert course.assignment is scored_under and course.row("amy").score == late
        course.rubric.write_text(lowered(original))  # amy's 2 points for OTHER are now over its 1
        with pytest.raises(UserError) as refused:
            actions.rescore_from_rubric(course.config, course.service.sessions, course.key, A5)
        assert "nothing was changed" in str(refused.value)
        assert f"amy: manual score for {OTHER}: 2 is outside 0..1" in str(refused.value)
        assert course.assignment is scored_under and course.row("amy").score == late
        under_it = dataclasses.replace(course.assignment, rubric=load_rubric(course.rubric))
        kept = score_kept(course.config, course.key, under_it, course.row("amy"), ManualScores({OTHER: 2.0}))
        assert next(i for i in kept.items() if i.id == OTHER).status.value != "manual"  # a push scored without it
        rescore_class(course.config, course.service.sessions, course.key, course.assignment)
        assert course.row("amy").score == late
    finally:
        course.rubric.write_text(original)
        actions.rescore_from_rubric(course.config, course.service.sessions, course.key, A5)
        course.enter("amy", {}, removed=[OTHER])
    assert course.row("amy").score == pytest.approx(before)


def lowered(rubric: str) -> str:
    """The rubric with OTHER worth 1 point, not 2 (and its task 17, not 18): a scoring change alone."""
    head, tail = rubric.split(f"      - id: {OTHER}\n", 1)
    head = head.replace("    points: 18\n", "    points: 17\n", 1)
    return f"{head}      - id: {OTHER}\n" + tail.replace("points: 2\n", "points: 1\n", 1)


def test_the_similarity_check_compares_the_latest_graded_submissions(course):
    state = actions.run_similarity_check(course.config, course.service.sessions, course.assignment)
    assert state.state == "ready" and "2 students compared" in state.message
    assert state.nearest["amy"][0] == "bob" and state.nearest["amy"][1] >= 0.99
    report = actions.similarity_dir(course.config, A5) / "similarity.html"
    assert "amy" in report.read_text() and "bob" in report.read_text()
    after_a_restart = actions.SimilarityRuns(course.config).state(A5)  # the report on disk flags the pair again
    assert after_a_restart.state == "ready" and set(after_a_restart.nearest) == {"amy", "bob"}


# --- in the browser (tests/test_service_pages.py's driver and checks) --------------------------------

from tests.test_service_pages import assert_clean, browser, focus_by_tab, open_page, text_of  # noqa: E402, F401


@pytest.fixture(scope="module")
def site(course):
    """What tests/test_service_pages.py's ``browser`` logs into: this class's service."""
    with serving(course.service) as url:
        yield url, course.service, None, course.ids


def test_the_new_posts_refuse_without_a_session_or_its_csrf_token(site, course):
    url, service, _, _ = site
    posts = {
        f"/assignments/{A5}/manual": {"student": "amy", f"points-{EXPLAIN}": "3"},
        f"/assignments/{A5}/rescore": {},
        f"/assignments/{A5}/similarity": {},
    }
    with httpx.Client(base_url=url, timeout=60) as client:
        for path, fields in posts.items():
            assert client.post(path, data=fields).status_code == 401, path
        upload = {"file": ("scores.csv", f"amy,{EXPLAIN},3\n".encode(), "text/csv")}
        assert client.post(f"/assignments/{A5}/manual-upload", files=upload).status_code == 401
        client.post("/login", data={"token": service.instructor_token})
        for path, fields in posts.items():
            answer = client.post(path, data={**fields, "csrf": "guess"})
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "bad_csrf", path
        answer = client.post(f"/assignments/{A5}/manual-upload", files=upload, data={"csrf": "guess"})
        assert answer.status_code == 403
        report = client.get(f"/assignments/{A5}/similarity/report.html")  # written by the test above
        assert report.status_code == 200 and "sandbox" in report.headers["content-security-policy"]
        assert "script-src" not in report.headers["content-security-policy"]
    with service.sessions.begin() as session:
        assert session.query(ManualScore).count() == 0


def test_a_manual_score_typed_from_the_keyboard_changes_the_score(site, browser, course):  # noqa: F811
    url, _, _, _ = site
    before = course.row("amy").score
    open_page(browser, f"{url}/assignments/{A5}/students/amy")
    field = browser.find_element(By.CSS_SELECTOR, f"tr[data-item='{EXPLAIN}'] input[name='points-{EXPLAIN}']")
    focus_by_tab(browser, field)
    browser.switch_to.active_element.send_keys("6", Keys.ENTER)
    cell = f"tr[data-item='{EXPLAIN}'] [data-field=now]"
    WebDriverWait(browser, 20).until(lambda d: text_of(d, cell).strip().startswith("6 /"))  # across the POST
    assert_clean(browser)
    assert course.row("amy").score == pytest.approx(before + 6)
    open_page(browser, f"{url}/assignments/{A5}")
    cell = browser.find_element(By.CSS_SELECTOR, "tr[data-student='amy'] td[data-field=score]").text
    assert cell.startswith(f"{before + 6:g} /")
    open_page(browser, f"{url}/assignments/{A5}/students/amy")  # cleared: the automatic score again
    field = browser.find_element(By.CSS_SELECTOR, f"input[name='points-{EXPLAIN}']")
    field.clear()
    field.send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: "/students/amy" in d.current_url and course.row("amy").score == before)
    open_page(browser, f"{url}/assignments/{A5}/students/amy")
    browser.find_element(By.CSS_SELECTOR, f"input[name='points-{EXPLAIN}']").send_keys("99", Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "pre.message"))
    assert "99 is outside 0..10" in browser.find_element(By.CSS_SELECTOR, "pre.message").text
    assert browser.find_element(By.CSS_SELECTOR, f"input[name='points-{EXPLAIN}']").get_attribute("value") == "99"
    assert_clean(browser)
    assert course.row("amy").score == before


def test_a_rescore_and_the_similarity_report_from_the_class_page(site, browser):  # noqa: F811
    url, _, _, _ = site
    open_page(browser, f"{url}/assignments/{A5}")
    button = browser.find_element(By.XPATH, "//button[normalize-space()='Rescore from the rubric file']")
    focus_by_tab(browser, button)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "pre.message"))
    assert "scoring is unchanged" in browser.find_element(By.CSS_SELECTOR, "pre.message").text
    assert_clean(browser)
    open_page(browser, f"{url}/assignments/{A5}")
    browser.find_element(By.LINK_TEXT, "Similarity of the latest submissions").send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.current_url.endswith("/similarity"))
    browser.execute_script("window.__old_page = true")
    browser.find_element(By.XPATH, "//button[normalize-space()='Run the similarity check again']").send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return window.__old_page === undefined"))
    browser.execute_script("window.__same_page = true")
    WebDriverWait(browser, 120).until(  # the check's end shows live, without a reload
        lambda d: d.execute_script("return document.querySelector('#similarity-report') !== null")
    )
    assert browser.execute_script("return window.__same_page === true")
    assert browser.execute_script("return document.querySelector('[data-field=state]').textContent") == "ready"
    assert_clean(browser)
    browser.find_element(By.ID, "similarity-report").send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.current_url.endswith("/similarity/report.html"))
    text = browser.find_element(By.TAG_NAME, "body").get_attribute("textContent")
    assert "amy" in text and "bob" in text
    assert_clean(browser)
    open_page(browser, f"{url}/assignments/{A5}?flag=similarity")  # the pair, flagged on the class page
    flagged = browser.find_elements(By.CSS_SELECTOR, "#class-table tbody tr[data-student]")
    assert sorted(tr.get_attribute("data-student") for tr in flagged) == ["amy", "bob"]


def test_a_manual_file_uploaded_in_the_browser_scores_the_class(site, browser, course, tmp_path):  # noqa: F811
    url, _, _, _ = site
    before = {s: course.row(s).score for s in ("amy", "bob")}
    upload = tmp_path / "scores.csv"
    upload.write_text(f"student,item,points,comment\nbob,{OTHER},1.5,half\n")
    open_page(browser, f"{url}/assignments/{A5}")
    browser.find_element(By.PARTIAL_LINK_TEXT, "Upload manual scores").send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.current_url.endswith("/manual-upload"))
    browser.find_element(By.ID, "manual-file").send_keys(str(upload))
    browser.find_element(By.XPATH, "//button[normalize-space()='Upload manual scores']").send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "pre.message"))
    assert "manual scores of 1 students saved and rescored" in browser.find_element(By.CSS_SELECTOR, "pre.message").text
    assert_clean(browser)
    assert course.row("bob").score == pytest.approx(before["bob"] + 1.5) and course.row("amy").score == before["amy"]
    course.enter("bob", {}, removed=[OTHER])


# --- two service processes on one database (last: it adds a graded student) ------------------------


def test_a_rescore_in_one_service_process_is_the_scoring_of_every_other_on_its_database(course, caplog):
    """Two service processes on one config, database and state_dir (two ``open_service`` and Engines):
    A rescores from an edited rubric; B, started before, scores a new grading under the new rubric, not
    the one it read at its start.  Where the file changed again since A's rescore, B records no score
    under a rubric the class is not under: the submission waits in the queue until the class is rescored."""
    original = course.rubric.read_text()
    late = original.replace("deadline: null", "deadline: 2020-01-01T00:00:00Z")
    rescore_in_a = lambda: actions.rescore_from_rubric(course.config, course.service.sessions, course.key, A5)  # noqa: E731
    second = open_service(load_config(course.config.file))
    b = Engine(second.config, second.sessions)
    started_under = b.config.assignments[A5].scoring_digest

    def grade_in_b() -> Submission:
        claimed = queue.claim(second.sessions, b.owner, 600)
        assert claimed is not None and claimed.id == course.ids["cara"]
        b.grade(claimed)
        return course.row("cara")

    try:
        course.rubric.write_text(late)
        rescore_in_a()
        course.push("cara", ROOT / "reference" / "a5")  # amy's answers, so amy's score under the same rubric
        cara = grade_in_b()
        assert cara.status == GRADED and course.result("cara").lateness.value == "late"
        assert cara.score == pytest.approx(course.row("amy").score)
        assert b.config.assignments[A5].scoring_digest == course.assignment.scoring_digest != started_under
        course.rubric.write_text(late.replace("cap_percent: 50", "cap_percent: 40"))
        rescore_in_a()  # the class under cap 40, which B has not read ...
        course.rubric.write_text(late.replace("cap_percent: 50", "cap_percent: 30"))  # ... nor can now
        with course.service.sessions.begin() as session:  # cara's grading waits again (its cache is kept)
            row = session.get(Submission, course.ids["cara"])
            row.status, row.score, row.max_score = QUEUED, None, None
            attempts = row.attempts
        with caplog.at_level("WARNING", logger="grader.service"):
            cara = grade_in_b()
        assert (cara.status, cara.score) == (QUEUED, None)
        assert cara.attempts == attempts  # given back: only a killed grade counts towards MAX_ATTEMPTS
        assert f"{cara.id} left to the queue" in caplog.text
        rescore_in_a()
        cara = grade_in_b()
        assert cara.status == GRADED and cara.score == pytest.approx(course.row("amy").score)
        assert b.config.assignments[A5].scoring_digest == course.assignment.scoring_digest
    finally:
        course.rubric.write_text(original)
        rescore_in_a()
