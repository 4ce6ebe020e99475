"""The pytest plugin of the matrix session (``-p grader.matrix.plugin``).

It owns the session's zygote and rank groups (one live group per number of rank processes, and one
of fresh ranks per size where a kind hands off), turns each case into a verdict with
``verdicts.decide`` and records it as JUnit properties (``verdict``, ``message``, ``trace``) that
``grader.junit`` reads.  Its configuration comes from the JSON file
named by ``GRADER_MATRIX_CONFIG``, written by ``grader.runner`` into a directory only the grader
can read; it holds the input salt, which therefore lives in this process alone (the zygote is
started with a scrubbed environment and never receives it).  A ledger line per finished case lets
the runner resume if the session is killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from grader.matrix.budgets import CALIBRATION_BYTES, case_budget
from grader.matrix.timeline import Timeline
from grader.pack import Case, Prepared, Refused
from grader.results import Verdict
from grader.runtimes.torchdist.policy import Policy

if TYPE_CHECKING:
    from grader.matrix.verdicts import Decision
    from grader.runtimes.torchdist.portable import WorkerPool
    from grader.runtimes.torchdist.runs import CaseRun, Group

MEASURE_RUNS = 2  # runs of a case whose capture lost packets, before it is decided on what was measured
START_ATTEMPTS = 3  # starts of a rank group before its failure decides the case
CONFIG_ENV = "GRADER_MATRIX_CONFIG"
PARENT_ENV = "GRADER_MATRIX_PARENT"  # the runner's pid: the session dies with it
STARTED = "started"  # ledger key: a case whose ranks were handed student code (the runner reads it)


@dataclass(frozen=True)
class MatrixConfig:
    """What the runner tells the session (see ``grader.runner.run_matrix``)."""

    pack: str  # the assignment pack's reference (``grader.pack.load_pack``)
    pack_path: list[str]  # where a pack that is not installed is imported from (its ``search_path``)
    sandbox: str
    present: list[str]  # student files the intake found, e.g. ["src/collectives.py"]
    limits: dict[str, Any]
    policy: dict[str, list[str]]  # the rubric's policy.allow: built-in collectives each function may call
    ledger: str
    isolation_report: str
    salt: str  # keys every input (the pack's ``prepare``); never leaves this process
    skip: list[str] = field(default_factory=list)  # case names already decided by an earlier round
    isolation_config: dict[str, Any] = field(default_factory=dict)  # IsolationConfig fields, or {} for none
    layers: dict[str, str] = field(default_factory=dict)  # layers the runner reports (the salt's)
    timeline: str = ""  # where the session writes its phases (``grader.matrix.timeline``)
    launched: float = 0.0  # the runner's monotonic clock when it started the session
    isolation: str = "auto"  # --isolation: auto, full or portable (``runtimes.torchdist.mode.decide``)

    @classmethod
    def load(cls) -> MatrixConfig:
        return cls(**json.loads(Path(os.environ[CONFIG_ENV]).read_text()))


class MatrixSession:
    def __init__(self, config: MatrixConfig) -> None:
        from grader.limits import Limits
        from grader.pack import load_pack
        from grader.runtimes.torchdist import mode
        from grader.runtimes.torchdist.session import Sandboxing, Zygote, student_config
        from grader.runtimes.torchdist.zygote import ZYGOTE_ENV

        self.config = config
        self.timeline = Timeline(config.launched)
        sys.path[:0] = [p for p in config.pack_path if p not in sys.path]
        self.pack = load_pack(config.pack)
        self.policy = Policy.from_dict(config.policy)
        self.student = student_config(self.pack, config.policy)  # what every group's ranks are told
        self.limits = Limits(**config.limits)
        self.clip = self.limits.clipper()  # every message and capture quoted, bounded per case and in all
        self.sandbox = Path(config.sandbox)
        self.isolation = mode.decide(config.isolation)
        self.zygote: Zygote | None = None  # the sandbox's: the portable runtime has no sandbox
        self.sandboxing: Sandboxing | None = None
        self.pool: WorkerPool | None = None
        if self.isolation.portable:
            from grader.runtimes.torchdist import portable

            forks = Zygote.forked() if ZYGOTE_ENV in os.environ else None  # where the host forked one (Linux)
            capacity = portable.pool_capacity(
                self.pack.cases(), set(config.skip), set(self.pack.handoffs), forked=forks is not None
            )
            self.pool = portable.WorkerPool(capacity, self.sandbox, self.pack.rank_side, self.student, forks)
        else:
            self.zygote = Zygote.forked()  # by this process's host, before it was the session
            self.sandboxing = Sandboxing.for_this_process(
                self._isolation_config(), rootless=self.isolation.name == "rootless"
            )
        self.groups: dict[int, Group] = {}  # rank processes -> the live group of that size
        #: rank processes -> the group a Handoff's second step runs in: fresh ranks that run nothing else
        self.fresh_groups: dict[int, Group] = {}
        self.launched: dict[tuple[bool, int], Group] = {}  # (fresh, rank processes) -> started before the cases
        self.import_failures: dict[str, tuple[Verdict, str]] = {}
        self.probed: set[str] = set()  # modules whose imports were probed for threads left running
        self.start_failures: dict[int, str] = {}  # rank processes -> why their group could not start
        self.layers: dict[str, str] = {
            **config.layers,
            **self.isolation.layers(*((self.pool.method, self.pool.ahead) if self.pool else ())),
        }
        self.failed_functions: set[str] = set()  # functions with a failing case that a stand-in may replace
        self.hung: dict[tuple[str, int], str] = {}  # (function, world size) -> the case that hung
        self.calibration: dict[int, float | None] = {}  # rank processes -> seconds of the calibration allreduce
        self.student_code_ran = False  # a case ran in this session: a group failing to start may be its doing
        self._replay_ledger()

    def _replay_ledger(self) -> None:
        """What the cases an earlier round decided say about the ones left (the ledger is ours)."""
        cases = {case.name: case for case in self.pack.cases()}
        for line in Path(self.config.ledger).read_text().splitlines():
            try:
                entry = json.loads(line)
                case, verdict = cases.get(entry["case"]), Verdict(entry["verdict"])
            except (ValueError, KeyError, TypeError):
                continue
            if case is not None:
                self._learn(case, verdict)
                self.student_code_ran = True  # as far as a start failure is concerned

    def _learn(self, case: Case, verdict: Verdict) -> None:
        """A function with a failing case is replaced by the grader's own where the pack allows it; a
        function that hung at a world size is not run again at that world size (``not_run``)."""
        function = self.pack.function_of[case.kind]
        if verdict is not Verdict.PASS and any(function in names for names in self.pack.stand_ins.values()):
            self.failed_functions.add(function)
        if verdict is Verdict.HANG:
            self.hung.setdefault((function, case.world_size), case.name)

    def check(self, case: Case, record: Callable[[str, object], None]) -> None:
        from grader.matrix import verdicts
        from grader.runtimes.torchdist.runs import GroupStartError

        started, groups_before = time.monotonic(), self.timeline.groups
        self.timeline.case_started(started)
        module = self.pack.module_of[case.kind]
        decision = self._precheck(module) or self._skipped(case)
        if decision is None:
            prepared = self.pack.prepare(case, self.config.salt)
            try:
                run = self._run(case, prepared)
            except GroupStartError as exc:
                decision = self._start_failure(exc.reason)
            except Refused as exc:  # what the first step of a handoff returned breaks the pack's rule
                decision = verdicts.Decision(Verdict.NOT_PARALLEL, str(exc))
            else:
                decision = verdicts.decide(case, prepared, run, self._allowed(case))
                if decision.verdict is Verdict.PASS and self.pack.judge is not None:
                    decision = verdicts.judged(decision, self.pack.judge(case, prepared, *verdicts.measured(run)))
                self._remember_import_failure(module, decision, run)
                if run.threads_left and self.pack.module_to_import(case.kind) and module not in self.probed:
                    self._probe_imports(case)  # a pack whose modules are never imported: the threads are the call's
        self._learn(case, decision.verdict)
        record("verdict", decision.verdict.value)
        message, details = self.clip(decision.message), self.clip(decision.details)
        record("message", message)
        if decision.trace:
            record("trace", json.dumps(decision.trace, separators=(",", ":")))
        with open(self.config.ledger, "a") as ledger:
            ledger.write(json.dumps({"case": case.name, "verdict": decision.verdict.value}) + "\n")
        self.timeline.case_ended(time.monotonic(), started, groups_before)
        if decision.verdict is not Verdict.PASS:
            details = f"\n{details}" if details else ""
            pytest.fail(f"[{decision.verdict.value}] {message}{details}", pytrace=False)

    def _start_failure(self, reason: str) -> Decision:
        """A group that did not start, even when tried again: the grader's failure only when no
        student code had run yet; after the submission's own cases it is charged to the submission
        (what it left running, or the load it made, is the likeliest cause), never to the grader."""
        from grader.matrix.verdicts import Decision

        if self.student_code_ran:
            return Decision(
                Verdict.CRASH,
                f"the ranks could not be started for this case after this submission's earlier cases, "
                f"{START_ATTEMPTS} times: {reason}",
            )
        return Decision(Verdict.ERROR, f"the grader could not start the ranks: {reason}")

    def _allowed(self, case: Case) -> frozenset[str]:
        """The built-in collectives the rubric lets the case's function call: what may show on the wire."""
        file = self.pack.file_of(self.pack.module_of[case.kind])
        return self.policy.for_function(file, self.pack.function_of[case.kind]).allowed

    def _precheck(self, module: str) -> Decision | None:
        from grader.matrix.verdicts import Decision

        files = self.pack.files_of(module)
        if not set(files) & set(self.config.present):
            names = " or ".join(file.split("/")[-1] for file in files)
            return Decision(Verdict.MISSING, f"{names} is missing from the submission")
        if module in self.import_failures:
            verdict, message = self.import_failures[module]
            return Decision(verdict, message)
        return None

    def _skipped(self, case: Case) -> Decision | None:
        """``not_run`` when the case's function already hung at its world size: one timeout is enough to
        know, and the next would cost the same again."""
        from grader.matrix.verdicts import Decision

        function = self.pack.function_of[case.kind]
        hung = self.hung.get((function, case.world_size))
        if hung is None:
            return None
        return Decision(Verdict.NOT_RUN, f"{function} already hung at world size {case.world_size}, in {hung}")

    def _remember_import_failure(self, module: str, decision: Decision, run: Any) -> None:
        """An import that failed or hung fails every later case of that module without a rerun."""
        if decision.verdict is Verdict.IMPORT_ERROR:
            self.import_failures[module] = (decision.verdict, decision.message)
        elif decision.verdict is Verdict.HANG and any(r.blocked_in.startswith("importing") for r in run.ranks):
            self.import_failures[module] = (Verdict.HANG, "the import never finished: " + decision.message)

    def _probe_imports(self, case: Case) -> None:
        """Which import left the case's thread running (``grader.matrix.import_probe``), in fresh ranks."""
        from grader.matrix.import_probe import probe_imports

        self.probed.add(self.pack.module_of[case.kind])
        group = self._new_group(case.processes)
        probe_imports(group, self.pack, case, self.import_failures, self.limits.case_timeout_s)

    def _run(self, case: Case, prepared: Prepared) -> CaseRun:
        """The case's run; a kind with a :class:`~grader.pack.Handoff` runs its first step here and its
        own body in a fresh group, with only what ``carry`` lets cross (may raise ``Refused``).  A run
        whose capture lost packets runs again in a fresh group (``MEASURE_RUNS`` in all), and is decided
        on its last run (``verdicts.tampering``: lost is never clean)."""
        from grader.matrix.verdicts import tampering

        params = self.pack.case_params(case, self.sandbox)
        trusted = self._trusted(case)
        if trusted:  # one defect is charged once: the grader's own versions stand in for failed functions
            params = {**params, "trusted": trusted}
        header = {
            "kind": case.kind,
            "module": self.pack.module_to_import(case.kind),
            "params": params,
            "keep_events": case.keep_events,
            "must_use": case.must_use,
            "layout": [case.launch.nodes, case.launch.per_node],  # what torchrun would tell each rank
            "broken": {module: message for module, (_, message) in self.import_failures.items()},
        }
        handoff = self.pack.handoffs.get(case.kind)
        for attempt in range(1, MEASURE_RUNS + 1):
            group = self._group(self.groups, case.processes)
            budget = case_budget(self.limits, self.calibration.get(case.processes), prepared.tensor_bytes)
            with open(self.config.ledger, "a") as ledger:  # a session dying from here on may be the submission's doing
                ledger.write(json.dumps({STARTED: case.name}) + "\n")
            if handoff is None:
                run = group.run_case(header, prepared.inputs, budget)
            else:
                first = group.run_case({**header, "kind": handoff.first, "keep_events": False}, prepared.inputs, budget)
                self.student_code_ran = True
                if any(rep.status != "ok" for rep in first.ranks) or tampering(first, self._allowed(case)):
                    run = first  # the verdict is the first step's: its failure, or its traffic
                else:
                    inputs = handoff.carry(case, prepared.inputs, [rep.tensors for rep in first.ranks])
                    run = self._group(self.fresh_groups, case.processes).run_case(header, inputs, budget)
            run.runs = attempt
            self.student_code_ran = True
            if run.traffic is None or not run.traffic.lost or run.hang:  # a hang is decided without the wire
                break
        run.traffic = self.isolation.measured(run.traffic)  # rootless: a capped capture's overflow is not a verdict
        return run

    def prepare_groups(self, names: list[str]) -> None:
        """Start every group the cases ``names`` will run in, side by side, before the first case (issue
        23): their ranks start up on every core at once instead of one group after another, and no case
        ever runs beside a group starting up, which would eat into its time budget.  A group that does
        not come up here is started again, with its retries, when a case needs it, as is a group
        replaced after a case.  Not with a pool: its workers serve one group at a time."""
        from grader.runtimes.torchdist.runs import GroupStartError

        if self.pool is not None:
            return
        cases = {case.name: case for case in self.pack.cases()}
        for name in names:
            case = cases.get(name)
            if case is None or self._precheck(self.pack.module_of[case.kind]) is not None:
                continue
            for key in case.rank_groups(self.pack.handoffs):
                if key not in self.launched:
                    self.launched[key] = self._new_group(key[1])
                    self.launched[key].launch()
        for key, group in list(self.launched.items()):
            try:
                group.wait_ready()
            except GroupStartError:
                del self.launched[key]  # closed where it failed

    def _group(self, groups: dict[int, Group], size: int) -> Group:
        """The live group of ``size`` rank processes (``Case.processes``: the world size, but for a
        threads case) in ``groups``, started (and calibrated, once per size) when there is none, or
        taken from those started before the cases (``prepare_groups``).  A start that fails is tried
        again (``START_ATTEMPTS`` in all) with every other group closed, so that what a submission left
        running there cannot starve it; a start that still fails is remembered."""
        from grader.runtimes.torchdist.runs import GroupStartError

        if size in self.start_failures:  # once is enough: the next case would fail the same way
            raise GroupStartError(self.start_failures[size])
        group = groups.get(size)
        if group is not None and group.alive:
            return group
        started = time.monotonic()
        group = self.launched.pop((groups is self.fresh_groups, size), None)
        attempt = 1
        while True:
            if group is None:
                group = self._new_group(size)
                group.launch()
            try:
                group.wait_ready()
                break
            except GroupStartError as exc:
                if attempt == START_ATTEMPTS:
                    self.start_failures[size] = exc.reason
                    raise
            attempt += 1
            group = None
            for other in [*self.groups.values(), *self.fresh_groups.values(), *self.launched.values()]:
                if other.alive:
                    other.close()
            self.launched.clear()
        groups[size] = group
        self.layers.update(group.layers)
        if size not in self.calibration:
            self.calibration[size] = self._calibrate(group)
        self.timeline.groups += time.monotonic() - started
        return group

    def _new_group(self, size: int) -> Group:
        """A rank group of the session's runtime (both have the same interface)."""
        from grader.runtimes.torchdist.launcher import RankGroup
        from grader.runtimes.torchdist.portable_group import PortableGroup

        if self.pool is not None:
            return PortableGroup(size, self.limits, self.pool)
        assert self.zygote is not None and self.sandboxing is not None
        return RankGroup(size, self.sandbox, self.limits, self.zygote, self.sandboxing, self.student)

    def _calibrate(self, group: Group) -> float | None:
        """Seconds the runtime's own allreduce of CALIBRATION_BYTES per rank takes in this group (the
        median of three), before any student code is imported into it; None if it could not run
        (see ``grader.matrix.budgets``)."""
        import torch

        x = torch.zeros(CALIBRATION_BYTES // 4)
        times = []
        for _ in range(3):
            run = group.run_case({"op": "calibrate"}, [{"x": x}] * group.world_size, self.limits.case_timeout_s)
            if any(rep.status != "ok" for rep in run.ranks):
                return None
            times.append(run.seconds)
        return sorted(times)[1]

    def _trusted(self, case: Case) -> list[str]:
        """The functions the grader's own versions replace in this case: those the pack allows here
        that failed a case, or whose module is missing or did not import."""
        replaceable = self.pack.stand_ins.get(case.kind, frozenset())
        if not replaceable:
            return []
        broken = {
            self.pack.function_of[kind]
            for kind, module in self.pack.module_of.items()
            if self._precheck(module) is not None
        }
        return sorted(replaceable & (self.failed_functions | broken))

    def _isolation_config(self) -> dict[str, Any] | None:
        """IsolationConfig fields every rank shares (its scratch and uid are the group's business)."""
        if not self.config.isolation_config:
            return None
        from grader.sandbox.isolation import default_allow_read, default_hide

        fields = dict(self.config.isolation_config)
        fields.setdefault("allow_read", [str(p) for p in default_allow_read()])
        fields.setdefault("hide", [str(p) for p in default_hide()])
        return fields

    def close(self) -> None:
        """Kill every group, then close them side by side: most of a close is waiting (for the ranks to
        die, and for the kernel to let go of the group's packet socket, an RCU grace period each), and
        A9's eleven groups closed one after another took 0.2 s of every grading (issue 23).  Closed
        ones too: a close that the runner's SIGTERM cut short is finished here (``RankGroup.close``)."""
        every = [*self.groups.values(), *self.fresh_groups.values(), *self.launched.values()]
        for group in every:
            group.kill()  # here, one at a time: it may still read the zygote's answer for its leader
        with ThreadPoolExecutor(max_workers=max(1, len(every))) as closing:
            for closed in [closing.submit(group.close) for group in every]:
                closed.result()
        if self.pool is not None:
            self.pool.close()
        if self.zygote is not None:
            self.zygote.close()
        if self.sandboxing is not None:
            self.sandboxing.close()
        Path(self.config.isolation_report).write_text(json.dumps(self.layers, indent=1))
        if self.config.timeline:
            self.timeline.closed(time.monotonic())
            self.timeline.write(Path(self.config.timeline))


_SESSION: MatrixSession | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _SESSION
    from grader.sandbox.parent import die_with_parent

    die_with_parent(int(os.environ[PARENT_ENV]), getattr(signal, "SIGKILL", signal.SIGTERM))  # ends with its grading
    signal.signal(signal.SIGTERM, _interrupt)  # the runner stops us: close every group on the way out
    config = MatrixConfig.load()
    _SESSION = MatrixSession(config)
    import torch

    torch.set_num_threads(1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test of a pack's file runs the pack's cases of that name (``AssignmentPack.cases_of``): a
    pack's test file is one line per test and declares no hook of its own."""
    if "case" in metafunc.fixturenames:
        assert _SESSION is not None
        cases = _SESSION.pack.cases_of(metafunc.function.__name__)
        metafunc.parametrize("case", cases, ids=[case.id for case in cases])


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # pytest ends the session through pytest_sessionfinish


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    assert _SESSION is not None
    skip = set(_SESSION.config.skip)
    if skip:
        config.hook.pytest_deselected(items=[i for i in items if i.name in skip])
        items[:] = [i for i in items if i.name not in skip]
    _SESSION.prepare_groups([item.name for item in items])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _FINISHED
    _FINISHED = session
    if _SESSION is not None:
        _SESSION.close()


_FINISHED: pytest.Session | None = None


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's last act: its JUnit file is written, its groups and zygote closed, so the
    process ends here.  An ordinary exit would tear down torch's interpreter state first, which
    took 1.4 s of an A9 grading's 10 (issue 23) and decides nothing."""
    if _FINISHED is None:  # pytest stopped before the session ran (a usage error): its own exit
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(_FINISHED.exitstatus))


@pytest.fixture
def check(record_property: Callable[[str, object], None]) -> Callable[[Case], None]:
    assert _SESSION is not None
    session = _SESSION
    return lambda case: session.check(case, record_property)
