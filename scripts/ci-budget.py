"""CI's time budget, printed at the end of ``.ci/run``: the whole run, each stage, the suite's ten
slowest tests, and a word when the run took longer than the budget (issue 43).

The budget is 30 minutes on the 2-core machine CI runs on; CI's hard limit is 90.  A run over the
budget is reported, never failed: a noisy machine must not block a right submission, but whoever
slowed the suite sees it before the landing does.

With ``--cpu-before`` and ``--cpu-after`` (the ``cpu`` line of /proc/stat when the suite began and
ended) it also says how busy the machine's cores were meanwhile: a suite whose cores idle gains from
another pytest worker, one whose cores are busy only from less work.

    python3 scripts/ci-budget.py --junit JUNIT_XML --total SECONDS \
        [--cpu-before LINE --cpu-after LINE] STAGE=SECONDS ...
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

BUDGET_S = 30 * 60


def cases(junit: Path) -> list[tuple[float, str]]:
    """Every test case of a pytest JUnit file with its seconds, as ``module::test`` (none if unreadable)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    return [
        (float(case.get("time") or 0.0), f"{case.get('classname', '')}::{case.get('name', '')}")
        for case in root.iter("testcase")
    ]


def by_module(tests: list[tuple[float, str]]) -> list[tuple[float, int, str]]:
    """Seconds and test count per test module, dearest first."""
    totals: dict[str, list[float]] = {}
    for seconds, name in tests:
        totals.setdefault(name.split("::")[0], []).append(seconds)
    return sorted(((sum(times), len(times), module) for module, times in totals.items()), reverse=True)


def busy_share(before: str, after: str) -> float | None:
    """The share of the cores' time that was not idle (idle and iowait) between two /proc/stat ``cpu``
    lines; None when either is not one."""
    try:
        first, last = ([int(x) for x in line.split()[1:]] for line in (before, after))
    except ValueError:
        return None
    spent = [b - a for a, b in zip(first, last, strict=False)]
    total = sum(spent)
    if len(spent) < 5 or total <= 0:
        return None
    return 1 - (spent[3] + spent[4]) / total


def minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", type=Path, required=True)
    parser.add_argument("--total", type=float, required=True)
    parser.add_argument("--cpu-before", default="", help="/proc/stat's cpu line when the suite began")
    parser.add_argument("--cpu-after", default="", help="and when it ended")
    parser.add_argument("stages", nargs="*", help="NAME=SECONDS, in the order they ran")
    args = parser.parse_args(argv)
    print(f"[ci-budget] .ci/run took {minutes(args.total)} (budget {minutes(BUDGET_S)}, limit 90:00)")
    for stage in args.stages:
        name, _, seconds = stage.rpartition("=")
        print(f"[ci-budget]   {minutes(float(seconds)):>6}  {name}")
    busy = busy_share(args.cpu_before, args.cpu_after)
    if busy is not None:
        print(f"[ci-budget] the cores were busy {busy:.0%} of the suite's time (the rest idle)")
    tests = cases(args.junit)
    if tests:
        print(f"[ci-budget] the tests' own seconds, summed over every worker: {sum(t for t, _ in tests):.0f} s")
        print("[ci-budget] the ten slowest tests:")
        for seconds, name in sorted(tests, reverse=True)[:10]:
            print(f"[ci-budget]   {seconds:7.1f} s  {name}")
        print("[ci-budget] the ten dearest test modules:")
        for seconds, count, module in by_module(tests)[:10]:
            print(f"[ci-budget]   {seconds:7.1f} s  {count:4d} tests  {module}")
    if args.total > BUDGET_S:
        print(
            f"[ci-budget] OVER BUDGET: {minutes(args.total)} is more than {minutes(BUDGET_S)}; "
            "find what slowed it in the stages and tests above (docs/measurements.md has the last table)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
