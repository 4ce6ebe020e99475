"""The pytest plugin of the matrix session (``-p grader.matrix.plugin``).

It owns the rank groups of the session (one live group per world size), turns each case into a
verdict with ``verdicts.decide`` and records it as JUnit properties (``verdict``, ``message``,
``trace``) that ``grader.scoring`` reads.  Its configuration comes from the JSON file named by
``GRADER_MATRIX_CONFIG``, written by ``grader.runner``; a ledger line per finished case lets
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

from grader.results import Verdict

CONFIG_ENV = "GRADER_MATRIX_CONFIG"


@dataclass(frozen=True)
class MatrixConfig:
    """What the runner tells the session (see ``grader.runner.run_matrix``)."""

    sandbox: str
    present: list[str]  # student files the intake found, e.g. ["src/collectives.py"]
    limits: dict[str, Any]
    allowed: dict[str, list[str]]  # task ("1"/"2") -> built-in collectives the policy lets through
    ledger: str
    isolation_report: str
    skip: list[str] = field(default_factory=list)  # case names already decided by an earlier round
    isolation: dict[str, Any] = field(default_factory=dict)  # IsolationConfig fields, or {} for none

    @classmethod
    def load(cls) -> MatrixConfig:
        return cls(**json.loads(Path(os.environ[CONFIG_ENV]).read_text()))


class MatrixSession:
    def __init__(self, config: MatrixConfig) -> None:
        from grader.sandbox.launcher import Limits

        self.config = config
        self.limits = Limits(**config.limits)
        self.sandbox = Path(config.sandbox)
        self.groups: dict[int, Any] = {}
        self.import_failures: dict[str, tuple[Verdict, str]] = {}
        self.layers: dict[str, str] = {}

    def check(self, case: Any, record: Callable[[str, object], None]) -> None:
        from grader.matrix import verdicts
        from grader.packs.a9 import expected
        from grader.packs.a9.bodies import MODULE_OF

        module = MODULE_OF[case.kind]
        decision = self._precheck(module)
        if decision is None:
            prepared = expected.prepare(case)
            run = self._run(case, prepared)
            decision = verdicts.decide(case, prepared, run)
            self._remember_import_failure(module, decision, run)
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

    def _remember_import_failure(self, module: str, decision: Any, run: Any) -> None:
        """An import that failed or hung fails every later case of that module without a rerun."""
        if decision.verdict is Verdict.IMPORT_ERROR:
            self.import_failures[module] = (decision.verdict, decision.message)
        elif decision.verdict is Verdict.HANG and any(r.blocked_in.startswith("importing") for r in run.ranks):
            self.import_failures[module] = (Verdict.HANG, "the import never finished: " + decision.message)

    def _run(self, case: Any, prepared: Any) -> Any:
        from grader.sandbox.launcher import CaseRun, GroupStartError, RankGroup

        group = self.groups.get(case.world_size)
        if group is None or not group.alive:
            holder = self._loopback_holder()
            group = RankGroup(case.world_size, self.sandbox, self.limits, self._isolation_factory(holder))
            try:
                group.start()
            except GroupStartError as exc:
                run: CaseRun = exc.run
                return run
            finally:
                if holder is not None:  # the ranks keep the namespace alive on their own
                    os.kill(holder, signal.SIGKILL)
                    os.waitpid(holder, 0)
            self.groups[case.world_size] = group
            self.layers.update(group.layers)
        header = {
            "kind": case.kind,
            "params": case.params,
            "allowed": self.config.allowed.get(str(case.task), []),
            "keep_events": bool(case.params.get("keep_events")),
            "broken": {module: message for module, (_, message) in self.import_failures.items()},
        }
        return group.run_case(header, prepared.inputs, self.limits.case_timeout_s)

    def _loopback_holder(self) -> int | None:
        """A process holding a fresh network namespace with only ``lo`` up, for one group's ranks
        (root only: elsewhere the network layer reports itself off)."""
        if not self.config.isolation or os.geteuid() != 0:
            return None
        from grader.sandbox.isolation import loopback_namespace

        try:
            return loopback_namespace()
        except OSError:  # e.g. a container without CAP_SYS_ADMIN, whose own network is already none
            return None

    def _isolation_factory(self, holder: int | None) -> Any:
        if not self.config.isolation:
            return None
        from grader.sandbox.isolation import IsolationConfig

        fields = dict(self.config.isolation)
        if holder is not None:
            fields["netns"] = Path(f"/proc/{holder}/ns/net")

        def make(rank: int, scratch: Path) -> Any:
            return IsolationConfig(**{**fields, "scratch": scratch})

        return make

    def close(self) -> None:
        for group in self.groups.values():
            if group.alive:
                group.close()
        Path(self.config.isolation_report).write_text(json.dumps(self.layers, indent=1))


_SESSION: MatrixSession | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _SESSION
    import torch

    torch.set_num_threads(1)
    try:
        from grader.sandbox.isolation import become_subreaper

        become_subreaper()
    except ImportError:
        pass
    _SESSION = MatrixSession(MatrixConfig.load())


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
