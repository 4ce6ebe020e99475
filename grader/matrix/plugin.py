"""The pytest plugin of the matrix session (``-p grader.matrix.plugin``).

It owns the session's zygote and rank groups (one live group per world size), turns each case
into a verdict with ``verdicts.decide`` and records it as JUnit properties (``verdict``,
``message``, ``trace``) that ``grader.scoring`` reads.  Its configuration comes from the JSON file
named by ``GRADER_MATRIX_CONFIG``, written by ``grader.runner`` into a directory only the grader
can read; it holds the input salt, which therefore lives in this process alone (the zygote is
started with a scrubbed environment and never receives it).  A ledger line per finished case lets
the runner resume if the session is killed.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grader.matrix.budgets import CALIBRATION_BYTES, case_budget
from grader.results import Verdict

CONFIG_ENV = "GRADER_MATRIX_CONFIG"
PARENT_ENV = "GRADER_MATRIX_PARENT"  # the runner's pid: the session dies with it


@dataclass(frozen=True)
class MatrixConfig:
    """What the runner tells the session (see ``grader.runner.run_matrix``)."""

    sandbox: str
    present: list[str]  # student files the intake found, e.g. ["src/collectives.py"]
    limits: dict[str, Any]
    allowed: dict[str, list[str]]  # task ("1"/"2") -> built-in collectives the policy lets through
    ledger: str
    isolation_report: str
    salt: str  # keys every input (see grader.packs.a9.expected); never leaves this process
    skip: list[str] = field(default_factory=list)  # case names already decided by an earlier round
    isolation: dict[str, Any] = field(default_factory=dict)  # IsolationConfig fields, or {} for none
    layers: dict[str, str] = field(default_factory=dict)  # layers the runner reports (the salt's)

    @classmethod
    def load(cls) -> MatrixConfig:
        return cls(**json.loads(Path(os.environ[CONFIG_ENV]).read_text()))


BODIES = "grader.packs.a9.bodies"  # the pack's rank-side module: all the zygote imports of it


class MatrixSession:
    def __init__(self, config: MatrixConfig) -> None:
        from grader.sandbox.launcher import Limits, Sandboxing, Zygote

        self.config = config
        self.limits = Limits(**config.limits)
        self.sandbox = Path(config.sandbox)
        self.zygote = Zygote(BODIES)  # starts importing torch while this process does the same
        self.sandboxing = Sandboxing.for_this_process(self._isolation())
        self.groups: dict[int, Any] = {}
        self.import_failures: dict[str, tuple[Verdict, str]] = {}
        self.start_failures: dict[int, str] = {}  # world size -> why its group could not start
        self.layers: dict[str, str] = dict(config.layers)
        self.failed_functions: set[str] = set()  # Task 1 functions with a failing case
        self.hung: dict[tuple[str, int], str] = {}  # (function, world size) -> the case that hung
        self.calibration: dict[int, float | None] = {}  # world size -> seconds of the calibration allreduce
        self._replay_ledger()

    def _replay_ledger(self) -> None:
        """What the cases an earlier round decided say about the ones left (the ledger is ours)."""
        from grader.packs.a9.catalog import all_cases

        cases = {case.name: case for case in all_cases()}
        for line in Path(self.config.ledger).read_text().splitlines():
            try:
                entry = json.loads(line)
                case, verdict = cases.get(entry["case"]), Verdict(entry["verdict"])
            except (ValueError, KeyError, TypeError):
                continue
            if case is not None:
                self._learn(case, verdict)

    def _learn(self, case: Any, verdict: Verdict) -> None:
        """A Task 1 function with a failing case is replaced in Task 2; a function that hung at a world
        size is not run again at that world size (its other cases there are ``not_run``)."""
        from grader.packs.a9.catalog import FUNCTION_OF

        function = FUNCTION_OF[case.kind]
        if case.task == 1 and verdict is not Verdict.PASS:
            self.failed_functions.add(function)
        if verdict is Verdict.HANG:
            self.hung.setdefault((function, case.world_size), case.name)

    def check(self, case: Any, record: Callable[[str, object], None]) -> None:
        from grader.matrix import verdicts
        from grader.packs.a9 import expected
        from grader.packs.a9.bodies import MODULE_OF
        from grader.sandbox.launcher import GroupStartError

        module = MODULE_OF[case.kind]
        assert module is not None  # only the calibration runs without a student module, and it is no case
        decision = self._precheck(module) or self._skipped(case)
        if decision is None:
            prepared = expected.prepare(case, self.config.salt)
            try:
                run = self._run(case, prepared)
            except GroupStartError as exc:  # before any student code ran: the grader's failure
                self.start_failures[case.world_size] = exc.reason
                decision = verdicts.Decision(Verdict.ERROR, f"the grader could not start the ranks: {exc.reason}")
            else:
                allowed = frozenset(self.config.allowed.get(str(case.task), []))
                decision = verdicts.decide(case, prepared, run, allowed)
                self._remember_import_failure(module, decision, run)
        self._learn(case, decision.verdict)
        record("verdict", decision.verdict.value)
        record("message", decision.message)
        if decision.trace:
            record("trace", json.dumps(decision.trace, separators=(",", ":")))
        with open(self.config.ledger, "a") as ledger:
            ledger.write(json.dumps({"case": case.name, "verdict": decision.verdict.value}) + "\n")
        if decision.verdict is not Verdict.PASS:
            details = f"\n{decision.details}" if decision.details else ""
            pytest.fail(f"[{decision.verdict.value}] {decision.message}{details}", pytrace=False)

    def _precheck(self, module: str) -> Any:
        from grader.matrix.verdicts import Decision

        file = module.replace(".", "/") + ".py"
        if file not in self.config.present:
            return Decision(Verdict.MISSING, f"{file.split('/')[-1]} is missing from the submission")
        if module in self.import_failures:
            verdict, message = self.import_failures[module]
            return Decision(verdict, message)
        return None

    def _skipped(self, case: Any) -> Any:
        """``not_run`` when the case's function already hung at its world size: one timeout is enough to
        know, and the next would cost the same again."""
        from grader.matrix.verdicts import Decision
        from grader.packs.a9.catalog import FUNCTION_OF

        function = FUNCTION_OF[case.kind]
        hung = self.hung.get((function, case.world_size))
        if hung is None:
            return None
        return Decision(Verdict.NOT_RUN, f"{function} already hung at world size {case.world_size}, in {hung}")

    def _remember_import_failure(self, module: str, decision: Any, run: Any) -> None:
        """An import that failed or hung fails every later case of that module without a rerun."""
        if decision.verdict is Verdict.IMPORT_ERROR:
            self.import_failures[module] = (decision.verdict, decision.message)
        elif decision.verdict is Verdict.HANG and any(r.blocked_in.startswith("importing") for r in run.ranks):
            self.import_failures[module] = (Verdict.HANG, "the import never finished: " + decision.message)

    def _run(self, case: Any, prepared: Any) -> Any:
        from grader.sandbox.launcher import GroupStartError, RankGroup

        group = self.groups.get(case.world_size)
        if case.world_size in self.start_failures:  # once is enough: a grader fault does not heal
            raise GroupStartError(self.start_failures[case.world_size])
        if group is None or not group.alive:
            group = RankGroup(case.world_size, self.sandbox, self.limits, self.zygote, self.sandboxing)
            group.start()
            self.groups[case.world_size] = group
            self.layers.update(group.layers)
            if case.world_size not in self.calibration:
                self.calibration[case.world_size] = self._calibrate(group)
        params = case.params
        trusted = self._trusted() if case.task == 2 else []
        if trusted:  # a Task 1 defect is charged once, in Task 1
            params = {**params, "trusted": trusted}
        header = {
            "kind": case.kind,
            "params": params,
            "allowed": self.config.allowed.get(str(case.task), []),
            "keep_events": bool(case.params.get("keep_events")),
            "broken": {module: message for module, (_, message) in self.import_failures.items()},
        }
        budget = case_budget(self.limits, self.calibration.get(case.world_size), prepared.tensor_bytes)
        return group.run_case(header, prepared.inputs, budget)

    def _calibrate(self, group: Any) -> float | None:
        """Seconds the grader's own allreduce of CALIBRATION_BYTES per rank takes in this group (the
        median of three), before any student code is imported into it; None if it could not run
        (see ``grader.matrix.budgets``)."""
        import torch

        x = torch.zeros(CALIBRATION_BYTES // 4)
        header = {"kind": "calibrate", "params": {}, "allowed": [], "keep_events": False, "broken": {}}
        times = []
        for _ in range(3):
            run = group.run_case(header, [{"x": x}] * group.world_size, self.limits.case_timeout_s)
            if any(rep.status != "ok" for rep in run.ranks):
                return None
            times.append(run.seconds)
        return sorted(times)[1]

    def _trusted(self) -> list[str]:
        """Task 1 functions that failed a case, or whose module is missing or did not import."""
        from grader.packs.a9.bodies import MODULE_OF
        from grader.packs.a9.catalog import FUNCTION_OF, TASK2_KINDS

        modules = {module for module in MODULE_OF.values() if module is not None}
        broken = {module for module in modules if self._precheck(module) is not None}
        task1 = {kind: fn for kind, fn in FUNCTION_OF.items() if kind not in TASK2_KINDS}
        return sorted(self.failed_functions | {fn for kind, fn in task1.items() if MODULE_OF[kind] in broken})

    def _isolation(self) -> dict[str, Any] | None:
        """IsolationConfig fields every rank shares (its scratch and uid are the group's business)."""
        if not self.config.isolation:
            return None
        from grader.sandbox.isolation import default_allow_read, default_hide

        fields = dict(self.config.isolation)
        fields.setdefault("allow_read", [str(p) for p in default_allow_read()])
        fields.setdefault("hide", [str(p) for p in default_hide()])
        return fields

    def close(self) -> None:
        for group in self.groups.values():
            if group.alive:
                group.close()
        self.zygote.close()
        self.sandboxing.close()
        Path(self.config.isolation_report).write_text(json.dumps(self.layers, indent=1))


_SESSION: MatrixSession | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _SESSION
    from grader.sandbox.isolation import die_with_parent

    die_with_parent(int(os.environ[PARENT_ENV]), signal.SIGKILL)  # the session ends with its grading
    signal.signal(signal.SIGTERM, _interrupt)  # the runner stops us: close every group on the way out
    config = MatrixConfig.load()
    _SESSION = MatrixSession(config)
    import torch

    torch.set_num_threads(1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # pytest ends the session through pytest_sessionfinish


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    assert _SESSION is not None
    skip = set(_SESSION.config.skip)
    if skip:
        config.hook.pytest_deselected(items=[i for i in items if i.name in skip])
        items[:] = [i for i in items if i.name not in skip]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SESSION is not None:
        _SESSION.close()


@pytest.fixture
def check(record_property: Callable[[str, object], None]) -> Callable[[Any], None]:
    assert _SESSION is not None
    session = _SESSION
    return lambda case: session.check(case, record_property)
