"""The zygote every rank is forked from holds the rank runtime and nothing that decides a grade."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.pack import load_pack
from grader.runtimes.torchdist.session import Zygote
from grader.salt import SALT_ENV

BODIES = load_pack("a9").bodies

#: The only grader modules a rank process may hold: the rank runtime and the pack's rank-side bodies.
RANK_RUNTIME = {
    "grader",
    "grader.handin",  # the hand-in readers' shared piece: the policy keys a notebook cell's code by its notebook
    "grader.runtimes",
    "grader.runtimes.torchdist",
    "grader.runtimes.torchdist.guard",
    "grader.runtimes.torchdist.policy",
    "grader.runtimes.torchdist.rank",
    "grader.runtimes.torchdist.torchrun_env",  # what torchrun would tell a rank on the case's layout
    "grader.runtimes.torchdist.zygote",
    "grader.sandbox",
    "grader.sandbox.audit",
    "grader.sandbox.isolation",
    "grader.sandbox.status",
    "grader.sandbox.syscalls",
    "grader.sandbox.wire",
    "grader.packs",
    "grader.packs.a9",
    "grader.packs.a9.bodies",
    "grader.packs.a9.trusted",  # the known-good Task 1 collectives that stand in for failed ones
    "grader.packs.a9.shards",  # the handout's *_shard names (public), never the catalog
}


def test_zygote_holds_only_the_rank_runtime() -> None:
    """No catalog, expected values, reference model, rubric or results model in a zygote's memory."""
    code = (
        "import json, sys\n"
        "from grader.runtimes.torchdist import zygote\n"
        f"zygote._preload({BODIES!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'grader' or m.startswith('grader.'))))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd="/")
    loaded = set(json.loads(done.stdout))
    assert loaded == RANK_RUNTIME
    assert "grader.packs.a9.expected" not in loaded and "grader.packs.a9.catalog" not in loaded


@pytest.fixture
def zygote(monkeypatch: pytest.MonkeyPatch) -> Zygote:
    monkeypatch.setenv(SALT_ENV, "the instructor's secret")
    z = Zygote(BODIES)
    yield z
    z.close()


def test_zygote_starts_with_a_scrubbed_environment(zygote: Zygote) -> None:
    environ = Path(f"/proc/{zygote.proc.pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert names <= {"PATH", "LANG", "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME"}
    assert b"secret" not in Path(f"/proc/{zygote.proc.pid}/cmdline").read_bytes()


def test_zygote_dies_with_its_session() -> None:
    """The session's death (however it comes) ends the zygote, and with it every group's leader."""
    code = (
        "import sys, time\n"
        "from grader.runtimes.torchdist.session import Zygote\n"
        f"z = Zygote({BODIES!r}); z.wait_ready(); print(z.proc.pid, flush=True); time.sleep(600)\n"
    )
    session = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert session.stdout is not None
    zygote_pid = int(session.stdout.readline())
    session.kill()
    session.wait()
    deadline = time.monotonic() + 10
    while alive(zygote_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(zygote_pid), "the zygote outlived its session"


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
