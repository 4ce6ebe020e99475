"""The threads runtime's harness: a case's student threads in one process, a seeded arrival order,
and a clear verdict for each way they can fail to finish (run here in-process, this file standing
for the student's code; the sandboxed end-to-end runs are HW12's fidelity corpus)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from grader.runtimes import StuckThreads
from grader.runtimes.threads import harness

HERE = str(Path(__file__).parent)


def test_results_come_back_in_thread_order_whatever_the_arrival_order() -> None:
    arrived: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            arrived.append(i)
        return i * i

    order = harness.arrival_order(6, 7)
    results = harness.run([lambda i=i: work(i) for i in range(6)], order=order, timeout_s=10, sandbox=HERE)
    assert results == [0, 1, 4, 9, 16, 25]
    assert arrived == order != sorted(arrived)  # staggered in the order given


def test_threads_that_meet_at_a_barrier_reach_it_in_the_order_given() -> None:
    arrived: list[int] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        arrived.append(i)  # as the handout's context appends to its shared buffer
        barrier.wait()  # the next thread begins once this one waits here

    for order in harness.arrival_orders(8, 1, 5):
        arrived.clear()
        harness.run([lambda i=i: work(i) for i in range(8)], order=order, timeout_s=10, sandbox=HERE)
        assert arrived == order


def test_the_arrival_order_is_seeded_and_never_rank_order() -> None:
    assert harness.arrival_order(5, 3) == harness.arrival_order(5, 3)
    assert all(harness.arrival_order(n, seed) != list(range(n)) for n in range(2, 9) for seed in range(50))
    assert harness.arrival_order(1, 0) == [0]


def test_a_cases_rounds_come_in_orders_no_fixed_schedule_predicts() -> None:
    """Several orders a case, never rank order, and from 3 threads on one at least that is neither
    rank order reversed nor rotated: a context that undoes one such schedule still meets another."""
    for n in range(3, 9):
        for seed in range(200):
            orders = harness.arrival_orders(n, seed, 3)
            assert orders == harness.arrival_orders(n, seed, 3) and len(orders) == 3
            assert all(sorted(o) == list(range(n)) != o for o in orders)
            rotations = [[(i + k) % n for i in range(n)] for k in range(n)]
            assert any(o != list(range(n))[::-1] and o not in rotations for o in orders)
    assert harness.arrival_orders(2, 0, 3) == [[1, 0]] * 3  # the only order of two that is not rank order
    drawn = {tuple(map(tuple, harness.arrival_orders(4, seed, 3))) for seed in range(50)}
    assert len(drawn) > 40  # the seed decides: another case's (another secret's) rounds come otherwise


def test_an_order_that_is_no_permutation_of_the_threads_is_refused() -> None:
    with pytest.raises(ValueError, match="is not an order of 2 threads"):
        harness.run([lambda: None, lambda: None], order=[0, 0], timeout_s=10, sandbox=HERE)


def test_a_lock_never_released_is_a_deadlock_before_the_timeout_naming_each_threads_line() -> None:
    lock = threading.Lock()

    def work() -> None:
        with lock:
            lock.acquire()  # the second acquire of a plain Lock never returns  # stuck here

    try:
        with pytest.raises(StuckThreads) as info:
            harness.run([work, work], order=[1, 0], timeout_s=30, sandbox=HERE)
        message = str(info.value)
        # "deadlock", not "timed out after 30 s": seen stuck and said so, not waited out
        assert message.startswith("deadlock") and "thread 0 at" in message and "thread 1 at" in message
        assert "test_threads_runtime.py:" in message and "in work" in message
    finally:
        lock.release()  # free the threads this test left stuck


def test_a_barrier_nobody_else_reaches_is_a_hang_that_says_it_waits_in_the_barrier() -> None:
    barrier = threading.Barrier(3)  # only two threads come

    def waits() -> None:
        barrier.wait()

    try:
        with pytest.raises(StuckThreads, match=r"in waits \(waiting in wait\)"):
            harness.run([waits, waits], order=[1, 0], timeout_s=30, sandbox=HERE)
    finally:
        barrier.abort()


def test_a_broken_barrier_is_the_students_exception() -> None:
    barrier = threading.Barrier(2)

    def impatient() -> None:
        barrier.wait(timeout=0.01)

    with pytest.raises(threading.BrokenBarrierError):
        harness.run([impatient, lambda: time.sleep(0.5)], order=[1, 0], timeout_s=30, sandbox=HERE)


def test_an_exception_in_one_thread_wins_over_the_threads_left_waiting_for_it() -> None:
    barrier = threading.Barrier(2)

    def waits() -> None:
        barrier.wait()

    def fails() -> None:
        raise KeyError("gather0")

    try:
        with pytest.raises(KeyError, match="gather0"):
            harness.run([waits, fails], order=[1, 0], timeout_s=30, sandbox=HERE)
    finally:
        barrier.abort()


def test_a_thread_left_running_after_the_case_is_a_hang() -> None:
    stop = threading.Event()

    def leaves_a_thread() -> None:
        threading.Thread(target=stop.wait, daemon=True).start()

    try:
        with pytest.raises(StuckThreads, match="left running after the case"):
            harness.run([leaves_a_thread], order=[0], timeout_s=30, sandbox=HERE)
    finally:
        stop.set()


def test_an_exception_a_thread_pool_keeps_in_a_future_is_still_the_students() -> None:
    """The handout's driver runs each rank in a thread pool: a rank that raises leaves its exception
    in a future nobody reads while the other ranks wait for it at a barrier."""
    from concurrent.futures import ThreadPoolExecutor

    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            if r == 1:
                raise ValueError("rank 1's layer")
            barrier.wait()
        except ValueError as exc:
            failures.append(exc)
            raise

    def driver() -> None:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for future in [pool.submit(rank, r) for r in range(2)]:
                future.result()

    try:
        with pytest.raises(ValueError, match="rank 1's layer"):
            harness.run([driver], order=[0], timeout_s=30, sandbox=HERE, failures=failures)
    finally:
        barrier.abort()


def test_the_harness_reads_other_threads_frames_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collection inside ``sys._current_frames()`` can deadlock it against a thread being started
    (python/cpython#106883; an HW12 case hung for its budget 1 grading in 10 under contention): the
    harness polls frames only with the collector off, and leaves it as it found it."""
    import gc
    import sys

    seen: list[bool] = []
    frames = sys._current_frames

    def recorded() -> dict:
        seen.append(gc.isenabled())
        return frames()

    monkeypatch.setattr(sys, "_current_frames", recorded)
    barrier = threading.Barrier(3)
    for collecting in (True, False):
        (gc.enable if collecting else gc.disable)()
        try:
            harness.run([barrier.wait] * 3, order=[2, 0, 1], timeout_s=10, sandbox=HERE)
            assert gc.isenabled() is collecting
        finally:
            gc.enable()
    assert seen and not any(seen)


def test_of_several_threads_that_raise_the_lowest_numbered_ones_exception_is_the_cases() -> None:
    """Thread 1 raises first in time, thread 0 50 ms later: the case reports thread 0's, whatever came
    first (in the handout's template thread 0's ``KeyError`` and the others' ``None`` race)."""
    barrier = threading.Barrier(2)

    def work(i: int) -> None:
        barrier.wait()
        if i == 0:
            time.sleep(0.05)
            raise KeyError("thread 0")
        raise ValueError("thread 1")

    for order in ([0, 1], [1, 0]):
        with pytest.raises(KeyError, match="thread 0"):
            harness.run([lambda i=i: work(i) for i in range(2)], order=order, timeout_s=10, sandbox=HERE)


def test_a_broken_barrier_is_reported_after_the_exception_that_broke_it() -> None:
    """Thread 1 aborts the barrier thread 0 waits at and raises 100 ms later: thread 0's
    ``BrokenBarrierError``, first in time and the lower thread, is the consequence; thread 1's is the case's."""
    barrier = threading.Barrier(2)

    def work(i: int) -> None:
        if i == 0:
            barrier.wait()
        barrier.abort()
        time.sleep(0.1)
        raise ValueError("thread 1 broke it")

    with pytest.raises(ValueError, match="thread 1 broke it"):
        harness.run([lambda i=i: work(i) for i in range(2)], order=[0, 1], timeout_s=10, sandbox=HERE)


def test_a_thread_that_raises_before_the_next_begins_does_not_stop_the_next_from_raising() -> None:
    """Thread 1 arrives first and raises at once; thread 0, which would begin only then, raises too and is
    the lower thread: the case reports it, as it would had both begun together."""

    def work(i: int) -> None:
        raise KeyError("thread 0") if i == 0 else ValueError("thread 1")

    with pytest.raises(KeyError, match="thread 0"):
        harness.run([lambda i=i: work(i) for i in range(2)], order=[1, 0], timeout_s=10, sandbox=HERE)


def test_a_thread_that_waits_in_threading_a_moment_before_it_raises_is_not_taken_for_one_that_waits_for_ever() -> None:
    """Thread 1 raises at once; thread 0 is in ``threading`` (a timed wait of 20 ms, as a thread just let
    through a barrier still is) and then raises: it is not counted as waiting for thread 1, and its
    exception, the lower thread's, is the case's."""
    pause = threading.Event()

    def work(i: int) -> None:
        if i == 0:
            pause.wait(0.02)
            raise KeyError("thread 0")
        raise ValueError("thread 1")

    with pytest.raises(KeyError, match="thread 0"):
        harness.run([lambda i=i: work(i) for i in range(2)], order=[0, 1], timeout_s=10, sandbox=HERE)
