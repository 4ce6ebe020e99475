#!/usr/bin/env python3
"""How fast the service's class page answers for a big class (issue 60): STUDENTS students with
PUSHES submissions each (1,000 x 20 = 20,000 by default), seeded as the engine leaves them (a row, and
results.json for every graded one; tests/pages_kit.py), served by the real app under uvicorn on
127.0.0.1 with SQLite, and fetched by an instructor's session.

It prints the first answer (every latest result read from disk once), then the median and worst of
REPEAT answers of the class page as it opens, sorted by score, filtered by name and a later page, of a
student's history, and of the live poll each open page makes a second. Not a test: the figures go to
docs/measurements.md.

    python3 scripts/bench-pages.py [--students 1000] [--pushes 20] [--repeat 20]
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
    args = parser.parse_args()

    import httpx
    from pages_kit import ASSIGNMENT, add_cases, fixture, open_seeded, serving, variant

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
