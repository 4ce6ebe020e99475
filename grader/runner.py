"""Stage 3: run the hidden matrix as a pytest session in a child process and collect its JUnit XML.

The session runs from an empty directory with an empty ini file, plugin autoloading off and
``importlib`` import mode, so nothing of the submission (a ``conftest.py``, a ``pytest.ini``,
a fake ``torch/``) is on ``sys.path`` or in pytest's config search.  If a hostile submission
kills the session anyway, the case it was running is recorded as a crash and a new session
picks up the remaining cases; the rounds' JUnit files are merged into one.  A session that ends
before any case handed the submission's code to its ranks (the ledger says so, not the ranks) is
the grader's own failure: :class:`SessionFailed`, never a verdict charged to the submission; so
is a session whose host died with the host server that forked it, or that stopped deciding cases
for longer than any of its own waits can last (a hung host), and every case runs again
(:class:`HostLost`, :class:`HostStalled`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from junitparser import Failure, JUnitXml, Properties, Property, TestCase, TestSuite

from grader import runtimes
from grader.errors import GraderError
from grader.limits import Limits
from grader.matrix import timeline
from grader.matrix.host import Host, HostProcess, Preface
from grader.matrix.plugin import CONFIG_ENV, PARENT_ENV, STARTED, MatrixConfig
from grader.pack import AssignmentPack, load_pack
from grader.results import Verdict
from grader.runtimes.torchdist import mode
from grader.runtimes.torchdist.zygote import NUMERICS_ENV
from grader.salt import SALT_ENV
from grader.sandbox import cgroups, shares

MAX_ROUNDS = 4
#: pytest's plugins the session has no use for: each costs time on every one of hundreds of cases
#: (``capture``: no case prints, and its files per test cost 0.15 ms a case; the session's log has the rest)
UNUSED_PLUGINS = (
    "capture",
    "logging",
    "warnings",
    "stepwise",
    "legacypath",
    "pastebin",
    "setuponly",
    "setupplan",
    "recwarn",
)
NOT_SELECTED = "not selected for this run (grader grade -k): the score is partial"
STOP_GRACE_S = 10.0


class SessionFailed(GraderError):
    """The matrix session ended before the submission's code ran in any case: the grader failed."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log  # the tail of the session's output, for the operator (not for results.json)


class HostLost(SessionFailed):
    """A session ended because its host died with the host server that forked it (``Host.lost``): it
    says nothing of the submission.  :func:`run_matrix` starts every case again, and lets this (a
    :class:`SessionFailed`: the grader's failure) through only at the :data:`HOST_ATTEMPTS`-th."""


class HostStalled(HostLost):
    """A session wrote no ledger line for longer than :func:`stall_after_s`: every wait a session makes
    between two lines (a group's start, a case's run) ends at its own limit, so a silence longer than all
    of them together is the host's hang, not the submission's.  The session is killed and every case
    runs again, as for a lost host; at the last attempt this is the grader's failure (a
    :class:`SessionFailed`), never cases charged as ``not_run``."""


#: Starts of every case in one grading: each host lost with its server (HostLost) or hung costs one
HOST_ATTEMPTS = 2
#: How often a waiting runner looks at the ledger's size (the stall watch costs one stat a poll)
STALL_POLL_S = 1.0


def stall_after_s(limits: dict[str, Any]) -> float:
    """The longest a session may go without a ledger line: twice everything it may wait on between two
    lines (a group's start, then the import probe, the calibration and a case of two steps, each at most
    ``case_timeout_s``), and the time a spawned worker may still spend importing torch (``SPAWN_S``).
    300 s with the default limits: a loaded machine slows a session down, never by this much."""
    from grader.runtimes.torchdist.portable import SPAWN_S

    given = Limits(**limits)  # the session's own reading of them (MatrixConfig.limits)
    return 2 * (given.start_timeout_s + 4 * given.case_timeout_s) + SPAWN_S


@dataclass(frozen=True)
class MatrixRun:
    junit: Path
    seconds: float
    rounds: int
    isolation: dict[str, str]
    log: str  # the tail of the session's own output, for grader errors
    phases: dict[str, float] = field(default_factory=dict)  # ``matrix.*`` seconds, summed over rounds


def run_matrix(
    sandbox: Path,
    present: list[str],
    workdir: Path,
    limits: dict[str, Any],
    policy: dict[str, list[str]],
    salt: str,
    *,
    pack: str,
    isolation_config: dict[str, Any] | None = None,
    layers: dict[str, str] | None = None,
    total_timeout_s: float = 600.0,
    only: list[str] | None = None,
    isolation: str = "auto",
    partial: bool = False,
    host: Host | None = None,
) -> MatrixRun:
    """Run every case of ``pack`` (or the ``only`` ones) and return the merged JUnit file in ``workdir``;
    ``partial`` (``grader grade -k``): the cases left out are in it too, as ``not_run``.
    ``policy`` is the rubric's ``policy.allow`` (``Policy.to_dict``).  ``host``: the first session's
    host, started early by the caller (``Host.take``); each session closes its host when it ends (the
    caller's close is then a no-op, and ends a host the matrix never used), a later round starts its own.

    A session whose host died with its host server (:class:`HostLost`) decided nothing, and the cases
    its round had decided are lost with it: every case is run again from the start, by a session whose
    host a new server forks or that starts cold, and the total time limit counts from there.  The same
    salt draws the same cases, so the result is the one an undisturbed grading gives."""
    assignment = load_pack(pack)
    runtimes.require(assignment.runtime, assignment.id)
    workdir.mkdir(parents=True, exist_ok=True)
    with _grading_group() as (grading, grading_layer):
        ledger = workdir / "ledger.jsonl"
        start = _Start(ledger)
        everything = _case_names(assignment, only)
        preface = Preface(assignment.rank_side, _ahead(assignment, isolation))
        round_no = 0
        while round_no < MAX_ROUNDS:
            round_no += 1
            session_host = host if round_no == 1 and host is not None else Host.take()
            junit = workdir / f"junit-round{round_no}.xml"
            config = MatrixConfig(
                pack=pack,
                pack_path=list(assignment.search_path),
                sandbox=str(sandbox),
                present=present,
                limits=limits,
                policy=policy,
                ledger=str(ledger),
                isolation_report=str(workdir / "isolation.json"),
                salt=salt,
                skip=start.decided + [name for name in _case_names(assignment, None) if name not in everything],
                isolation_config=isolation_config or {},
                layers={**(layers or {}), "grading_cgroup": grading_layer},
                isolation=isolation,
                timeline=str(workdir / f"timeline-round{round_no}.json"),
                launched=time.monotonic(),
            )
            remaining = total_timeout_s - (time.monotonic() - start.began)
            try:
                code, start.log = _session(
                    config, assignment, preface, workdir, junit, remaining, session_host, stall_after_s(limits), grading
                )
            except HostLost as exc:
                if start.number == HOST_ATTEMPTS:
                    raise
                sys.stderr.write(f"grader: {exc}: every case is graded again from the start\n")
                start, host, round_no = _Start(ledger, start.number + 1), None, 0
                continue
            for stage, seconds in timeline.read(Path(config.timeline), time.monotonic(), config.launched).items():
                start.phases[stage] = start.phases.get(stage, 0.0) + seconds
            if junit.exists():
                start.rounds.append(junit)
            if code in (0, 1) and junit.exists():
                break
            done = [line["case"] for line in _ledger(ledger)]
            todo = [name for name in everything if name not in done and name not in start.decided]
            if not todo:
                break
            reason = "the grading session was killed" if code < 0 or code > 1 else "the grading session stopped"
            timed_out = time.monotonic() - start.began >= total_timeout_s  # stopped for it, or a next has no time
            if not _student_code_started(ledger):
                when = " at the total time limit" if timed_out else ""
                message = f"{reason}{when} before any case ran the submission's code (exit status {code})"
                raise SessionFailed(message, start.log[-4000:])
            if timed_out:
                out_of_time = "the submission used up the total time limit before this case"
                start.synthetic += [(name, out_of_time, Verdict.NOT_RUN) for name in todo]
                break
            message = f"{reason} while this case ran (exit status {code}); a rank may have killed it"
            start.synthetic.append((todo[0], message, Verdict.CRASH))
            with ledger.open("a") as f:  # the next round's session reads every verdict decided so far here
                f.write(json.dumps({"case": todo[0], "verdict": Verdict.CRASH.value}) + "\n")
            start.decided = done + [name for name, _, _ in start.synthetic]
        merged = workdir / "junit.xml"
        unselected = [name for name in _case_names(assignment, None) if name not in everything] if partial else []
        synthetic = start.synthetic + [(name, NOT_SELECTED, Verdict.NOT_RUN) for name in unselected]
        _merge(start.rounds, synthetic, everything + unselected, merged, assignment)
        report = workdir / "isolation.json"
        layers = json.loads(report.read_text()) if report.exists() else {}
        seconds = time.monotonic() - start.began
        return MatrixRun(merged, seconds, len(start.rounds), layers, start.log[-4000:], start.phases)


@contextlib.contextmanager
def _grading_group() -> Iterator[tuple[cgroups.GradingCgroup | None, str]]:
    """This grading's group (``cgroups.GradingCgroup``), with its line in the isolation map: one CPU
    share weighted as every other grading's, and its part of the machine's memory where a batch runs
    ``--jobs`` gradings side by side; None, and the reason, where no cgroup can be made."""
    made = cgroups.GradingCgroup.make(shares.grading_memory_mb())
    if isinstance(made, str):
        yield None, made
        return
    try:
        yield made, made.layer()
    finally:
        made.close()


class _Start:
    """What one start of every case (:func:`run_matrix`) has gathered: a new one begins with an empty ledger."""

    def __init__(self, ledger: Path, number: int = 1) -> None:
        ledger.write_text("")
        self.number = number  # 2 after one lost host (HOST_ATTEMPTS)
        self.began = time.monotonic()
        self.decided: list[str] = []
        self.synthetic: list[tuple[str, str, Verdict]] = []  # cases no session decided: (case, message, verdict)
        self.rounds: list[Path] = []  # the JUnit file of each round that wrote one
        self.phases: dict[str, float] = {}
        self.log = ""


def _case_names(pack: AssignmentPack, only: list[str] | None) -> list[str]:
    names = pack.case_ids()
    return [n for n in names if n in set(only)] if only else names


def _ahead(pack: AssignmentPack, isolation: str) -> int:
    """Workers a session host spawns before its grading (``Preface.ahead``): the pack's largest group,
    where the portable runtime's workers are spawned (macOS, Windows); none where they are forked."""
    if not mode.decide(isolation).portable or mode.start_method() != "spawn":
        return 0
    from grader.runtimes.torchdist.portable import pool_capacity

    return pool_capacity(pack.cases(), (), pack.handoffs, forked=False)


def _session(
    config: MatrixConfig,
    pack: AssignmentPack,
    preface: Preface,
    workdir: Path,
    junit: Path,
    timeout_s: float,
    host: Host,
    stall_s: float,
    grading: cgroups.GradingCgroup | None = None,
) -> tuple[int, str]:
    """Run one session in ``host`` and return its exit status and the tail of its output.  The host
    forks the zygote first (wherever the Linux sandbox is built, and for the portable runtime on
    Linux), or spawns workers (the portable runtime on macOS and Windows).  A session whose ledger
    stays still for ``stall_s`` is ended (:class:`HostStalled`).  The host and its zygote join the
    ``grading`` group before the host becomes the session, whose own groups nest in it."""
    home = workdir / "session"
    home.mkdir(exist_ok=True)
    ini = home / "pytest.ini"
    ini.write_text("[pytest]\n")
    cfg = workdir / "matrix-config.json"
    cfg.write_text(json.dumps(asdict(config)))
    args = [
        str(pack.test_file),
        "-c",
        str(ini),
        "--rootdir",
        str(home),
        "--confcutdir",
        str(pack.test_file.parent),
        "--import-mode=importlib",
        "-p",
        "no:cacheprovider",
        *(arg for plugin in UNUSED_PLUGINS for arg in ("-p", f"no:{plugin}")),
        "-p",
        "grader.matrix.plugin",
        "-o",
        "junit_family=xunit1",
        "-o",
        "junit_logging=no",
        f"--junitxml={junit}",
        "-q",
        "--no-header",
        "-rN",
        "--tb=no",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON")) and k != SALT_ENV},
        CONFIG_ENV: str(cfg),
        PARENT_ENV: str(os.getpid()),  # a host forked by a host server has that server for parent instead
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONSAFEPATH": "1",
        # bytecode is written as Python always does: forbidding it made every session of an editable
        # install compile the grader from source again (0.3-0.6 s a grading; issue 23)
        **NUMERICS_ENV,  # the expected values' numbers are computed as the ranks' are
    }
    proc: HostProcess
    with contextlib.ExitStack() as stack:
        host = host.for_pack(preface)
        stack.callback(host.close)
        host.preload(preface)
        if grading is not None:
            grading.join(host.proc.pid)
            env[cgroups.GRADING_ENV] = grading.name
        proc, log = host.begin(args, {**env, PARENT_ENV: str(host.parent)}, str(home)), host.log
        try:
            code = _wait(proc, max(timeout_s, 1.0), Path(config.ledger), stall_s)
        except subprocess.TimeoutExpired:
            code = _stop(proc)
        except _Stalled:
            code = _stop(proc)
            raise HostStalled(
                f"the session decided no case for {stall_s:g} s, longer than all its waits (exit status {code})",
                _tail(log, 4000),
            ) from None
        except BaseException:  # SIGTERM or Ctrl-C of the grader: the session ends first
            _stop(proc)
            raise
        if code not in (0, 1) and host.lost():
            raise HostLost(
                f"the host server that forked the session's host died (exit status {code})", _tail(log, 4000)
            )
        return code, _tail(log, 20000)


class _Stalled(Exception):
    """The ledger stayed still for the stall limit (:func:`_wait`)."""


def _wait(proc: HostProcess, timeout_s: float, ledger: Path, stall_s: float) -> int:
    """``proc.wait(timeout_s)``, woken by the session's exit itself where Linux gives a pidfd, and
    looking at the ledger every :data:`STALL_POLL_S`: :class:`_Stalled` once it has not grown for
    ``stall_s``.

    Popen's own wait with a timeout sleeps in steps that grow to 50 ms, so the grading saw its
    session end 25 ms late on average (issue 23).  Elsewhere (macOS, Windows) it is Popen's wait.
    """
    deadline = time.monotonic() + timeout_s
    size, still_since = -1, time.monotonic()
    try:
        fd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        fd = None
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
            grown = ledger.stat().st_size  # _Start made it
            if grown != size:
                size, still_since = grown, now
            elif now - still_since >= stall_s:
                raise _Stalled
            step = min(STALL_POLL_S, deadline - now, still_since + stall_s - now)
            if fd is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return proc.wait(timeout=step)
                continue
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if poller.poll(step * 1000):
                return proc.wait(timeout=timeout_s)
    finally:
        if fd is not None:
            os.close(fd)


def _tail(log: IO[bytes], size: int) -> str:
    log.seek(0, os.SEEK_END)
    log.seek(max(0, log.tell() - size))
    return log.read().decode(errors="replace")


def _stop(proc: HostProcess) -> int:
    """End the session: SIGTERM lets it close its groups (namespaces, cgroups, files), then SIGKILL.
    Whatever it leaves dies with it: the zygote and every group's leader have it as PDEATHSIG.  SIGCONT
    follows SIGTERM: a stopped session (a hung host, ``HostStalled``) handles it only once it runs."""
    if not hasattr(os, "killpg"):  # Windows: no process group; the session's ranks watch it and exit
        proc.kill()
        return proc.wait()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
            os.killpg(proc.pid, signal.SIGCONT)
        try:
            return proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def _ledger(path: Path) -> list[dict[str, Any]]:
    entries = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("case"), str):
            entries.append(entry)
    return entries


def _student_code_started(ledger: Path) -> bool:
    """Whether any case, in any round, handed the submission's code to its ranks (the session writes
    ``STARTED`` first; a line the runner wrote for a crash follows one)."""
    for line in ledger.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and STARTED in entry:
                return True
    return False


def _merge(
    rounds: list[Path],
    synthetic: list[tuple[str, str, Verdict]],
    everything: list[str],
    out: Path,
    pack: AssignmentPack,
) -> None:
    """One JUnit file with each case once: real results first, then synthesized crashes.  Cases are
    appended and counted once at the end (``add_testcase`` recounts the whole suite on every call)."""
    suite = TestSuite("grader.matrix")
    wanted = set(everything)
    seen: set[str] = set()
    for path in rounds:
        for case in _cases(JUnitXml.fromfile(str(path))):
            if case.name in wanted and case.name not in seen:
                seen.add(case.name)
                suite.append(case)
    for name, message, verdict in synthetic:
        if name not in seen:
            seen.add(name)
            suite.append(synthesized_case(name, verdict, message, pack))
    for name in everything:
        if name not in seen:
            message = "not run: the grading session ended early"
            suite.append(synthesized_case(name, Verdict.ERROR, message, pack))
    suite.update_statistics()
    xml = JUnitXml()
    xml.add_testsuite(suite)
    tmp = out.with_suffix(".tmp")
    xml.write(str(tmp))
    tmp.replace(out)


def _cases(xml: Any) -> list[TestCase]:
    suites = [xml] if isinstance(xml, TestSuite) else list(xml)
    return [case for suite in suites for case in suite]


def synthesized_case(name: str, verdict: Verdict, message: str, pack: AssignmentPack) -> TestCase:
    case = TestCase(name, classname=pack.test_file.stem)
    case.result = [Failure(message)]
    props = Properties()
    props.add_property(Property("verdict", verdict.value))
    props.add_property(Property("message", message))
    case.append(props)
    return case
