"""The zygote every rank is forked from holds the rank runtime and nothing that decides a grade."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grader.pack import load_pack
from grader.runtimes import RANK_MODULES
from grader.runtimes.torchdist.session import Zygote
from grader.runtimes.torchdist.zygote import scrubbed_environment
from grader.salt import SALT_ENV
from tests.processes import descendants

SIDE = load_pack("a9").rank_side
REPO = Path(__file__).resolve().parents[1]

#: The only grader modules a rank process may hold: the rank runtime and the pack's rank-side bodies.
RANK_RUNTIME = {
    "grader",
    "grader.handin",  # the hand-in readers' shared piece: the policy keys a notebook cell's code by its notebook
    "grader.runtimes",
    "grader.runtimes.torchdist",
    "grader.runtimes.torchdist.guard",
    "grader.runtimes.torchdist.heap",  # glibc's malloc thresholds every rank inherits
    "grader.runtimes.torchdist.policy",
    "grader.runtimes.torchdist.rank",
    "grader.runtimes.torchdist.replies",  # the bounds of a reply's fields, which the rank keeps to (MAX_THREADS)
    "grader.runtimes.torchdist.torchrun_env",  # what torchrun would tell a rank on the case's layout
    "grader.runtimes.torchdist.zygote",
    "grader.sandbox",
    "grader.sandbox.audit",
    "grader.sandbox.descriptors",
    "grader.sandbox.isolation",
    "grader.sandbox.libc",
    "grader.sandbox.namespaces",
    "grader.sandbox.parent",
    "grader.sandbox.reaping",
    "grader.sandbox.status",
    "grader.sandbox.syscalls",
    "grader.sandbox.wire",
    "grader.packs",
    "grader.packs.a9",
    "grader.packs.a9.bodies",
    "grader.packs.a9.trusted",  # the known-good Task 1 collectives that stand in for failed ones
    "grader.packs.a9.shards",  # the handout's *_shard names (public), never the catalog
}


#: What a grading's zygote holds beyond that: the session's host, which forked it (``grader.matrix.host``).
HOST = {"grader.matrix", "grader.matrix.host"}


@pytest.mark.parametrize("host", [False, True], ids=["started on its own", "forked by the session's host"])
def test_zygote_holds_only_the_rank_runtime(host: bool) -> None:
    """No catalog, expected values, reference model, rubric or results model in a zygote's memory:
    what it imports, and (forked by the session's host) what the host imported before the fork."""
    code = (
        "import json, sys\n"
        + ("import grader.matrix.host\n" if host else "")
        + "from grader.runtimes import RankSide\nfrom grader.runtimes.torchdist import zygote\n"
        f"zygote.preload({SIDE!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'grader' or m.startswith('grader.'))))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd="/")
    loaded = set(json.loads(done.stdout))
    assert loaded == RANK_RUNTIME | (HOST if host else set())
    assert "grader.packs.a9.expected" not in loaded and "grader.packs.a9.catalog" not in loaded


@pytest.mark.parametrize("runtime", sorted(RANK_MODULES))
def test_a_packs_runtime_decides_what_its_ranks_hold_besides_its_bodies(runtime: str) -> None:
    """The pack's runtime, not its bodies, puts the runtime's rank-side modules in the zygote: A9's
    bodies told the threads runtime hold the harness, told torchdist they do not."""
    side = dataclasses.replace(SIDE, runtime=runtime)
    code = (
        "import json, sys\nfrom grader.runtimes import RankSide\nfrom grader.runtimes.torchdist import zygote\n"
        f"zygote.preload({side!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('grader.runtimes.'))))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd="/")
    loaded = set(json.loads(done.stdout))
    assert set(RANK_MODULES[runtime]) <= loaded
    assert ("grader.runtimes.threads.harness" in loaded) == (runtime == "threads")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux sandbox's zygote")
def test_a_gradings_zygote_never_held_the_salt_and_dies_with_its_session(tmp_path: Path) -> None:
    """The zygote a grading's session host forks: its environment is the scrubbed one, nowhere in its
    memory is the instructor's salt (the host learns it only after the fork), and it ends with the
    session."""
    secret = f"salt-{os.urandom(8).hex()}"
    env = {**os.environ, SALT_ENV: secret}
    tree, rubric = _a_session_that_stays(tmp_path)
    cmd = [sys.executable, "-m", "grader", "grade", str(tree), "--rubric", str(rubric), "--out", str(tmp_path / "out")]
    grading = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        session, zygote_pid = _hosted_zygote(grading.pid, time.monotonic() + 60)
        environ = Path(f"/proc/{zygote_pid}/environ").read_bytes().split(b"\0")
        assert {entry.split(b"=", 1)[0].decode() for entry in environ if entry} <= set(scrubbed_environment())
        # The session holds the salt once it has read its configuration (on a loaded machine, a while after
        # its environment names the file): then the scan that finds it there must not find it in the zygote.
        deadline = time.monotonic() + 60
        while not _memory_holds(session, secret.encode()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _memory_holds(session, secret.encode()), "the session never held the salt: the scan proves nothing"
        assert not _memory_holds(zygote_pid, secret.encode())
        os.kill(session, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(zygote_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(zygote_pid), "the zygote outlived its session"
    finally:
        grading.kill()
        grading.wait()


def _a_session_that_stays(tmp_path: Path) -> tuple[Path, Path]:
    """The reference with a broadcast that sleeps, and a rubric that gives its case five minutes: the session
    lives while the test looks at it, however slowly a loaded machine scans memory (a whole A9 grading
    could end before the scans did).  Asleep, not spinning: a spinning rank took a core from the suite."""
    tree = tmp_path / "sleeps"
    shutil.copytree(REPO / "reference" / "a9", tree, ignore=shutil.ignore_patterns("__pycache__"))
    with (tree / "src" / "collectives.py").open("a") as f:
        f.write("\n\ndef my_broadcast(tensor, src=0):\n    import time\n\n    time.sleep(3600)\n")
    data = yaml.safe_load((REPO / "rubrics" / "a9.yaml").read_text())
    data["limits"]["case_timeout_s"] = data["limits"]["case_timeout_floor_s"] = 300
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(yaml.safe_dump(data))
    return tree, rubric


def _hosted_zygote(grading: int, deadline: float) -> tuple[int, int]:
    """(session, zygote): the two processes of ``grader.matrix.host`` below ``grading``, the one the
    other's child."""
    while time.monotonic() < deadline:
        hosts = {}
        for pid in descendants(grading):
            try:
                if b"grader.matrix.host" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    hosts[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
        for pid, ppid in hosts.items():
            try:  # the pairs below the zygote (a group's leader, init, ranks) come and go with their groups
                if ppid in hosts and _memory_holds(ppid, b"matrix-config.json"):  # the session read its config
                    return ppid, pid
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("no session host forked a zygote in time")


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` is anywhere in the readable memory of process ``pid`` (root reads it all)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            span, perms, *_ = line.split()
            if not perms.startswith("r") or line.rstrip().endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            tail = b""
            for offset in range(start, end, 1 << 22):
                try:
                    mem.seek(offset)
                    chunk = tail + mem.read(min(1 << 22, end - offset))
                except OSError:
                    break
                if needle in chunk:
                    return True
                tail = chunk[-len(needle) :]
    return False


@pytest.fixture
def zygote(monkeypatch: pytest.MonkeyPatch) -> Zygote:
    monkeypatch.setenv(SALT_ENV, "the instructor's secret")
    z = Zygote.start(SIDE)
    yield z
    z.close()


def test_zygote_starts_with_a_scrubbed_environment(zygote: Zygote) -> None:
    environ = Path(f"/proc/{zygote.pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert names <= set(scrubbed_environment())
    assert b"secret" not in Path(f"/proc/{zygote.pid}/cmdline").read_bytes()


def test_zygote_dies_with_its_session() -> None:
    """The session's death (however it comes) ends the zygote, and with it every group's leader."""
    code = (
        "import sys, time\n"
        "from grader.runtimes import RankSide\nfrom grader.runtimes.torchdist.session import Zygote\n"
        f"z = Zygote.start({SIDE!r}); z.wait_ready(); print(z.pid, flush=True); time.sleep(600)\n"
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


ALIGNMENT_PROBE = """
import torch, torch.nn.functional as F
g = torch.Generator().manual_seed(0)
differ = 0
for m, k, n in [(16, 32, 64), (8, 48, 112), (64, 64, 224), (128, 32, 96), (16, 16, 56), (1, 100, 7)]:
    a, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    want = F.linear(a, w, b)
    for offset in range(1, 8):
        a_moved = torch.empty(m * k + offset)[offset:].view(m, k).copy_(a)
        w_moved = torch.empty(n * k + offset)[offset:].view(n, k).copy_(w)
        differ += (not torch.equal(F.linear(a_moved, w, b), want)) + (not torch.equal(F.linear(a, w_moved, b), want))
print(differ)
"""


def test_a_ranks_numbers_do_not_depend_on_where_its_data_lies_in_memory() -> None:
    """The same values give the same products bit for bit whatever their alignment, in the environment
    the session and every rank start with: MKL's did not (12 of 84 here), which made a gradient near a
    ReLU's kink, and so a grade, vary from one grading of the same submission to the next."""
    env = scrubbed_environment()
    done = subprocess.run([sys.executable, "-c", ALIGNMENT_PROBE], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "0"


FORK_PROBE = """
import os, signal, torch
torch.ones(1 << 22).mul_(2)  # large enough for a parallel region, on the pool if there is one
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a child stuck on a pool that did not survive the fork dies instead of waiting
    torch.ones(1 << 22).mul_(2)
    os._exit(0)
print(os.waitpid(pid, 0)[1])
"""


def test_a_process_forked_after_its_parent_computed_can_compute() -> None:
    """In the environment the session, the zygote and every rank start with, a process forked from a
    parent that already computed (a zygote from its host, a rank from its zygote, a test's rank from
    pytest) computes too: with a pool of several OpenMP threads in the parent, it waited forever."""
    env = scrubbed_environment()
    done = subprocess.run([sys.executable, "-c", FORK_PROBE], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "0", "the forked child did not finish its computation"
