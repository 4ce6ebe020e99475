"""Where a measurement is incomplete or a case leaves something behind, the verdict says so and
never reads "unknown" as "clean"; the session runs such a case again, and tries a group's start
again, within bounds.  Runs are built by hand: what is specified is how the session decides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.matrix import plugin, verdicts
from grader.matrix.timeline import Timeline
from grader.pack import Case, Prepared, engine_params
from grader.results import Verdict
from grader.runtimes import OUTSIDE
from grader.runtimes.torchdist import launcher
from grader.runtimes.torchdist.mode import Isolation
from grader.runtimes.torchdist.replies import Claims
from grader.runtimes.torchdist.runs import CaseRun, GroupStartError, RankReport, beyond_the_records, clean, explains
from grader.runtimes.torchdist.traffic import Traffic

CASE = Case("test_allreduce", "ws2", 2, "allreduce", engine_params(must_communicate=True))
PREPARED = Prepared([{}, {}], [{"out": torch.ones(2)}, {"out": torch.ones(2)}])


#: one element of a result or an expected value: ordinary, tiny, huge, signed zero, infinite or NaN
_ELEMENT = st.one_of(
    st.floats(-10, 10), st.sampled_from([0.0, -0.0, 1e-6, 1e30, float("inf"), float("-inf"), float("nan")])
)


def honest_run(traffic: Traffic | None) -> CaseRun:
    """Two ranks that returned the right values and recorded one message each way."""
    claims = [Claims(1, 1, 8, 8, {1 - r: 1}, {1 - r: 8}, {1 - r: 1}) for r in range(2)]
    ranks = [RankReport(r, "ok", tensors={"out": torch.ones(2)}, claims=claims[r], replied=True) for r in range(2)]
    return CaseRun(ranks, 0.1, traffic=traffic)


def measured() -> Traffic:
    traffic = Traffic()
    for src in range(2):
        traffic.pair(src, 1 - src).messages, traffic.pair(src, 1 - src).bytes = 1, 8
    return traffic


def test_a_measured_honest_case_passes() -> None:
    assert verdicts.decide(CASE, PREPARED, honest_run(measured())).verdict is Verdict.PASS


def test_a_lost_capture_decides_nothing_in_the_submissions_favour() -> None:
    """Right values and records that agree: still not a pass when the wire could not be measured,
    and the message says why; the trace keeps no count a trace check could pass on."""
    traffic = measured()
    traffic.lost = "the capture dropped 3 packets"
    run = honest_run(traffic)
    run.runs = 2
    decision = verdicts.decide(CASE, PREPARED, run)
    assert decision.verdict is Verdict.TAMPERING
    assert "could not measure the traffic between the ranks in each of 2 runs" in decision.message
    assert "the capture dropped 3 packets" in decision.message
    assert "max_sends_per_rank" not in decision.trace and decision.trace["measured"] is False
    assert not clean(run)


def test_ranks_that_agree_without_any_measured_byte_are_not_clean() -> None:
    decision = verdicts.decide(CASE, PREPARED, honest_run(Traffic()))
    assert decision.verdict is Verdict.TAMPERING


def test_without_a_capture_the_records_decide() -> None:
    """No root, no capture: the ranks' own records are all there is (said in ``isolation``)."""
    assert verdicts.decide(CASE, PREPARED, honest_run(None)).verdict is Verdict.PASS


def test_a_thread_left_running_is_a_hang_that_names_it_and_its_group_is_replaced() -> None:
    """/proc's count decides (issue 39: right values no longer pass beside a thread that outlives its
    case); the rank's words only name the thread, and a rank that names none is still charged."""
    run = honest_run(measured())
    run.threads_left = {0: 1, 1: 1}
    run.ranks[0].threads = ("'spin' at collectives.py:9 in _spin",)
    decision = verdicts.decide(CASE, PREPARED, run)
    assert decision.verdict is Verdict.HANG
    assert decision.message == (
        "a thread was left running after the case: rank 0: 'spin' at collectives.py:9 in _spin; "
        "rank 1: 1 thread(s) of the submission's"
    )
    assert not clean(run)
    run.ranks[1].threads = run.ranks[0].threads  # the same thread in both ranks is said once
    assert verdicts.decide(CASE, PREPARED, run).message.endswith("ranks 0, 1: 'spin' at collectives.py:9 in _spin")


def test_a_worse_failure_is_said_first_with_the_thread_beside_it() -> None:
    run = honest_run(measured())
    run.threads_left = {1: 1}
    run.ranks[1].threads = ("'t' at collectives.py:3 in f",)
    run.ranks[1].status, run.ranks[1].message = "exception", "rank 1: ValueError: no"
    decision = verdicts.decide(CASE, PREPARED, run)
    assert decision.verdict is Verdict.CRASH
    assert decision.message == "rank 1: ValueError: no (rank 1: 't' at collectives.py:3 in f)"


def test_a_counted_thread_outside_the_students_code_is_not_charged() -> None:
    """Python's or torch's own thread on its way out (HW12's 'Dummy-52' on a loaded machine): the group
    is replaced, the values decide."""
    run = honest_run(measured())
    run.threads_left = {0: 1}
    run.ranks[0].threads = ("'Dummy-52' " + OUTSIDE,)
    assert verdicts.decide(CASE, PREPARED, run).verdict is Verdict.PASS


def test_only_a_message_not_seen_yet_is_worth_waiting_for_after_the_replies() -> None:
    """Once every rank replied, the session drains the capture again for up to ``SETTLE_S`` while the
    records are not yet explained: a recorded message may still be crossing.  Traffic beyond the
    records (more than a rank recorded, a collective it never called, a foreign or lost packet) only
    grows with more packets, so it decides at once."""
    ranks = honest_run(None).ranks
    assert explains(ranks, measured()) and not beyond_the_records(ranks, measured())
    shortfall = measured()
    del shortfall.pairs[(1, 0)]  # rank 1's message to rank 0 not captured yet: waiting may bring it
    assert not explains(ranks, shortfall) and not beyond_the_records(ranks, shortfall)
    excess, collective, foreign, lost = measured(), measured(), measured(), measured()
    excess.pair(0, 1).messages += 1
    collective.pair(0, 1).collectives["broadcast"] = 8
    foreign.unexplained("a UDP datagram")
    lost.lost = "the capture dropped 3 packets"
    for traffic in (excess, collective, foreign, lost):
        assert beyond_the_records(ranks, traffic) and not explains(ranks, traffic)


class _Capture:
    """A capture whose traffic is fixed: what ``RankGroup._measured`` reads and waits on."""

    def __init__(self, traffic: Traffic) -> None:
        self.traffic = traffic

    def drain(self) -> None:
        pass

    def missing(self) -> str:
        return ""

    def fileno(self) -> int:
        return -1


@pytest.mark.parametrize(("beyond", "waits"), [(True, False), (False, True)])
def test_the_session_stops_waiting_for_the_wire_once_more_packets_cannot_change_the_verdict(
    monkeypatch: pytest.MonkeyPatch, beyond: bool, waits: bool
) -> None:
    traffic = measured()
    if beyond:
        traffic.pair(0, 1).collectives["all_to_all"] = 8
    else:
        del traffic.pairs[(1, 0)]
    waited: list[float] = []
    monkeypatch.setattr(launcher.select, "select", lambda r, w, x, t: waited.append(t) or ([], [], []))
    group = object.__new__(launcher.RankGroup)
    group._capture = _Capture(traffic)  # type: ignore[assignment]
    assert group._measured(honest_run(None)) is traffic
    assert bool(waited) is waits  # the shortfall: polled until SETTLE_S ran out


STATUSES = ["ok", "not_implemented", "import_error", "bad_return", "hang", "exception", "exited", "signaled"]
STATUSES += ["wire_error", "no_reply", "memory", "forbidden", "a status no rank sends"]


@pytest.mark.parametrize("status", STATUSES)
def test_a_rank_the_session_does_not_wait_on_for_its_threads_is_one_whose_count_cannot_change_the_verdict(
    status: str,
) -> None:
    """After a case the session waits for a joined thread to leave /proc only where the count could still
    decide the verdict (``launcher.RankGroup._threads_left``): a rank whose reply already fails the case
    as a hang or worse is read once.  For those, a thread counted or not gives the same verdict."""
    settled = verdicts.fails_as_a_hang_or_worse(status)
    assert settled == (status not in ("ok", "not_implemented", "import_error", "bad_return"))
    run = honest_run(measured())
    run.ranks[1].status, run.ranks[1].message = status, "rank 1: what it said"
    without = verdicts.decide(CASE, PREPARED, run).verdict
    run.threads_left, run.ranks[1].threads = {1: 1}, ("'t' at collectives.py:3 in f",)
    counted = verdicts.decide(CASE, PREPARED, run).verdict
    assert (counted == without) if settled else (counted is Verdict.HANG and without is not Verdict.HANG)


class FakeGroup:
    """A group whose capture loses packets ``lost`` times, or that fails to start ``failures`` times."""

    starts = 0
    failures = 0
    cases = 0
    lost = 0
    launched: ClassVar[list[int]] = []  # world sizes, in launch order

    def __init__(self, world_size: int, *args: Any) -> None:
        self.world_size, self.alive, self.layers = world_size, False, {}

    def launch(self) -> None:
        FakeGroup.launched.append(self.world_size)

    def wait_ready(self) -> None:
        if self.alive:
            return
        FakeGroup.starts += 1
        if FakeGroup.starts <= FakeGroup.failures:
            raise GroupStartError("the ranks were not ready in time")
        self.alive = True

    def kill(self) -> None:
        pass

    def close(self) -> None:
        self.alive = False

    def run_case(self, header: dict[str, Any], inputs: list[Any], timeout_s: float) -> CaseRun:
        FakeGroup.cases += 1
        traffic = measured()
        if FakeGroup.cases <= FakeGroup.lost:
            traffic.lost = "the capture dropped 1 packets"
            self.alive = False  # a run that is not clean closes its group
        return honest_run(traffic)


class FakePack:
    def __init__(self) -> None:
        self.stand_ins: dict[str, frozenset[str]] = {}
        self.module_of = {"allreduce": "src.collectives"}
        self.function_of = {"allreduce": "my_allreduce"}
        self.handoffs: dict[str, object] = {}

    def case_params(self, case: Case, root: object) -> dict[str, object]:
        return dict(case.params)

    def module_to_import(self, kind: str) -> str:
        return "src.collectives"


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> plugin.MatrixSession:
    """A session without its zygote: only how it runs cases and starts groups is exercised."""
    from types import SimpleNamespace

    from grader.limits import Limits

    monkeypatch.setattr(launcher, "RankGroup", FakeGroup)
    FakeGroup.starts = FakeGroup.failures = FakeGroup.cases = FakeGroup.lost = 0
    FakeGroup.launched = []
    s = object.__new__(plugin.MatrixSession)
    s.pack, s.limits, s.groups, s.calibration = FakePack(), Limits(), {}, {2: 0.01}
    s.start_failures, s.import_failures, s.layers, s.failed_functions = {}, {}, {}, set()
    s.student_code_ran, s.sandbox, s.student = False, None, {}
    s.zygote, s.sandboxing, s.pool, s.fresh_groups = object(), object(), None, {}  # FakeGroup needs neither
    s.launched, s.timeline, s.isolation = {}, Timeline(0.0), Isolation("full", "root")
    s.config = SimpleNamespace(ledger=str(tmp_path / "ledger.jsonl"))
    return s


def prepared_groups(session: plugin.MatrixSession, sizes: list[int]) -> None:
    """``session.prepare_groups`` for allreduce cases of these world sizes, in this order."""
    cases = [Case("test_allreduce", f"ws{n}", n, "allreduce", {}) for n in sizes]
    session.pack.cases = lambda: cases  # type: ignore[attr-defined]
    session._precheck = lambda module: None  # type: ignore[method-assign]
    session.calibration = dict.fromkeys(sizes, 0.01)
    session.prepare_groups([case.name for case in cases])


def test_every_group_is_started_before_the_first_case_and_the_cases_take_them(
    session: plugin.MatrixSession,
) -> None:
    prepared_groups(session, [2, 3, 2, 4])
    assert FakeGroup.launched == [2, 3, 4] and FakeGroup.starts == 3  # each once, side by side, all ready
    for size in (2, 3, 4):
        assert session._group(session.groups, size).alive
    assert FakeGroup.launched == [2, 3, 4] and FakeGroup.starts == 3  # taken, not started again


def test_a_group_that_failed_to_start_before_the_cases_is_started_again_when_needed(
    session: plugin.MatrixSession,
) -> None:
    FakeGroup.failures = 1
    prepared_groups(session, [2])
    assert session.launched == {}  # it did not come up: nothing is kept of it
    assert session._group(session.groups, 2).alive and FakeGroup.launched == [2, 2] and FakeGroup.starts == 2


def test_a_case_whose_capture_lost_packets_runs_again_in_a_fresh_group(session: plugin.MatrixSession) -> None:
    FakeGroup.lost = 1
    run = session._run(CASE, PREPARED)
    assert (FakeGroup.cases, FakeGroup.starts, run.runs) == (2, 2, 2)
    assert run.traffic is not None and not run.traffic.lost


def test_runs_again_are_bounded_and_the_last_lost_run_is_decided(session: plugin.MatrixSession) -> None:
    FakeGroup.lost = 99
    run = session._run(CASE, PREPARED)
    assert FakeGroup.cases == plugin.MEASURE_RUNS == run.runs
    assert verdicts.decide(CASE, PREPARED, run).verdict is Verdict.TAMPERING


def test_a_group_that_fails_to_start_is_tried_again(session: plugin.MatrixSession) -> None:
    FakeGroup.failures = plugin.START_ATTEMPTS - 1
    assert session._run(CASE, PREPARED).ranks[0].status == "ok"


def test_a_start_that_keeps_failing_after_student_code_ran_is_charged_to_the_submission(
    session: plugin.MatrixSession,
) -> None:
    session._run(CASE, PREPARED)
    session.groups[2].close()  # the submission's case ended its group
    FakeGroup.failures = FakeGroup.starts + plugin.START_ATTEMPTS
    with pytest.raises(GroupStartError) as failed:
        session._run(CASE, PREPARED)
    decision = session._start_failure(failed.value.reason)
    assert decision.verdict is Verdict.CRASH and "after this submission's earlier cases" in decision.message


def test_a_start_that_fails_before_any_student_code_is_the_graders_error(session: plugin.MatrixSession) -> None:
    FakeGroup.failures = plugin.START_ATTEMPTS
    with pytest.raises(GroupStartError) as failed:
        session._run(CASE, PREPARED)
    assert session._start_failure(failed.value.reason).verdict is Verdict.ERROR


def test_the_ledger_says_a_case_started_before_its_ranks_get_student_code(session: plugin.MatrixSession) -> None:
    """What the runner reads when the session dies (``grader.runner``): a group's start and calibration
    run no student code, so a failure to start writes nothing; a case handed to ranks is marked first."""
    ledger = Path(session.config.ledger)
    FakeGroup.failures = plugin.START_ATTEMPTS
    with pytest.raises(GroupStartError):
        session._run(CASE, PREPARED)
    assert not ledger.exists()
    session.start_failures.clear()
    FakeGroup.failures = 0
    session._run(CASE, PREPARED)
    assert ledger.read_text() == json.dumps({plugin.STARTED: CASE.name}) + "\n"


class BrokenZygote:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def ask(self, request: Any, fds: list[int]) -> int:
        raise self.exc


@pytest.mark.parametrize("exc", [OSError(24, "Too many open files"), RuntimeError("anything else")])
def test_a_group_that_fails_to_start_leaves_nothing_behind(tmp_path: Path, exc: BaseException) -> None:
    """Whatever fails while the ranks start, the group's directory (its FileStore, the ranks' scratch)
    is gone; resources running out is a start failure the session may try again."""
    from grader.limits import Limits
    from grader.runtimes.torchdist.launcher import RankGroup
    from grader.runtimes.torchdist.session import Sandboxing

    group = RankGroup(2, tmp_path, Limits(), BrokenZygote(exc), Sandboxing(None), {})  # type: ignore[arg-type]
    with pytest.raises(GroupStartError if isinstance(exc, OSError) else RuntimeError):
        group.start()
    assert not group._dir.exists() and not group.alive


def test_an_expected_sum_is_exact_where_float32_would_round() -> None:
    """Packs' expected reductions (``pack.exact_sum``): floating tensors summed in float64 in rank
    order, so a float32 sum that loses a rank's contribution is not what a submission is held to."""
    from grader.pack import exact_sum

    xs = [torch.tensor([1e8], dtype=torch.float32), torch.tensor([1.0]), torch.tensor([-1e8])]
    assert float(xs[0] + xs[1] + xs[2]) == 0.0  # float32's own sum loses the 1
    assert exact_sum(xs).dtype == torch.float64 and float(exact_sum(xs)) == 1.0
    ints = [torch.tensor([2**40, 3]), torch.tensor([1, -3])]
    assert torch.equal(exact_sum(ints), torch.tensor([2**40 + 1, 0]))
    doubles = [torch.tensor([0.5], dtype=torch.float64), torch.tensor([0.25], dtype=torch.float64)]
    assert float(exact_sum(doubles)) == 0.75
    # the inputs are left as they were: they are what the ranks are sent
    assert torch.equal(ints[0], torch.tensor([2**40, 3])) and float(doubles[0]) == 0.5


@settings(max_examples=300)
@given(
    pairs=st.lists(st.tuples(_ELEMENT, _ELEMENT), min_size=1, max_size=6),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    rtol=st.sampled_from([0.0, 1e-5, 1e-3]),
    atol=st.sampled_from([0.0, 1e-5, 1.0]),
)
def test_within_tolerance_is_final_only_where_isclose_agrees(
    pairs: list[tuple[float, float]], dtype: torch.dtype, rtol: float, atol: float
) -> None:
    """``verdicts.within``, the fast elementwise check: whenever it says within, ``torch.isclose`` (in
    float64, NaN never close) says every element is close; and it never writes its arguments."""
    have = torch.tensor([p[0] for p in pairs], dtype=dtype)
    want = torch.tensor([p[1] for p in pairs], dtype=dtype)
    before = (have.clone(), want.clone())
    if verdicts.within(have, want, rtol, atol):
        assert bool(torch.isclose(have.double(), want.double(), rtol=rtol, atol=atol).all())
    assert torch.equal(have.nan_to_num(7.0), before[0].nan_to_num(7.0))
    assert torch.equal(want.nan_to_num(7.0), before[1].nan_to_num(7.0))


def test_within_tolerance_passes_what_isclose_passes_when_every_value_is_finite() -> None:
    """The fast check is not a stricter rule: finite results within tolerance need no second look."""
    want = torch.tensor([1.0, -2.0, 0.0, 1e6], dtype=torch.float64)
    have = want + torch.tensor([1e-5, -2e-5, 1e-5, 9.0], dtype=torch.float64)
    assert bool(torch.isclose(have, want, rtol=1e-5, atol=1e-5).all())
    assert verdicts.within(have, want, 1e-5, 1e-5)
    assert not verdicts.within(have + torch.tensor([0.0, 0.0, 0.0, 2.0], dtype=torch.float64), want, 1e-5, 1e-5)
