"""The matrix session's host (``grader.matrix.host``): a session that says its verdicts are final lets
the runner score while it closes its groups, is waited for, and is ended if its close never ends;
only the session can say it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux sandbox's session host")

PLUGIN = """
import json, os, time
from grader.matrix.host import FINAL_ENV, say_final
from grader.runtimes.torchdist.zygote import ZYGOTE_ENV

def pytest_sessionstart(session):
    pipe = os.fstat(int(os.environ[FINAL_ENV])).st_ino
    zygote = int(os.environ[ZYGOTE_ENV].partition(":")[2])
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump({"pipe": f"pipe:[{pipe}]", "zygote": zygote}, out)

def pytest_sessionfinish(session, exitstatus):
    say_final(int(exitstatus))
    time.sleep(600)  # a close of its groups that never ends
"""


def test_a_session_is_scored_once_final_then_waited_for_and_ended_if_its_close_never_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from grader.matrix import host as hosting

    (tmp_path / "teardown_never_ends.py").write_text(PLUGIN)
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    probe = tmp_path / "probe.json"
    argv = [str(tmp_path / "test_one.py"), "-c", str(tmp_path / "pytest.ini"), "-p", "no:cacheprovider"]
    argv += ["-p", "teardown_never_ends", "-q"]
    env = {"PATH": os.environ["PATH"], "PROBE_OUT": str(probe), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    host = hosting.Host.start()
    try:
        host.preload("grader.packs.a9.bodies", [str(tmp_path)])
        proc = host.begin(argv, env, str(tmp_path))
        assert host.final(timeout=120) == 0  # its one test passed and its JUnit writer ran
        assert proc.poll() is None  # still closing: the runner scores meanwhile
        seen = json.loads(probe.read_text())
        zygote_fds = {os.readlink(f) for f in Path(f"/proc/{seen['zygote']}/fd").iterdir()}
        assert seen["pipe"] not in zygote_fds  # the zygote, and every rank it forks, cannot say it
        monkeypatch.setattr(hosting, "TEARDOWN_S", 0.5)
        started = time.monotonic()
    finally:
        host.close()
    assert time.monotonic() - started < 30
    assert proc.returncode == -9  # its close outlived TEARDOWN_S: killed, with its process group
    assert host.log.closed


def test_a_session_that_ends_without_saying_it_is_final_says_nothing(tmp_path: Path) -> None:
    from grader.matrix.host import Host

    host = Host.start()
    try:
        host.preload("grader.packs.a9.bodies", [])
        proc = host.begin(["--version"], {"PATH": os.environ["PATH"]}, str(tmp_path))
        assert host.final(timeout=120) is None  # pytest printed its version and ended: the exit status tells
        assert proc.wait(timeout=60) == 0
    finally:
        host.close()
