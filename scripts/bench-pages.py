#!/usr/bin/env python3
"""How fast the service's class page answers for a big class (issue 60): STUDENTS students with
PUSHES submissions each (1,000 x 20 = 20,000 by default), seeded as the engine leaves them (a row, and
results.json for every graded one; tests/pages_kit.py), served by the real app under uvicorn on
127.0.0.1 with SQLite, and fetched by an instructor's session.

It prints the first answer (every latest result read from disk once), then the median and worst of
REPEAT answers of the class page as it opens, sorted by score, filtered by name and a later page, of a
student's history, and of the live poll each open page makes a second. Then, in Debian's headless
Chromium (tests/pages_kit.chromium), LANDINGS grades landing while the class page is open (newest first):
the time from each grade's commit to the database to the page's DOM showing it, with no reload (the
issue's goal: 2 s), each landing at a random moment of the page's poll. Not a test: the figures go to
docs/measurements.md.

    python3 scripts/bench-pages.py [--students 1000] [--pushes 20] [--repeat 20] [--landings 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the pages' test helpers (tests/ is not a package)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=1000)
    parser.add_argument("--pushes", type=int, default=20)
    parser.add_argument("--cases", type=int, default=60, help="cases in each results document")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--landings", type=int, default=10, help="grades landing on an open page (0: none)")
    args = parser.parse_args()

    import httpx
    from pages_kit import ASSIGNMENT, add_cases, chromium, fixture, open_seeded, serving, variant

    rng = random.Random(60)
    base = add_cases(fixture(), args.cases)
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        service, seeder = open_seeded(Path(tmp))
        seeder.write_reports = False  # the class page never reads a report
        started = time.monotonic()
        start = time.time() - 14 * 86400
        for n in range(args.students):
            student = f"student-{n:04d}"
            pushes = [
                (student, variant(base, rng, passing=rng.random(), student=student, late=rng.random() < 0.1),
                 start + n + p * 3600, "graded", "")
                for p in range(args.pushes)
            ]  # fmt: skip
            seeder.bulk(pushes)
        seeded = time.monotonic() - started
        print(f"seeded {args.students} students x {args.pushes} submissions in {seeded:.0f} s", flush=True)
        with serving(service) as url, httpx.Client(base_url=url, timeout=120) as client:
            client.post("/login", data={"token": service.instructor_token})
            page = f"/assignments/{ASSIGNMENT}"

            def timed(path: str) -> float:
                began = time.perf_counter()
                answer = client.get(path)
                elapsed = time.perf_counter() - began
                assert answer.status_code == 200, (path, answer.status_code)
                return elapsed * 1000

            print(f"first answer (every latest result read once): {timed(page):.0f} ms")
            for label, path in (
                ("class page", page),
                ("sorted by score, descending", f"{page}?sort=score&order=desc"),
                ("filtered by name", f"{page}?q=student-09"),
                ("page 10", f"{page}?page=10"),
                ("a student's history (20 pushes)", f"{page}/students/student-0500"),
                ("the live poll (version)", f"{page}/version"),
            ):
                times = [timed(path) for _ in range(args.repeat)]
                print(f"{label:34s} median {statistics.median(times):6.0f} ms   max {max(times):6.0f} ms")
            if args.landings:
                driver = chromium(Path(tmp))
                if driver is None:
                    print("no chromedriver: landings not measured (scripts/install-chromium.sh installs it)")
                    return 0
                try:
                    land = [
                        (variant(base, rng, passing=rng.random(), student="student-0000"), rng.uniform(0, 1.5))
                        for _ in range(args.landings)
                    ]
                    times = landings(driver, url, service, seeder, land)
                finally:
                    driver.quit()
                print(
                    f"{'a landed grade on the open page':34s} median {statistics.median(times):6.0f} ms   "
                    f"max {max(times):6.0f} ms   ({len(times)} landings, commit to DOM)"
                )
    return 0


WATCH = """
const row = () => document.querySelector("#class-table tr[data-student='student-0000'] a[href^='/s/']");
const before = row() && row().getAttribute("href");
window.__shown = null;
const watcher = new MutationObserver(() => {
  const now = row();
  if (window.__shown === null && now && now.getAttribute("href") !== before) {
    window.__shown = Date.now();
    watcher.disconnect();
  }
});
watcher.observe(document.body, { childList: true, subtree: true });
"""


def landings(driver, url: str, service, seeder, land: list) -> list[float]:
    """Milliseconds from each grade's commit (``Seeder.add`` returned) to the open class page's row
    linking its report; the browser's clock and this one are the machine's."""
    from pages_kit import ASSIGNMENT
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{url}/login")
    driver.find_element(By.ID, "token").send_keys(service.instructor_token + "\n")
    WebDriverWait(driver, 60).until(lambda d: "/assignments" in d.current_url)
    driver.get(f"{url}/assignments/{ASSIGNMENT}?sort=received&order=desc")
    times = []
    for doc, pause in land:
        driver.execute_script(WATCH)
        time.sleep(pause)  # a random phase of the page's poll
        seeder.add("student-0000", doc, received=time.time())
        committed = time.time()
        WebDriverWait(driver, 60, poll_frequency=0.05).until(lambda d: d.execute_script("return window.__shown"))
        times.append(driver.execute_script("return window.__shown") - committed * 1000)
    return times


if __name__ == "__main__":
    sys.exit(main())
