"""The HTML reports: their numbers are the gradebook's, the class report is a function of the results
alone, the pack's diagram draws every message, and they render in headless Chromium (screenshots in
artifacts/screenshots/, checked to be real pictures).

The class is graded by the fake grader of tests/test_batch.py (see its docstring: real case ids,
real scoring, no student code run), so these tests exercise the same files `grader batch` writes.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import tempfile
from html import escape
from html.parser import HTMLParser
from io import StringIO
from pathlib import Path

import numpy
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
DOCS_PICTURE = REPO / "docs" / "_static" / "student-report.png"
RANK_COLOURS = [(0x25, 0x63, 0xEB), (0xDC, 0x26, 0x26), (0x05, 0x96, 0x69), (0xD9, 0x77, 0x06)]


def _fake_grader_module():
    spec = importlib.util.spec_from_file_location("fake_grader", Path(__file__).with_name("test_batch.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    from grader.batch import run_batch

    fake = _fake_grader_module()
    root = tmp_path_factory.mktemp("reports")
    roster = root / "roster"
    fake.submission(roster, "a9-alice")
    fake.submission(roster, "a9-bob", "forbidden", "hang-case")
    fake.submission(roster, "a9-carol", "no-trace")
    fake.submission(roster, "a9-dave", "crash")
    fake.submission(roster, "a9-erin")
    fake.submission(roster, "a9-fred", "forbidden")
    (roster / "a9-gus").mkdir()
    manual = root / "manual.csv"
    manual.write_text("alice,task1.diagram,4,labelled arrows; chunk 3 of r1 is drawn twice\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAKE_GRADER_LOG", str(root / "grades.log"))
        run_batch(roster, root / "out", jobs=2, manual=manual, grade_cmd=fake.FAKE, progress=StringIO())
    return root / "out"


class _Numbers(HTMLParser):
    """Every element carrying ``data-value``, with its other ``data-*`` attributes; and tag counts."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[dict[str, str]] = []
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        data = {k.removeprefix("data-"): v or "" for k, v in attrs if k.startswith("data-")}
        self.elements.append((tag, data))
        if "value" in data:
            self.values.append(data)


def parse(path: Path) -> _Numbers:
    parser = _Numbers()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    with (out / "gradebook.csv").open() as fh:
        return {row["student"]: row for row in csv.DictReader(fh)}


# ----------------------------------------------------------------------------------------------
# Numbers


def test_class_report_numbers_are_the_gradebook(out):
    book = gradebook(out)
    page = parse(out / "index.html")
    shown: dict[tuple[str, str], str] = {}
    for v in page.values:
        if "student" in v:
            shown[(v["student"], v.get("task") or v["field"])] = v["value"]
    columns = [c for c in next(iter(book.values())) if c not in ("student", "status", "flags")]
    assert columns == ["task1", "task2", "bonus", "late_penalty", "total"]
    assert {(s, c): row[c] for s, row in book.items() for c in columns} == shown
    statuses = {d["student"]: d["status"] for tag, d in page.elements if tag == "tr" and "status" in d}
    assert statuses == {s: row["status"] for s, row in book.items()}
    overview = {v["field"]: v["value"] for v in page.values if "student" not in v and "field" in v}
    assert overview["students"] == str(len(book)) and overview["count-graded"] == "5"


def test_student_reports_show_the_gradebook_numbers(out):
    from grader.render.html_kit import fmt_points
    from grader.results import GradeResult

    book = gradebook(out)
    graded = [s for s, row in book.items() if row["status"] == "graded"]
    assert graded == ["alice", "bob", "carol", "erin", "fred"]
    for student in graded:
        page = parse(out / "students" / student / "report.html")
        fields = {v["field"]: v["value"] for v in page.values if "field" in v and "item" not in v}
        tasks = {v["task"]: v["value"] for v in page.values if "task" in v}
        row = book[student]
        assert fields["total"] == row["total"]
        assert fields["bonus"] == row["bonus"]
        assert fields["late_penalty"] == row["late_penalty"]
        assert tasks["task1"] == row["task1"] and tasks["task2"] == row["task2"]
        result = GradeResult.load(out / "students" / student / "results.json")
        items = {v["item"]: float(v["value"]) for v in page.values if "item" in v}
        assert items == {i.id: pytest.approx(i.score) for i in result.items()}
        assert fields["total"] == fmt_points(result.score)
    alice = (out / "students" / "alice" / "report.html").read_text()
    assert "instructor&#x27;s comment: labelled arrows; chunk 3 of r1 is drawn twice" in alice
    assert ">manual<" in alice


def test_histograms_count_every_graded_student(out):
    from grader.rubric import load_rubric

    book = gradebook(out)
    max_total = load_rubric().max_score
    totals = [float(r["total"]) for r in book.values() if r["status"] == "graded"]
    bars: dict[str, list[tuple[str, int]]] = {}
    current = None
    for tag, d in parse(out / "index.html").elements:
        if tag == "svg" and "histogram" in d:
            current = d["histogram"]
        elif tag == "rect" and "bin" in d and current:
            bars.setdefault(current, []).append((d["bin"], int(d["count"])))
    assert set(bars) == {"task1", "task2", "bonus", "total"}
    assert all(sum(c for _, c in b) == len(totals) for b in bars.values())
    for bin_range, count in bars["total"]:
        lo, hi = map(float, bin_range.split("-"))
        last = hi == max_total
        assert count == sum(lo <= t < hi or (last and t == hi) for t in totals), bin_range


def _shown_rates(html: Path) -> dict[str, float]:
    shown, case = {}, None
    for tag, d in parse(html).elements:
        if tag == "tr":
            case = d.get("case")
        elif case and d.get("field") == "pass_rate":
            shown[case] = float(d["value"])
    return shown


def test_case_pass_rates_come_from_each_students_results(out):
    from grader.junit import read_junit
    from grader.results import GradeResult

    book = gradebook(out)
    graded = [s for s, r in book.items() if r["status"] == "graded"]
    verdicts = {}
    for student in graded:
        result = GradeResult.load(out / "students" / student / "results.json")
        verdicts[student] = {c.id: c.verdict.value for c in result.cases}
        # With visible case ids, a result's cases are its matrix run's verdicts, every one of them.
        junit = read_junit(out / "students" / student / "graded" / "junit.xml")
        assert verdicts[student] == {c.id: c.verdict.value for c in junit.values()}
    shown = _shown_rates(out / "index.html")
    assert set(shown) == {c for v in verdicts.values() for c in v} and shown
    assert any(rate < 1 for rate in shown.values()) and any(rate == 1 for rate in shown.values())
    for case, rate in shown.items():
        ran = [v[case] for v in verdicts.values() if case in v]
        assert rate == pytest.approx(sum(x == "pass" for x in ran) / len(ran), abs=1e-4), case
    families = {d["family"] for tag, d in parse(out / "index.html").elements if tag == "tr" and "family" in d}
    assert families == {case.split("[")[0] for case in shown}


def test_the_class_report_is_rendered_from_the_results_alone(out, tmp_path):
    """No matrix run is read: with every junit.xml gone, the results and the batch's outcomes make the
    same page, per-case pass rates and hangs included.  (A batch itself would grade such a student again:
    it scores everyone from graded/junit.xml, see test_batch.py.)"""
    from grader.batch.workers import load_outcome
    from grader.gradebook import gradebook_row
    from grader.render.class_report import render_class_report
    from grader.results import GradeResult

    copy = Path(shutil.copytree(out, tmp_path / "copy"))
    for junit in copy.rglob("junit.xml"):
        junit.unlink()
    results, rows = {}, []
    for student in gradebook(copy):
        student_dir = copy / "students" / student
        outcome = load_outcome(student_dir)
        path = student_dir / "results.json"
        results[student] = GradeResult.load(path) if path.exists() else None
        rows.append(gradebook_row(student, outcome.status, results[student], outcome.message, [outcome.flag]))
    page = render_class_report(results, rows)
    assert page == (out / "index.html").read_text(encoding="utf-8")
    (copy / "again.html").write_text(page, encoding="utf-8")
    assert _shown_rates(copy / "again.html") == _shown_rates(out / "index.html") != {}
    timeouts = page[page.index('id="timeouts"') :]
    assert 'data-student="bob"' in timeouts and "1 case(s) hung: test_all_to_all[ws8" in timeouts


def test_violations_and_failures_are_listed(out):
    html = (out / "index.html").read_text()
    section = html[html.index('id="violations"') : html.index('id="timeouts"')]
    assert section.count("forbidden-collective") == 2  # bob and fred
    assert "dist.all_reduce(tensor)" in section
    timeouts = html[html.index('id="timeouts"') :]
    assert 'data-student="dave"' in timeouts and 'data-student="bob"' in timeouts  # grader error, hang
    assert 'href="students/alice/report.html"' in html
    assert 'href="students/dave/report.html"' not in html  # no result, no report


def test_diagram_draws_every_message_and_says_when_there_is_no_trace(out):
    from grader.pack import load_pack
    from grader.render.trace_svg import render_diagram
    from grader.results import GradeResult

    diagram = load_pack("a9").diagram
    elements = parse(out / "students" / "alice" / "report.html").elements
    assert any(tag == "svg" and d.get("diagram") == diagram.function == "my_all_to_all" for tag, d in elements)
    pairs = sorted((int(d["src"]), int(d["dst"])) for tag, d in elements if tag == "g" and "message" in d)
    assert pairs == [(s, d) for s in range(4) for d in range(4) if s != d]
    # With hidden case ids the trace is keyed "hidden case N": the diagram still finds the probe, as the
    # one whose events all come from the pack's function.
    trace = GradeResult.load(out / "students" / "alice" / "results.json").trace
    assert diagram.case in trace
    hidden = {f"hidden case {n}": summary for n, summary in enumerate(trace.values())}
    assert render_diagram(hidden, diagram.case, diagram.function).count("data-message=") == 12
    carol = parse(out / "students" / "carol" / "report.html").elements
    assert any(d.get("diagram") == "none" for _, d in carol)
    assert "No trace available" in (out / "students" / "carol" / "report.html").read_text()


def test_the_diagram_is_the_packs_and_knows_no_assignment(out):
    from grader.pack import Diagram, load_pack
    from grader.render.student_report import render_student_report
    from grader.render.trace_svg import render_diagram
    from grader.results import GradeResult, SubmissionInfo

    fake = _fake_grader_module()
    svg = render_diagram({"test_double[ws2]": {"events": fake._events("double")}}, "test_double[ws2]", "double")
    assert 'data-diagram="double"' in svg and svg.count("data-message=") == 12
    assert "all-to-all" not in svg.lower() and "all_to_all" not in svg
    none = render_diagram({}, "test_double[ws2]", "double")
    assert 'data-diagram="none"' in none and "double" in none and "all-to-all" not in none.lower()

    result = GradeResult("toy", 0.0, 10.0, [], SubmissionInfo("x", {}, "sha256:0"), "0", "sha256:0")
    result.trace = {"test_double[ws2]": {"events": fake._events("double")}}
    assert 'id="diagram"' not in render_student_report(result, diagram=None)
    page = render_student_report(result, diagram=Diagram("test_double[ws2]", "double", "Your double, by rank"))
    assert "Your double, by rank" in page and 'data-diagram="double"' in page
    assert escape(load_pack("a9").diagram.title) in (out / "students" / "alice" / "report.html").read_text()


def test_diagram_marks_messages_nobody_received_and_receives_nobody_sent():
    from grader.render.trace_svg import _events, match_messages, render_diagram

    events = [
        {"rank": 0, "op": "send", "peer": 1, "t": 0.001, "bytes": 8, "shape": [2], "dtype": "float32"},
        {"rank": 1, "op": "recv", "peer": 0, "t": 0.002, "bytes": 8, "shape": [2], "dtype": "float32"},
        {"rank": 0, "op": "send", "peer": 1, "t": 0.003, "bytes": 8, "shape": [2], "dtype": "float32"},
        {"rank": 3, "op": "irecv", "peer": 2, "t": 0.004, "bytes": 8, "shape": [2], "dtype": "float32"},
        {"rank": "x", "op": "send"},  # malformed events (they crossed the trust boundary) are dropped
    ]
    svg = render_diagram({"probe[ws4]": {"events": events}}, "probe[ws4]", "my_fn")
    assert svg.count("data-message=") == 2 and "never received" in svg and 'data-orphan="1"' in svg

    messages, orphans = match_messages(_events(events))
    assert [(m.src, m.dst, m.k, m.recv is not None) for m in messages] == [(0, 1, 0, True), (0, 1, 1, False)]
    assert [(o.rank, o.peer) for o in orphans] == [(3, 2)]


def test_reports_are_self_contained(out):
    for page in [out / "index.html", *sorted((out / "students").glob("*/report.html"))]:
        html = page.read_text()
        assert "<script" not in html and "<link" not in html and " src=" not in html
        assert html.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0, page


# ----------------------------------------------------------------------------------------------
# Headless Chromium


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        script = REPO / "scripts" / "install-chromium.sh"
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900)
        found = shutil.which("chromium")
        if found is None:
            pytest.skip(
                f"chromium is not installed and {script.name} could not install it: "
                f"{(done.stderr or done.stdout).strip()[-300:]}"
            )
    return found


def _chromium(binary: str, tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Its own temporary directory, removed after: Chromium leaves its singleton's (org.chromium.Chromium.*)
    # there.  A short path: the singleton's socket must fit a socket address (108 bytes), which tmp_path may not.
    with tempfile.TemporaryDirectory(prefix="chromium-") as temp:
        return subprocess.run(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                f"--user-data-dir={tmp_path / 'chromium-profile'}",
                *args,
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "HOME": str(tmp_path), "TMPDIR": temp},
        )


def screenshot(binary: str, tmp_path: Path, page: Path, name: str, height: int) -> numpy.ndarray:
    """The page as Chromium draws it, ``height`` pixels tall: an array of RGB rows (height x 1280 x 3)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    png = SCREENSHOTS / name
    png.unlink(missing_ok=True)
    done = _chromium(binary, tmp_path, page, f"--screenshot={png}", f"--window-size=1280,{height}")
    assert png.is_file(), done.stderr[-2000:]
    with Image.open(png) as image:
        assert image.size == (1280, height), image.size
        return numpy.asarray(image.convert("RGB"))


def colours(pixels: numpy.ndarray) -> set[tuple[int, ...]]:
    """Every colour the pixels hold."""
    return {tuple(int(v) for v in c) for c in numpy.unique(pixels.reshape(-1, 3), axis=0)}


def test_student_report_renders_with_its_diagram(out, chromium, tmp_path):
    page = out / "students" / "alice" / "report.html"
    dom = _chromium(chromium, tmp_path, page, "--dump-dom").stdout
    assert 'data-diagram="my_all_to_all"' in dom and dom.count("data-message=") == 12
    pixels = screenshot(chromium, tmp_path, page, "student-report.png", 4500)
    where = {c: numpy.argwhere((pixels == c).all(axis=-1)) for c in RANK_COLOURS}  # (y, x) of each rank's colour
    assert all(len(points) for points in where.values()), "a rank's colour is missing: the diagram did not render"
    ys, xs = numpy.concatenate(list(where.values())).T
    region = colours(pixels[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1])
    assert len(region) > 50, f"only {len(region)} colours in the diagram region"
    assert xs.max() - xs.min() > 600 and ys.max() - ys.min() > 250  # lanes and arrows, not a stray dot
    if os.environ.get("GRADER_DOCS_SCREENSHOT"):  # README.md's and the manual's picture, refreshed on request
        save_docs_picture(pixels, ys.max())


def save_docs_picture(pixels: numpy.ndarray, bottom: int) -> None:
    """The report from its top to the diagram's last row, as docs/_static/student-report.png (committed:
    ``GRADER_DOCS_SCREENSHOT=1 python3 -m pytest tests/test_html_reports.py -k student_report`` redraws it)."""
    picture = Image.fromarray(pixels[: min(int(bottom) + 40, len(pixels))])
    picture.quantize(colors=128).save(DOCS_PICTURE, optimize=True)  # a palette: a quarter of the bytes


def test_class_report_renders_with_its_histograms(out, chromium, tmp_path):
    page = out / "index.html"
    dom = _chromium(chromium, tmp_path, page, "--dump-dom").stdout
    assert dom.count("data-histogram=") == 4
    drawn = colours(screenshot(chromium, tmp_path, page, "class-report.png", 2000))
    assert (0x3B, 0x82, 0xF6) in drawn, "no histogram bar was drawn"
    assert len(drawn) > 100
