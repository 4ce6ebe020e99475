"""The command line as a function: what running it leaves to the process that called it."""

from __future__ import annotations

import signal
from pathlib import Path

from grader.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_the_cli_run_in_a_process_hands_its_sigterm_handler_back() -> None:
    """While it runs, SIGTERM unwinds the grader like Ctrl-C (``tests/test_lifecycle.py``); after it,
    the caller's own handler is in place again."""

    def callers(signum: int, frame: object) -> None:
        raise AssertionError("never sent")

    before = signal.signal(signal.SIGTERM, callers)
    try:
        assert main(["rubric", "validate", str(REPO / "rubrics" / "a9.yaml")]) == 0
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, before)
