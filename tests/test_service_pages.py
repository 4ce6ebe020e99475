"""The service's pages in a real browser: Debian's Chromium driven by Debian's chromedriver (Selenium).

One service (the real app under uvicorn, SQLite in a temp dir, no engine) over a class seeded with
results documents (tests/pages_kit.py), among them an injection corpus: student names, file names,
messages and notes carrying ``<script>``, ``"><img onerror=...>``, ``javascript:`` links, an RTL
override and 10,000-character lines.  Every page is opened with no console error and no script of the
corpus run; the class is filtered and sorted, a history opened, a student regraded from the keyboard,
a student lists their own submissions with their course token, and a grade that lands shows on the
open page without a reload (how soon is scripts/bench-pages.py's to time, not a test's).

``GRADER_DOCS_SCREENSHOT=1`` saves the class page and a history as docs/_static/service-class.png and
docs/_static/service-history.png (as tests/test_html_reports.py saves the student report's).
"""

from __future__ import annotations

import csv
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from grader.service import tokens
from grader.service.db import GRADED, QUEUED, Submission
from tests.pages_kit import (
    ASSIGNMENT,
    REPO,
    add_cases,
    chromium,
    fixture,
    open_seeded,
    serving,
    variant,
)

PWN = "window.__pwned=1"
LONG = "L" * 10_000
HOSTILE_NAMES = [
    f"<script>{PWN}</script>",
    f'"><img src=x onerror="{PWN}">',
    f"javascript:{PWN}",
    "\u202etxt.exe\u202c",
    LONG,
]
HOSTILE_MESSAGE = f'</pre><script>{PWN}</script>"><img src=x onerror="{PWN}"> javascript:{PWN} \u202e {LONG}'
HOSTILE_FILES = {
    f'src/"><img src=x onerror="{PWN}">.py': "sha256:" + "4" * 64,
    f"<script>{PWN}</script>": "sha256:" + "5" * 64,
}
CLEAN = ["ada-lovelace", "grace-hopper", "alan-turing", "edsger-dijkstra", "barbara-liskov", "donald-knuth"]
ABSENT = "ken-thompson"  # on the roster, nothing submitted
LIVE_WAIT_S = 60.0  # a backstop for a loaded machine, not a speed test: scripts/bench-pages.py times a landing


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    service, seeder = open_seeded(root, roster=[*CLEAN, ABSENT])
    base = add_cases(fixture(), 30)
    rng = random.Random(60)
    start = time.time() - 7 * 86400
    ids: dict[str, list[str]] = {}
    for n, student in enumerate(CLEAN):  # three pushes each: a history with fixes and breaks
        for push, passing in enumerate((0.3, 0.6, 0.5 + n * 0.08)):
            doc = variant(base, rng, passing=min(passing, 1.0), student=student, late=n % 3 == 0 and push == 2)
            ids.setdefault(student, []).append(seeder.add(student, doc, received=start + n * 600 + push * 86400))
    for n, student in enumerate(HOSTILE_NAMES):
        doc = variant(base, rng, passing=0.4, student=student, files=HOSTILE_FILES)
        for case in doc["cases"][:3]:
            case["verdict"], case["message"] = "crash", HOSTILE_MESSAGE
        doc["submission"]["notes"] = [HOSTILE_MESSAGE]
        doc["submission"]["problems"] = [HOSTILE_MESSAGE]
        doc["notes"] = [HOSTILE_MESSAGE]
        first = seeder.add(student, variant(base, rng, passing=0.9, student=student), received=start + n)
        ids[student] = [first, seeder.add(student, doc, received=start + 86400 + n)]
    ids["error"] = [seeder.add("=cmd|' /C calc'!A0", None, received=start, status="error")]
    with service.sessions.begin() as session:
        session.get(Submission, ids["error"][0]).error = HOSTILE_MESSAGE
    with serving(service) as url:
        yield url, service, seeder, ids


@pytest.fixture(scope="module")
def browser(site):
    # Chromium's temporary directory, removed after: a short path, as its singleton's socket needs
    with tempfile.TemporaryDirectory(prefix="chromium-") as tmp:
        driver = chromium(Path(tmp))
        if driver is None:  # CI installs it (scripts/install-chromium.sh); here, as root, it may
            subprocess.run(["bash", str(REPO / "scripts" / "install-chromium.sh")], capture_output=True, timeout=900)
            driver = chromium(Path(tmp))
            if driver is None:
                pytest.skip("chromium-driver is not installed (scripts/install-chromium.sh installs it)")
        url, service, _, _ = site
        try:
            driver.get(f"{url}/login")
            driver.find_element(By.ID, "token").send_keys(service.instructor_token, Keys.ENTER)
            WebDriverWait(driver, 20).until(lambda d: "/assignments" in d.current_url)
            yield driver
        finally:
            driver.quit()


def open_page(driver, url: str) -> None:
    """Open ``url`` and wait for its script; then no console error and no corpus script ran."""
    driver.get(url)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")
    assert_clean(driver)


def assert_clean(driver) -> None:
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
    assert driver.execute_script("return window.__pwned === undefined"), "an injected script ran"
    assert driver.execute_script("return document.querySelectorAll('img, script:not([src])').length") == 0


def rows(driver) -> dict[str, str]:
    """Each row's student and status, read in one script: a live swap between reading the rows and their
    attributes would leave a held element stale."""
    return driver.execute_script(
        "const rows = document.querySelectorAll('#class-table tbody tr[data-student]');"
        "return Object.fromEntries([...rows].map(tr => [tr.dataset.student, tr.dataset.status]));"
    )


def text_of(driver, css: str) -> str:
    """The text of the element ``css`` names now ("" while there is none), read in the page's own DOM, so a
    live swap or a form's answer that replaces it never leaves the test holding a stale element."""
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent : ''", css)


# --- access ----------------------------------------------------------------------------------------


def test_instructor_routes_refuse_without_a_session(site):
    url, service, _, _ = site
    with httpx.Client(base_url=url, timeout=60) as client:
        page = client.get(f"/assignments/{ASSIGNMENT}")
        assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")
        assert client.post(f"/assignments/{ASSIGNMENT}/regrade", data={"all": "1"}).status_code == 401
        assert client.get(f"/assignments/{ASSIGNMENT}/version").status_code == 401
        assert client.get(f"/assignments/{ASSIGNMENT}/gradebook.csv").status_code == 303
        wrong = client.post("/login", data={"token": service.instructor_token + "x"})
        assert wrong.status_code == 401 and "grader_session" not in wrong.headers.get("set-cookie", "")


def test_login_sets_a_strict_httponly_cookie_and_posts_need_its_csrf_token(site):
    url, service, _, ids = site
    with httpx.Client(base_url=url, timeout=60) as client:
        done = client.post("/login", data={"token": service.instructor_token, "next": "//evil.example/"})
        assert done.status_code == 303 and done.headers["location"] == "/assignments"  # never off-site
        cookie = done.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert client.get(f"/assignments/{ASSIGNMENT}").status_code == 200
        refused = client.post(f"/assignments/{ASSIGNMENT}/regrade", data={"student": CLEAN[0], "csrf": "guess"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "bad_csrf"
        with service.sessions.begin() as session:
            assert session.get(Submission, ids[CLEAN[0]][-1]).status == GRADED  # nothing changed


def test_every_response_carries_the_security_headers(site):
    url, _, _, ids = site
    with httpx.Client(base_url=url, timeout=60) as client:
        for path in ("/login", f"/s/{ids[CLEAN[1]][0]}", "/healthz"):
            headers = client.get(path).headers
            policy = headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
            assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
        report = client.get(f"/s/{ids[CLEAN[1]][0]}/report").headers["content-security-policy"]
        assert "sandbox" in report and "script-src" not in report and "default-src 'none'" in report


def test_the_gradebook_export_is_formula_safe(site):
    url, service, _, _ = site
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post("/login", data={"token": service.instructor_token})
        text = client.get(f"/assignments/{ASSIGNMENT}/gradebook.csv").text
    lines = text.splitlines()
    assert lines[0].startswith("student,") and any(line.startswith(f"{CLEAN[0]},") for line in lines)
    assert not any(line.startswith("=") for line in lines)
    assert any(line.startswith("\"'=cmd") or line.startswith("'=cmd") for line in lines)


def test_a_students_page_shows_only_their_own_submissions(site):
    url, _, _, ids = site
    with httpx.Client(base_url=url, timeout=60) as client:
        page = client.get(f"/s/{ids[CLEAN[2]][1]}").text
        assert all(f'data-submission="{sid}"' in page for sid in ids[CLEAN[2]])
        others = [sid for student, mine in ids.items() if student != CLEAN[2] for sid in mine]
        assert not any(sid in page for sid in others)
        assert not any(name in page for name in CLEAN if name != CLEAN[2])
        assert client.get("/s/" + "A" * 43).status_code == 404


# --- in the browser --------------------------------------------------------------------------------


def test_the_class_page_lists_filters_sorts_and_shows_the_shape(site, browser):
    url, _, _, _ = site
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}")
    shown = rows(browser)
    assert set(CLEAN) | {ABSENT} <= set(shown) and shown[ABSENT] == "no_submission"
    assert browser.find_elements(By.CSS_SELECTOR, "#histograms svg[data-histogram='total']")
    assert browser.find_elements(By.CSS_SELECTOR, "#cases tr[data-family]")
    assert browser.find_element(By.CSS_SELECTOR, "#queue [data-field='waiting']").text.isdigit()
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}?q=grace")
    assert set(rows(browser)) == {"grace-hopper"}
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}?late=yes")
    assert set(rows(browser)) == {CLEAN[0], CLEAN[3]}
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}?q=-&sort=score&order=desc")
    scores = [
        float(cell.text.split("/")[0])
        for cell in browser.find_elements(By.CSS_SELECTOR, "#class-table td[data-field=score]")
        if cell.text
    ]
    assert len(scores) == len(CLEAN) and scores == sorted(scores, reverse=True)
    save_screenshot(browser, "service-class.png")


def test_a_history_lists_every_push_with_what_it_fixed_and_broke(site, browser):
    url, _, _, ids = site
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}")
    browser.find_element(By.LINK_TEXT, CLEAN[4]).click()
    WebDriverWait(browser, 20).until(lambda d: "/students/" in d.current_url)
    assert_clean(browser)
    pushes = browser.find_elements(By.CSS_SELECTOR, "table.history tbody tr")
    assert [tr.get_attribute("data-submission") for tr in pushes] == ids[CLEAN[4]]
    changes = [pre.text for pre in browser.find_elements(By.CSS_SELECTOR, "pre.changes")]
    assert len(changes) == 2 and all(text.startswith("Since the last grade:") for text in changes)
    assert "now pass" in changes[0]
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart circle")
    save_screenshot(browser, "service-history.png")


def test_every_page_renders_the_injection_corpus_inertly(site, browser):
    url, _, _, ids = site
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}?sort=received")
    for name in HOSTILE_NAMES:  # each name is text in its row, whole
        cell = browser.find_element(By.CSS_SELECTOR, f"#class-table tr[data-student='{css(name)}'] td a")
        assert cell.get_attribute("textContent") == name
    assert len(rows(browser)) == len(CLEAN) + len(HOSTILE_NAMES) + 2
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "a[href]")]
    assert not any(href.lower().startswith("javascript:") for href in links)
    for name in HOSTILE_NAMES:
        open_page(browser, f"{url}/assignments/{ASSIGNMENT}/students/{quote(name)}")
        assert browser.find_element(By.CSS_SELECTOR, "h1").get_attribute("textContent") == name
        assert len(browser.find_elements(By.CSS_SELECTOR, "table.history tbody tr")) == 2
        sid = ids[name][1]
        open_page(browser, f"{url}/s/{sid}")
        assert browser.find_element(By.CSS_SELECTOR, "tr.current").get_attribute("data-submission") == sid
        open_page(browser, f"{url}/s/{sid}/report")
        assert HOSTILE_MESSAGE[:40] in browser.find_element(By.TAG_NAME, "body").get_attribute("textContent")
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}/students/{quote(chr(61) + 'cmd|')}")


def test_a_regrade_from_the_keyboard_queues_the_student(site, browser):
    url, service, _, ids = site
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}?q=alan")
    button = browser.find_element(By.CSS_SELECTOR, f"tr[data-student='{CLEAN[2]}'] button")
    focus_by_tab(browser, button)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: rows(d).get(CLEAN[2]) == QUEUED)
    assert_clean(browser)
    with service.sessions.begin() as session:
        assert session.get(Submission, ids[CLEAN[2]][-1]).status == QUEUED


def test_every_control_is_reached_by_the_tab_key(site, browser):
    url, _, _, ids = site
    for path in (
        f"/assignments/{ASSIGNMENT}?q=ada",
        f"/assignments/{ASSIGNMENT}/students/{CLEAN[1]}",
        f"/s/{ids[CLEAN[1]][2]}",
        "/s",
    ):
        open_page(browser, url + path)
        controls = browser.find_elements(By.CSS_SELECTOR, "a[href], button, input:not([type=hidden]), select")
        reached = tab_through(browser, len(controls) + 5)
        missing = [c.get_attribute("outerHTML")[:80] for c in controls if c not in reached]
        assert missing == [], missing


def test_a_grade_that_lands_shows_on_the_open_page_without_a_reload(site, browser):
    url, _, seeder, _ = site
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}?q=donald")
    assert 0 < int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-poll-ms")) <= 1000  # LIVE_POLL_MS
    browser.execute_script("window.__same_page = true")
    doc = variant(add_cases(fixture(), 30), random.Random(7), passing=1.0, student=CLEAN[5])
    seeder.add(CLEAN[5], doc, received=time.time())
    cell = f"tr[data-student='{CLEAN[5]}'] td[data-field=score]"
    try:
        WebDriverWait(browser, LIVE_WAIT_S, poll_frequency=0.1).until(
            lambda d: text_of(d, cell).strip().startswith("100 /")
        )
    except TimeoutException:
        pytest.fail(f"the new grade did not show within {LIVE_WAIT_S} s")
    assert browser.execute_script("return window.__same_page === true"), "the page reloaded"
    assert_clean(browser)


def test_a_student_lists_their_own_submissions_with_their_token(site, browser):
    url, service, _, ids = site
    issued = tokens.issue(service.sessions, ASSIGNMENT, tuple(HOSTILE_NAMES))
    for name in HOSTILE_NAMES:  # the corpus's names, each listed as text by its own token
        open_page(browser, f"{url}/s")
        browser.find_element(By.ID, "own-token").send_keys(issued[name], Keys.ENTER)
        WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#own-list"))
        assert_clean(browser)
        listed = browser.find_elements(By.CSS_SELECTOR, "#own-list tr[data-submission]")
        assert [tr.get_attribute("data-submission") for tr in listed] == ids[name][::-1]
        assert browser.find_element(By.CSS_SELECTOR, "#own-list h2 .clip").get_attribute("textContent") == name
        assert issued[name] not in browser.current_url and {c["name"] for c in browser.get_cookies()} == {
            "grader_session"  # the instructor's, from the login: the token left none
        }
    browser.find_element(By.LINK_TEXT, "open").click()
    WebDriverWait(browser, 20).until(lambda d: d.current_url.endswith(f"/s/{ids[HOSTILE_NAMES[-1]][1]}"))
    assert_clean(browser)


def test_the_actions_pages_render_the_injection_corpus_inertly(site, browser, tmp_path):
    """The similarity report (the seeded class has no repositories: every student is a note by name) and a
    refused manual-scores upload naming every hostile student (their seeded gradings carry no seal)."""
    url, _, _, _ = site
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}/similarity")
    browser.find_element(By.XPATH, "//button[normalize-space()='Run the similarity check again']").send_keys(Keys.ENTER)
    state = "const shown = document.querySelector('[data-field=state]'); return shown && shown.textContent"
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(state) in ("ready", "failed"))  # live or loaded
    assert browser.execute_script(state) == "ready"
    assert_clean(browser)
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}/similarity/report.html")
    text = browser.find_element(By.TAG_NAME, "body").get_attribute("textContent")
    assert all(name in text for name in HOSTILE_NAMES)
    upload = tmp_path / "scores.csv"
    with upload.open("w", newline="") as fh:
        csv.writer(fh).writerows([name, "task1.diagram", "1", HOSTILE_MESSAGE] for name in HOSTILE_NAMES)
    open_page(browser, f"{url}/assignments/{ASSIGNMENT}/manual-upload")
    browser.find_element(By.ID, "manual-file").send_keys(str(upload))
    browser.find_element(By.XPATH, "//button[normalize-space()='Upload manual scores']").send_keys(Keys.ENTER)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "pre.message"))
    message = browser.find_element(By.CSS_SELECTOR, "pre.message").get_attribute("textContent")
    assert message.startswith("no manual score was changed") and all(name in message for name in HOSTILE_NAMES)
    assert_clean(browser)


# --- helpers ---------------------------------------------------------------------------------------


def quote(text: str) -> str:
    from urllib.parse import quote as url_quote

    return url_quote(text, safe="")


def css(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def tab_through(driver, presses: int) -> list:
    """The elements the Tab key focuses, from the top of the page."""
    driver.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    reached = []
    body = driver.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    for _ in range(presses):  # the keyboard's Tab: an element's send_keys types a path into a file input
        reached.append(driver.switch_to.active_element)
        ActionChains(driver).send_keys(Keys.TAB).perform()
    return reached


def focus_by_tab(driver, target) -> None:
    for element in tab_through(driver, 60):
        if element == target:
            driver.execute_script("arguments[0].focus()", target)  # back to it: tab_through moved past
            return
    pytest.fail("the Tab key never reaches the control")


def save_screenshot(driver, name: str) -> None:
    """docs/_static/<name>, refreshed on request (GRADER_DOCS_SCREENSHOT=1), as the student report's is."""
    if not os.environ.get("GRADER_DOCS_SCREENSHOT"):
        return
    from PIL import Image

    height = driver.execute_script("return Math.min(document.body.scrollHeight, 2400)")
    driver.set_window_size(1280, height)
    try:
        png = REPO / "docs" / "_static" / name
        driver.save_screenshot(str(png))
        with Image.open(png) as image:
            picture = image.convert("RGB")
        picture.quantize(colors=128).save(png, optimize=True)  # a palette, as the student report's picture
    finally:
        driver.set_window_size(1280, 1000)
