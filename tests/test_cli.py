"""The command line as a function: what running it leaves to the process that called it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import tomllib

from grader.cli import SERVICE_EXTRA, main

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


def test_grader_serve_without_the_service_extra_says_which_extra_to_install(tmp_path: Path) -> None:
    """A student's base install has no FastAPI: ``grader serve`` then names the extra in one line (exit 1),
    never an internal error; the extra's list is what pyproject.toml's ``service`` extra installs."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["service"]
    names = {spec.split("[")[0].split(">")[0].split("=")[0].strip().lower().replace("-", "_") for spec in extra}
    assert names <= SERVICE_EXTRA
    hide_fastapi = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'fastapi':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from grader.cli import main\n"
        "sys.exit(main(['serve', '--config', sys.argv[1]]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", hide_fastapi, str(tmp_path / "service.yaml")], capture_output=True, text=True
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().splitlines() == [
        "grader: grader serve needs the service extra (fastapi is missing): "
        'pip install "dist-grader[service]", or EXTRAS=service bash scripts/install.sh from a checkout'
    ]
