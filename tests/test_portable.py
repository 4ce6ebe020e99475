"""Every student's machine (issue 21): the portable runtime, forced here on Linux, and the choice of
runtime on a platform faked to be macOS, Windows or a Linux without namespaces.

The portable runtime starts ranks with ``multiprocessing`` (forked from a fork server on Linux,
spawned on macOS and Windows), joins them through a FileStore and
can see nothing of them from outside; so these tests check what it still promises: the same
verdicts for honest code, hangs found by the budget and named by the rank's own watchdog (a rank
that cannot answer is a hang without a line), a deadlock found by the ranks' own account, every
layer that is off named, and the run called advisory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grader.errors import UserError
from grader.junit import read_junit
from grader.pack import load_pack
from grader.pipeline import grade
from grader.runner import run_matrix
from grader.runtimes.torchdist import portable
from grader.runtimes.torchdist.mode import Host, Isolation, decide, start_method
from grader.runtimes.torchdist.portable import pool_capacity
from grader.sandbox import libc, namespaces, parent
from tests import fidelity
from tests.processes import other_test_processes
from tests.test_hangs import body_start

REPO = Path(__file__).resolve().parents[1]
FILES = ["src/collectives.py", "src/transformer.py"]
POLICY = {"src/transformer.py": ["all_reduce", "all_gather"]}
#: every layer a full (root) grading reports, the ``salt`` aside
FULL_LAYERS = {
    "zygote", "pid_namespace", "cgroup", "measured_traffic", "rlimits", "fds", "nproc", "filesystem",
    "ipc", "uid", "prctl", "network", "seccomp", "audit_hooks",
}  # fmt: skip


# --------------------------------------------------------------------------- which isolation, where


@pytest.mark.parametrize(
    ("host", "isolation"),
    [
        (Host("win32", fork=False, root=False, namespaces="not Linux"), "portable"),
        (Host("darwin", fork=True, root=False, namespaces="not Linux"), "portable"),
        (Host("linux", fork=True, root=False, namespaces="unprivileged user namespaces are off"), "portable"),
        (Host("linux", fork=True, root=False, namespaces=""), "rootless"),
        (Host("linux", fork=True, root=True, namespaces=""), "full"),
    ],
)
def test_auto_picks_the_strongest_isolation_the_machine_can_build(host: Host, isolation: str) -> None:
    chosen = decide("auto", host)
    assert chosen.name == isolation
    assert chosen.why  # every choice says why
    assert decide("portable", host).name == "portable"  # and a student may always ask for the portable one


def test_full_isolation_where_it_cannot_be_built_is_refused_with_the_reason() -> None:
    with pytest.raises(UserError, match=r"no os\.fork"):
        decide("full", Host("win32", fork=False, root=False, namespaces="not Linux"))


def test_a_platform_without_fork_is_portable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork")
    assert Host.this().fork is False
    assert decide("auto").name == "portable"
    assert namespaces.user_namespaces() == "this system has no unshare"


def test_a_c_library_without_unshare_or_prctl_is_handled(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS's libc has neither: no namespaces, and the parent is watched by a thread instead."""
    monkeypatch.setattr(libc, "LIBC", None)
    assert not libc.has("prctl")
    assert namespaces.user_namespaces() == "this system has no unshare"
    watchers: list[int] = []
    monkeypatch.setattr(parent, "_watch_parent", watchers.append)
    parent.die_with_parent(os.getppid(), 9)
    assert watchers == [os.getppid()]


def test_without_proc_no_user_namespace_is_assumed(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = open

    def no_proc(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith("/proc"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    assert namespaces.in_user_namespace() is False


def test_the_parent_watch_ends_a_process_whose_parent_died(tmp_path: Path) -> None:
    """Where there is no PDEATHSIG, a child whose parent exits must exit too (the POSIX branch of
    ``_watch_parent``; Windows' handle wait runs only on the hosted runner).  The parent exits only once
    the child has armed its watch on it, and the child lets go of the output pipe and then sleeps far
    longer than it is given to die: only the watch can end it in time."""
    script = (
        "import os, sys, time\n"
        "from grader.sandbox import libc, parent\n"
        "libc.LIBC = None\n"
        "me = os.getpid()\n"
        "armed, arm = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid:\n"
        "    os.close(arm)\n"
        "    assert os.read(armed, 1) == b'x'\n"
        "    print(pid, flush=True); os._exit(0)\n"
        "parent.die_with_parent(me, 9)\n"
        "null = os.open(os.devnull, os.O_WRONLY)\n"
        "os.dup2(null, 1); os.dup2(null, 2)\n"
        "os.write(arm, b'x')\n"
        "time.sleep(600)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    child = int(done.stdout.split()[0])
    for _ in range(100):
        if not _running(child):
            return
        subprocess.run(["sleep", "0.05"], check=True)
    os.kill(child, 9)
    pytest.fail("the orphan kept running")


def _running(pid: int) -> bool:
    """Alive and not a zombie: where an earlier test made this process a subreaper, the orphan is
    re-parented to it and, once exited, stays a zombie until reaped here."""
    try:
        os.waitpid(pid, os.WNOHANG)  # ours only where we are its subreaper
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(("system", "method"), [("linux", "zygote"), ("darwin", "spawn"), ("win32", "spawn")])
def test_workers_fork_from_the_sessions_zygote_only_on_linux(system: str, method: str) -> None:
    """Windows has no fork, and macOS's system frameworks are not safe to fork after they load."""
    assert start_method(system) == method


@pytest.mark.parametrize("method", ["spawn", "zygote"])
def test_portable_layers_name_every_layer_the_full_sandbox_reports_and_say_advisory(method: str) -> None:
    layers = Isolation("portable", "no os.fork on this platform").layers(method)
    assert f"({method})" in layers["zygote"] and "scrubbed environment" in layers["zygote"]
    assert set(layers) | {"audit_hooks"} == FULL_LAYERS | {"mode"}  # audit hooks: the ranks report them
    off = {name for name, state in layers.items() if state.startswith("off: ")}
    assert off == set(layers) - {"zygote"}
    assert "the instructor's run is the grade of record" in layers["mode"]
    assert "ranks' own records" in layers["measured_traffic"]


def test_rootless_a_capture_that_lost_packets_is_no_measurement_but_as_root_it_stays_lost() -> None:
    """Rootless, the capture's buffer is capped (net.core.rmem_max): on a loaded machine a case moving
    12 MB can overflow it (the fidelity corpus once gave a ``wrong`` case ``tampering`` rootless)."""
    from grader.runtimes.torchdist.traffic import Traffic

    lost, whole = Traffic(lost="the capture dropped 12 packets"), Traffic()
    assert Isolation("rootless", "an unprivileged user namespace").measured(lost) is None  # the ranks' records count
    assert Isolation("full", "root").measured(lost) is lost  # verdicts.tampering fails the case
    assert Isolation("rootless", "an unprivileged user namespace").measured(whole) is whole
    assert Isolation("rootless", "an unprivileged user namespace").measured(None) is None


def test_a_spawned_rank_gets_no_grader_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADER_MATRIX_CONFIG", "/secret/matrix-config.json")
    monkeypatch.setenv("GRADER_INPUT_SALT", "the salt")
    with portable._scrubbed_environment():
        seen = dict(os.environ)
    assert "GRADER_MATRIX_CONFIG" not in seen and "GRADER_INPUT_SALT" not in seen
    assert seen.get("GLOO_SOCKET_IFNAME") == "lo"
    assert os.environ["GRADER_INPUT_SALT"] == "the salt"  # the session's own environment is back


def test_windows_ranks_use_the_libuv_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    with portable._scrubbed_environment():
        seen = dict(os.environ)
    assert seen.get("USE_LIBUV") == "1" and "GLOO_SOCKET_IFNAME" not in seen


def test_the_grader_imports_where_fcntl_and_resource_do_not_exist() -> None:
    """Windows has neither module, nor os.fork or os.sysconf: every module a student's grading
    imports must still import (the Linux-only calls are made only in the Linux runtime)."""
    script = (
        "import os, sys\n"
        "sys.modules['fcntl'] = None; sys.modules['resource'] = None\n"
        "del os.fork, os.sysconf\n"
        "import grader.cli, grader.pipeline, grader.runner, grader.matrix.plugin, grader.matrix.verdicts\n"
        "import grader.runtimes.torchdist.mode, grader.runtimes.torchdist.portable\n"
        "import grader.runtimes.torchdist.portable_group\n"
        "import grader.runtimes.torchdist.rank, grader.selection\n"
        "import grader.sandbox.isolation as iso\n"
        "assert iso.resource is None\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-3000:]


def test_intake_without_descriptor_walks_still_refuses_every_link(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Windows has no dir_fd, O_NOFOLLOW or O_DIRECTORY: the path-checked intake refuses links alike."""
    from tests.test_intake import grab, write_tree

    monkeypatch.setattr(os, "supports_dir_fd", set())
    monkeypatch.setattr(os, "supports_follow_symlinks", set())
    secret = write_tree(tmp_path / "reference", {"collectives.py": b"SECRET", "transformer.py": b"SECRET"})
    sub = write_tree(tmp_path / "sub", {"written_answers_task1.md": b"answers", "src/collectives.py": b"X = 1\n"})
    (sub / "src" / "transformer.py").symlink_to(secret / "transformer.py")
    (sub / "all_to_all_schematic.png").symlink_to(secret / "collectives.py")
    intake = grab(sub, tmp_path / "sandbox")
    assert (intake.sandbox / "src" / "collectives.py").read_text() == "X = 1\n"
    assert "SECRET" not in "".join(p.read_text() for p in intake.sandbox.rglob("*") if p.is_file())
    assert "src/transformer.py is a symlink: refused" in intake.problems
    assert "all_to_all_schematic.png is a symlink: refused" in intake.problems


def test_spawned_the_pool_starts_as_many_workers_as_the_largest_group_that_will_run_has_ranks() -> None:
    pack = load_pack("a9")
    cases, handoffs = list(pack.cases()), set(pack.handoffs)
    assert pool_capacity(cases, set(), handoffs, forked=False) == 8
    skip = {c.name for c in cases if c.world_size != 2}  # e.g. a student's `grader grade . -k ws2`
    assert pool_capacity(cases, skip, handoffs, forked=False) == 2
    assert pool_capacity(cases, {c.name for c in cases}, handoffs, forked=False) == 1  # nothing to run: one, never zero


def test_forked_every_group_that_will_run_keeps_its_own_workers_as_in_the_full_sandbox() -> None:
    pack = load_pack("a9")
    cases, handoffs = list(pack.cases()), set(pack.handoffs)
    # world sizes 1, 2, 3, 4, 5 and 8, and the tensor-parallel forward's fresh ranks at 1, 2, 3, 4 and 8
    assert pool_capacity(cases, set(), handoffs, forked=True) == (1 + 2 + 3 + 4 + 5 + 8) + (1 + 2 + 3 + 4 + 8)
    skip = {c.name for c in cases if c.world_size != 2}
    assert pool_capacity(cases, skip, handoffs, forked=True) == 2 + 2
    assert pool_capacity(cases, {c.name for c in cases}, handoffs, forked=True) == 1


@pytest.mark.slow
def test_spawned_workers_as_on_macos_and_windows_join_a_group_run_a_case_and_serve_the_next(tmp_path: Path) -> None:
    """The spawn branch, which only macOS and Windows take, run here on Linux: the pool starts its
    workers at once, a group of them runs the runtime's own allreduce, and a group that ended clean
    gives them back for the next instead of spawning more; closed, it leaves no worker, not the
    resource tracker that spawning started, and no directory of ``multiprocessing``'s (pymp-*)."""
    import multiprocessing

    import torch

    from grader.limits import Limits
    from grader.runtimes.torchdist.portable_group import PortableGroup
    from grader.runtimes.torchdist.session import student_config

    pack = load_pack("a9")
    sandbox = tmp_path / "sandbox"
    shutil.copytree(REPO / "reference" / "a9", sandbox)
    helpers = _multiprocessing_helpers()
    config = multiprocessing.process.current_process()._config  # type: ignore[attr-defined]
    tempdir = config.get("tempdir")
    pool = portable.WorkerPool(2, sandbox, pack.rank_side, student_config(pack, {}))
    assert pool.method == "spawn"
    workers = list(pool.idle)
    try:
        assert len(workers) == 2
        for _ in range(2):
            with PortableGroup(2, Limits(), pool) as group:
                run = group.run_case({"op": "calibrate"}, [{"x": torch.ones(8)}] * 2, 60.0)
                assert [rep.status for rep in run.ranks] == ["ok", "ok"], run.output
            assert pool.spawned == 2 and sorted(map(id, pool.idle)) == sorted(map(id, workers))
    finally:
        pool.close()
    assert not any(w.process.is_alive() for w in workers)
    assert _multiprocessing_helpers() - helpers == set()
    assert config.get("tempdir") in (tempdir, None) or not Path(config["tempdir"]).exists()


@pytest.mark.slow
def test_as_on_macos_and_windows_a_watch_loops_spare_host_spawns_its_workers_ahead_and_is_told_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 41 where nothing forks, run here on Linux: a spare session host (``keep_spare``, as under
    ``grade --watch``) starts once a grading has ended and spawns the pack's largest group of workers
    while the student reads the result, and the re-grade's pool takes them, told its sandbox only then.
    Until then neither the spare nor its workers hold anything of a grading: not the salt, not the
    submission.  Every grade is the one a cold grading gives, and nothing outlives the loop."""
    from grader import runner
    from grader.matrix import host as hosts
    from grader.salt import SALT_ENV
    from tests.processes import descendants
    from tests.test_spare_host import RUBRIC, TOY
    from tests.test_zygote import _memory_holds

    tree = tmp_path / "submission"
    shutil.copytree(TOY / "submission", tree)
    monkeypatch.setattr("grader.runtimes.torchdist.mode.start_method", lambda system=sys.platform: "spawn")
    beside: list[object] = []  # the spare while each matrix ran: none, it would slow that grading down
    matrix = runner.run_matrix

    def watched(*args: Any, **kwargs: Any) -> Any:
        beside.append(hosts._SPARE.spare())
        return matrix(*args, **kwargs)

    monkeypatch.setattr(runner, "run_matrix", watched)
    secret, marker = f"salt-{os.urandom(8).hex()}", f"submission-{os.urandom(8).hex()}"
    monkeypatch.setenv(SALT_ENV, secret)
    with (tree / "ops.py").open("a") as f:
        f.write(f"\nMARKER = {marker!r}\n")
    cold = grade(tree, RUBRIC, isolation="portable")
    with hosts.keep_spare(False), hosts.keep_spare(one_pack=True):
        first = grade(tree, RUBRIC, isolation="portable")
        spare = hosts._SPARE.spare()
        assert spare is not None and spare.told is not None and spare.told.ahead == 2  # the toy's largest group
        deadline = time.monotonic() + 120
        while len(descendants(spare.proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # its workers spawned (multiprocessing's resource tracker is a third child)
        waiting = descendants(spare.proc.pid) | {spare.proc.pid}
        assert len(waiting) >= 3
        for pid in waiting:
            assert not _memory_holds(pid, secret.encode()) and not _memory_holds(pid, marker.encode())
        again = grade(tree, RUBRIC, isolation="portable")
        below = descendants(os.getpid())
    assert "2 of them started by its host before the grading was sent to it" in again.isolation["zygote"]
    assert beside == [None, None, None]  # it starts once a grading has ended (host.after_grading)
    for result in (first, again):
        assert [(c.id, c.verdict, c.message) for c in result.cases] == [
            (c.id, c.verdict, c.message) for c in cold.cases
        ]
        assert result.score == cold.score == 10
    deadline = time.monotonic() + 10
    while (below & descendants(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not below & descendants(os.getpid())


@pytest.mark.slow
def test_on_linux_the_zygote_of_a_hosted_session_forks_its_workers_and_nothing_outlives_the_pool(
    tmp_path: Path,
) -> None:
    """Where the session's host forked a zygote, it forks the workers: each under a waiter of its own
    that reports the worker's pid and exit status.  A group that ended clean gives its workers back; a
    worker killed is seen ended, with its signal; closing the pool ends the zygote, every waiter and
    every worker."""
    import signal

    import torch

    from grader.limits import Limits
    from grader.runtimes.torchdist.portable_group import PortableGroup
    from grader.runtimes.torchdist.session import Zygote, student_config

    pack = load_pack("a9")
    sandbox = tmp_path / "sandbox"
    shutil.copytree(REPO / "reference" / "a9", sandbox)
    zygote = Zygote.start(pack.rank_side)  # a grading's is its host's; this one is a process of its own
    pool = portable.WorkerPool(3, sandbox, pack.rank_side, student_config(pack, {}), zygote)
    assert pool.method == "zygote" and pool.idle == []  # forked when a group needs them, not ahead

    def parent(pid: int) -> int:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(status.split("PPid:")[1].split()[0])

    try:
        for _ in range(2):
            with PortableGroup(2, Limits(), pool) as group:
                run = group.run_case({"op": "calibrate"}, [{"x": torch.ones(8)}] * 2, 60.0)
                assert [rep.status for rep in run.ranks] == ["ok", "ok"], run.output
                workers = list(group.ranks)
            assert pool.spawned == 2  # the second group took the first one's workers
        waiters = [parent(w.process.pid) for w in workers]
        assert {parent(waiter) for waiter in waiters} == {zygote.pid}
        victim = workers[0].process
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10.0)
        assert victim.exitcode == -signal.SIGKILL
        with PortableGroup(2, Limits(), pool) as group:  # the dead worker is replaced, not reused
            assert victim not in [w.process for w in group.ranks] and pool.spawned == 3
    finally:
        pool.close()

    def alive(pid: int) -> bool:  # a zombie is an ended process its new parent has not reaped yet
        try:
            return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False

    ended = [zygote.pid, *waiters, *(w.process.pid for w in workers)]
    deadline = time.monotonic() + 10.0
    while any(map(alive, ended)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in ended if alive(pid)] == []


def _multiprocessing_helpers() -> set[int]:
    """Pids of ``multiprocessing``'s fork servers and resource trackers on this machine (but another
    test worker's: its Dask cluster has its own)."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing.forkserver import main" in cmdline or b"multiprocessing.resource_tracker" in cmdline:
            found.add(int(proc.name))
    return found - other_test_processes()


@pytest.mark.slow
def test_a_portable_grading_leaves_no_process_behind(tmp_path: Path) -> None:
    """Not even one of ``multiprocessing``'s helpers (a fork server, a resource tracker), which would
    otherwise outlive the session."""
    before = _multiprocessing_helpers()
    results = _verdicts(tmp_path, REPO / "reference" / "a9", ["test_allreduce[ws2-float32-4x5]"])
    assert results["test_allreduce[ws2-float32-4x5]"][0] == "pass"
    assert _multiprocessing_helpers() - before == set()


# --------------------------------------------------------------------------- hangs without /proc


def _sandbox(tmp_path: Path, old: str, new: str) -> Path:
    box = tmp_path / "sandbox"
    shutil.copytree(REPO / "reference" / "a9", box, ignore=shutil.ignore_patterns(".*"))
    text = (box / "src" / "collectives.py").read_text()
    assert text.count(old) == 1, old
    (box / "src" / "collectives.py").write_text(text.replace(old, new))
    return box


def _verdicts(
    tmp_path: Path, box: Path, only: list[str], limits: dict[str, float] | None = None
) -> dict[str, tuple[str, str]]:
    iso = {"sandbox": str(box), "memory_mb": 2048, "nproc": 64, "cpu_s": 60, "file_size_mb": 64}
    run = run_matrix(
        box,
        FILES,
        tmp_path / "work",
        limits or {},
        POLICY,
        salt="t",
        pack="a9",
        isolation_config=iso,
        only=only,
        isolation="portable",
    )
    layers = json.loads((tmp_path / "work" / "isolation.json").read_text())
    assert layers["mode"].startswith("off: portable")
    assert layers["zygote"].endswith("(zygote), with a scrubbed environment")  # Linux: the session's host forked one
    return {name: (case.verdict.value, case.message) for name, case in read_junit(run.junit).items()}


@pytest.mark.slow
def test_portable_hangs_are_named_by_the_ranks_watchdog_and_a_silent_rank_is_a_hang_without_a_line(
    tmp_path: Path,
) -> None:
    # ws2 broadcast: rank 0 sleeps, rank 1 (the source) blocks sending to it.  ws3 allgather: every
    # rank stops itself (SIGSTOP): no watchdog can answer, so the hang has no line and no CPU figure.
    sleeps = body_start("my_broadcast", "    if dist.get_rank() == 0:\n        __import__('time').sleep(3600)\n")
    box = _sandbox(tmp_path, *sleeps)
    stop = body_start("my_allgather", "    if dist.get_world_size() == 3:\n        os.kill(os.getpid(), 19)\n")
    text = (box / "src" / "collectives.py").read_text().replace(*stop)
    (box / "src" / "collectives.py").write_text("import os\n" + text)
    only = ["test_broadcast[ws2-src1-float32-4x5]", "test_allgather[ws3-float32-4x5]"]
    only.append("test_allreduce[ws2-float32-4x5]")
    results = _verdicts(tmp_path, box, only)
    verdict, message = results[only[0]]
    assert verdict == "hang" and message.startswith("timed out after "), message
    idle = r"rank 0 is idle \(\d% CPU\), in no send or receive .* at collectives\.py:\d+ in my_broadcast"
    blocked = r"rank 1 waits in send\(dst=0\) at collectives\.py:\d+ in my_broadcast \(blocked, \d+% CPU\)"
    assert re.search(idle, message) and re.search(blocked, message), message
    verdict, message = results[only[1]]
    assert verdict == "hang" and "rank 0 is still running" in message and "% CPU" not in message, message
    assert results[only[2]][0] == "pass"  # the group that hung was replaced; the next case runs clean


@pytest.mark.slow
def test_portable_finds_a_deadlock_by_the_ranks_own_account(tmp_path: Path) -> None:
    both_receive = body_start(
        "my_allreduce",
        "    if dist.get_world_size() == 2:\n        dist.recv(torch.empty_like(tensor), src=1 - dist.get_rank())\n",
    )
    # a budget well past the deadlock window, so a loaded machine cannot end the case as a timeout first
    # (the fitted budget of a small case is about 1 s; in CI it once ran out before the window closed)
    limits = {"case_timeout_floor_s": 8.0}
    results = _verdicts(tmp_path, _sandbox(tmp_path, *both_receive), ["test_allreduce[ws2-float32-4x5]"], limits)
    verdict, message = results["test_allreduce[ws2-float32-4x5]"]
    assert verdict == "hang" and message.startswith("likely deadlock"), message
    assert re.search(r"rank 0 waits in recv\(src=1\) at collectives\.py:\d+ in my_allreduce", message)


# --------------------------------------------------------------------------- the same verdicts

A9_TREES = [("reference/a9", 105), ("student_template/a9", 0)]  # the naive reference: case by case below


@pytest.mark.slow
@pytest.mark.parametrize(("tree", "total"), A9_TREES)
def test_portable_grades_honest_a9_trees_as_the_full_sandbox_does(tree: str, total: float) -> None:
    result = grade(REPO / tree, isolation="portable")
    assert result.score == total
    assert result.isolation["mode"].startswith("off: portable runtime (--isolation portable)")
    assert "the instructor's run is the grade of record" in result.isolation["mode"]


@pytest.mark.slow
def test_portable_and_full_agree_case_by_case_on_the_naive_reference() -> None:
    """Every case's verdict and every item's score, not only the total."""
    results = {
        isolation: grade(REPO / "reference" / "a9-naive", isolation=isolation) for isolation in ("auto", "portable")
    }
    assert results["portable"].score == 100
    full, portable_run = (fidelity.Record.of(results[isolation]) for isolation in ("auto", "portable"))
    assert full.differences(portable_run) == {}, "(full, portable)"


@pytest.mark.slow
def test_portable_grades_the_a4_reference_zip_as_the_full_sandbox_does(tmp_path: Path) -> None:
    from grader.pack import load_pack
    from tests.test_a4_pack import hand_in

    handin = hand_in(REPO / "reference" / "a4", tmp_path / "handin")

    result = grade(handin, load_pack("a4").rubric, isolation="portable")
    assert result.score == 100


@pytest.mark.slow
@pytest.mark.parametrize("name", fidelity.entries("a9", "a4"))
def test_portable_gives_every_fidelity_entry_the_full_sandboxs_verdicts(
    name: str, tmp_path: Path, full_grades: fidelity.FullGrades
) -> None:
    """Every case's verdict and every item's score of each A9 and A4 entry, as the full sandbox gives
    them (its grading is the one ``test_fidelity_corpus`` checked, when it ran in this session)."""
    full = fidelity.Record.of(full_grades.get(name, tmp_path))
    portable_result = fidelity.grade_entry(name, tmp_path / "portable", isolation="portable")
    assert portable_result.isolation["mode"].startswith("off: portable runtime")
    assert full.differences(fidelity.Record.of(portable_result)) == {}, "(full, portable)"
