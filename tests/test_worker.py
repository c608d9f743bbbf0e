"""sqlq.worker: the claim loop, heartbeats, time limits, stopping, and real processes.

Leases here are 0.5 to 1 s so that everything about them happens within a few
seconds; the real-process tests run the handlers of tests/runner_handlers.py.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from databases import cli_options, queue_options, sqlite_only, sqlite_path

import sqlq
from sqlq.contract import Cancel
from sqlq.errors import Busy, InvalidConfig
from sqlq.sqlite.driver import dbapi
from sqlq.testing import ManualClock
from sqlq.worker import Worker, WorkerStats, resolve_target

TESTS = Path(__file__).resolve().parent
HANDLERS = "runner_handlers:handle"


@pytest.fixture
def open_queue(queue_url: str) -> Iterator[Callable[..., sqlq.Queue]]:
    """open_queue(lease_seconds=1.0, max_attempts=5, **options) -> a Queue on the test's
    database, of each durable kind (``options``: more arguments of Queue, such as ``clock``).

    Each call opens another Queue object on the same database, as another process would.
    """
    opened: list[sqlq.Queue] = []

    def make(lease_seconds: float = 1.0, max_attempts: int = 5, **options: Any) -> sqlq.Queue:
        queue = sqlq.Queue(
            queue_url,
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            **queue_options(queue_url),
            **options,
        )
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close()


def _in_thread(worker: Worker, **options: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``worker.run(**options)`` in a thread; the list gets its result (or exception)."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(worker.run(**options))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


# --- in one process ------------------------------------------------------------------


def _check_timed_out_then_completed(
    queue: sqlq.Queue, out: list[WorkerStats], attempts: list[tuple[int, float]]
) -> None:
    """Task "slow" was failed at its 2.5 s time limit on attempt 1, and completed on
    attempt 2 (claimed at 2.5 s)."""
    assert out == [WorkerStats(claimed=2, completed=1, timed_out=1)]
    assert attempts == [(1, 0.0), (2, 2.5)]
    info = queue.info("slow")
    assert info is not None
    assert (info.state, info.attempts) == ("COMPLETED", 2)
    assert info.last_error == "time limit of 2.5s exceeded"


def _count_beats(queue: sqlq.Queue, clock: ManualClock) -> list[float]:
    """The worker's heartbeats on ``queue``, as they happen: the clock's time of each one."""
    beats: list[float] = []
    heartbeat = queue.heartbeat

    def counting_heartbeat(*args: Any, **kwargs: Any) -> Any:
        beats.append(clock.monotonic())
        return heartbeat(*args, **kwargs)

    queue.heartbeat = counting_heartbeat  # type: ignore[method-assign]
    return beats


def test_drains_the_queue_with_threads_and_retries_failures(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    queue = open_queue(lease_seconds=1.0, max_attempts=3)
    queue.add_many([(f"t{i}", {"n": i}) for i in range(30)] + [("bad", {"n": -1})])
    seen: list[int] = []
    lock = threading.Lock()
    running = peak = 0

    def handler(payload: dict[str, int]) -> None:
        nonlocal running, peak
        with lock:
            seen.append(payload["n"])
            running += 1
            peak = max(peak, running)
        try:
            if payload["n"] == -1:
                raise ValueError("no good: -1")
            time.sleep(0.02)
        finally:
            with lock:
                running -= 1

    before = signal.getsignal(signal.SIGTERM)
    stats = Worker(queue, handler, concurrency=3).run(stop_when_idle=True)

    assert signal.getsignal(signal.SIGTERM) is before  # restored
    assert sorted(n for n in seen if n >= 0) == list(range(30))  # each handled once
    assert seen.count(-1) == 3
    assert stats == WorkerStats(claimed=33, completed=30, failed=3)
    assert 2 <= peak <= 3
    assert queue.counts() == {
        "WAITING": 0,
        "AVAILABLE": 0,
        "RESERVED": 0,
        "COMPLETED": 30,
        "DEAD": 1,
        "CANCELLED": 0,
    }
    bad = queue.info("bad")
    assert bad is not None
    assert (bad.state, bad.attempts) == ("DEAD", 3)
    assert bad.last_error == "ValueError: no good: -1"
    warnings = _messages(caplog, logging.WARNING)
    failed = [m for m in warnings if "task_id=bad" in m]
    assert [m.split(" task_id")[0] for m in failed] == ["task failed", "task failed", "task dead"]
    assert [re.search(r"outcome=(\w+)", m)[1] for m in failed] == ["AVAILABLE", "AVAILABLE", "DEAD"]
    assert all('error="ValueError: no good: -1"' in m for m in failed)
    assert "attempt=3 " in failed[2]
    assert not _messages(caplog, logging.ERROR)  # a failing handler is not a worker error
    assert any("worker started" in m for m in _messages(caplog, logging.INFO))


def test_heartbeats_keep_a_long_handler_s_lease_one_beat_per_period(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """A handler four leases long keeps its lease: the worker extends it once every
    lease_seconds / 3, no more and no less (time moved by the test's clock)."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=3.0, clock=clock.time)
    queue.add("long")
    beats = _count_beats(queue, clock)
    started, finish = threading.Event(), threading.Event()

    def handler(payload: None) -> None:
        started.set()
        assert finish.wait(30)

    thread, out = _in_thread(Worker(queue, handler, clock=clock), stop_when_idle=True)
    assert started.wait(10)
    # Two threads wait on the clock: the claim loop (for a free slot) and the
    # heartbeat thread (for the next beat); each step runs the next beat.
    steps = [clock.step(2) for _ in range(12)]
    clock.wait_for_sleepers(2)  # the last beat is done
    finish.set()
    thread.join(10)
    assert steps == [float(n) for n in range(1, 13)]
    assert beats == steps
    assert out == [WorkerStats(claimed=1, completed=1)]
    info = queue.info("long")
    assert info is not None
    assert (info.state, info.attempts, info.last_error) == ("COMPLETED", 1, None)


def test_a_lease_s_first_heartbeat_counts_from_before_its_claim(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose call returns 2.5 s of the clock after its transaction's time (a slow
    commit on a loaded machine): the lease (3 s) has only 0.5 s left, so its first
    heartbeat, due a heartbeat (1 s) after the call began, comes at once, not a
    heartbeat after the call returned (by then the lease would have run out)."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=3.0, clock=clock.time)
    queue.add("long")
    beats = _count_beats(queue, clock)
    settle_and_claim = queue.settle_and_claim

    def returns_late(*args: Any, **kwargs: Any) -> Any:
        answer = settle_and_claim(*args, **kwargs)
        if answer[2]:
            clock.advance(2.5)
        return answer

    monkeypatch.setattr(queue, "settle_and_claim", returns_late)
    started, finish = threading.Event(), threading.Event()

    def handler(payload: None) -> None:
        started.set()
        assert finish.wait(30)

    claimed_at = clock.monotonic()
    thread, out = _in_thread(Worker(queue, handler, clock=clock), stop_when_idle=True)
    try:
        assert started.wait(10)
        _wait_for(lambda: beats, 10, "the first heartbeat")
        assert beats == [claimed_at + 2.5]
    finally:
        finish.set()
    thread.join(10)
    assert out == [WorkerStats(claimed=1, completed=1)]


def test_a_stale_worker_cannot_complete(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """Worker A's heartbeat (1 s) comes after its lease (0.5 s) ran out; worker B
    takes the task and completes it; A's heartbeat finds the lease lost, and A's
    completion is refused."""
    caplog.set_level(logging.INFO, logger="sqlq.worker")
    clock = ManualClock()
    first = open_queue(lease_seconds=0.5, clock=clock.time)
    second = open_queue(lease_seconds=0.5, clock=clock.time)
    first.add("t", payload="work")
    started, finish = threading.Event(), threading.Event()
    handled: list[str] = []

    def stale(payload: str) -> None:
        handled.append("A")
        started.set()
        assert finish.wait(30)

    worker_a = Worker(first, stale, heartbeat=1.0, clock=clock)
    thread, out = _in_thread(worker_a, stop_when_idle=True)
    assert started.wait(10)
    clock.advance(0.6)  # A's lease runs out
    stats_b = Worker(second, lambda p: handled.append("B"), clock=clock).run(stop_when_idle=True)
    assert clock.step(2) == 1.0  # A's first heartbeat
    clock.wait_for_sleepers(2)  # done: it found the lease lost
    finish.set()
    thread.join(10)

    assert stats_b == WorkerStats(claimed=1, completed=1)
    assert out == [WorkerStats(claimed=1, lost=1)]
    assert handled == ["A", "B"]
    info = second.info("t")
    assert info is not None
    assert (info.state, info.attempts, info.last_error) == ("COMPLETED", 2, "lease expired")
    warnings = _messages(caplog, logging.WARNING)
    assert any("leases will run out between heartbeats" in m for m in warnings)
    assert any(m.startswith("task lease lost task_id=t attempt=1 token=") for m in warnings)
    assert any(m.startswith("task lost task_id=t ") and "refused=completion" in m for m in warnings)


def test_a_handler_that_raises_after_its_lease_was_lost_leaves_the_task_alone(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's lease runs out while its handler runs and another worker takes
    the task; then the handler raises.  The failure carries the lease's token, so
    it is refused and counted as lost: the other worker's lease, the attempts and
    the last error stay as they were."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=0.5, clock=clock.time)
    other = open_queue(lease_seconds=60.0, clock=clock.time)
    queue.add("t")
    started, finish = threading.Event(), threading.Event()

    def handler(payload: None) -> None:
        started.set()
        assert finish.wait(30)
        raise ValueError("too late")

    worker = Worker(queue, handler, heartbeat=1.0, clock=clock)
    thread, out = _in_thread(worker, stop_when_idle=True)
    assert started.wait(10)
    clock.advance(0.6)  # the lease (0.5 s) runs out before the first heartbeat (1 s)
    lease = other.claim()
    assert lease is not None and lease.attempt == 2
    finish.set()
    thread.join(10)

    assert out == [WorkerStats(claimed=1, lost=1)]
    info = other.info("t")
    assert info is not None
    assert (info.state, info.token, info.attempts, info.last_error) == (
        "RESERVED",
        lease.token,
        2,
        "lease expired",
    )
    assert any(
        m.startswith("task lost task_id=t ") and "refused=failure" in m
        for m in _messages(caplog, logging.WARNING)
    )


def test_a_handler_long_past_its_time_limit_is_said_once_to_hold_its_slot(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """Its task was failed at the limit, but its thread (or a coroutine that swallows its
    cancellation) keeps the slot: the worker says so once, at twice the limit."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=30.0, max_attempts=3, clock=clock.time)
    queue.add("stuck")
    started, finish = threading.Event(), threading.Event()

    def handler(_payload: object) -> None:
        started.set()
        assert finish.wait(30)

    worker = Worker(queue, handler, time_limit=2.0, clock=clock)
    thread, out = _in_thread(worker, stop_when_idle=True)
    assert started.wait(10)
    clock.wait_for_deadline(2.0)  # the monitor has armed the time limit (not only its beat)
    assert clock.step(2) == 2.0  # the time limit: failed
    clock.wait_for_deadline(4.0)
    assert clock.step(2) == 4.0  # twice the limit: said, once
    clock.wait_for_sleepers(2)  # the monitor waits again, with nothing more due
    finish.set()
    thread.join(10)
    said = [m for m in _messages(caplog, logging.WARNING) if m.startswith("task still running")]
    assert len(said) == 1 and "task_id=stuck " in said[0] and "slot stays taken" in said[0]
    assert out == [WorkerStats(claimed=2, completed=1, timed_out=1)]


def test_time_limit_fails_the_task_and_the_late_result_is_refused(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sqlq.worker")
    clock = ManualClock()
    queue = open_queue(lease_seconds=3.0, max_attempts=3, clock=clock.time)
    queue.add("slow")
    attempts: list[tuple[int, float]] = []
    started, finish = threading.Event(), threading.Event()

    def handler(lease: sqlq.Lease) -> None:
        attempts.append((lease.attempt, clock.monotonic()))
        if lease.attempt == 1:
            started.set()
            assert finish.wait(30)

    worker = Worker(queue, handler, time_limit=2.5, with_lease=True, clock=clock)
    thread, out = _in_thread(worker, stop_when_idle=True)
    assert started.wait(10)
    assert [clock.step(2) for _ in range(3)] == [1.0, 2.0, 2.5]  # two heartbeats, the limit
    clock.wait_for_sleepers(2)  # the task has been failed
    info = queue.info("slow")
    assert info is not None
    assert (info.state, info.last_error) == ("AVAILABLE", "time limit of 2.5s exceeded")
    assert attempts == [(1, 0.0)]  # attempt 1 keeps the only slot until its handler returns
    finish.set()
    thread.join(10)

    _check_timed_out_then_completed(queue, out, attempts)
    warnings = _messages(caplog, logging.WARNING)
    assert any(
        m.startswith("task failed task_id=slow attempt=1 ")
        and 'error="time limit of 2.5s exceeded"' in m
        and "outcome=AVAILABLE" in m
        for m in warnings
    )
    assert any(m.startswith("task result refused task_id=slow attempt=1 ") for m in warnings)


# --- what workers log --------------------------------------------------------------------


def _records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(event + " ")]


def test_task_events_are_one_line_of_fields_with_the_same_values_in_extra(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    queue = open_queue(lease_seconds=30.0, max_attempts=1)
    queue.add_many(["plain", ("with space", {"fail": 'a "quoted"\nline'})])

    def handler(payload: dict[str, str] | None) -> None:
        if payload:
            raise ValueError(payload["fail"])

    Worker(queue, handler).run(stop_when_idle=True)
    [done] = _records(caplog, "task completed")
    assert re.fullmatch(
        r"task completed task_id=plain attempt=1 token=\d+ duration=\d+\.\d{3}s outcome=COMPLETED",
        done.getMessage(),
    )
    assert (done.levelno, done.task_id, done.attempt, done.outcome) == (  # type: ignore[attr-defined]
        logging.DEBUG,
        "plain",
        1,
        "COMPLETED",
    )
    assert f"token={done.token} " in done.getMessage()  # type: ignore[attr-defined]
    assert isinstance(done.duration, float)  # type: ignore[attr-defined]
    [dead] = _records(caplog, "task dead")
    message = dead.getMessage()
    assert "\n" not in message and dead.levelno == logging.WARNING
    assert message.startswith('task dead task_id="with space" attempt=1 ')
    fields = dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', message))
    assert json.loads(fields["error"]) == dead.error == 'ValueError: a "quoted"\nline'  # type: ignore[attr-defined]
    assert fields["outcome"] == dead.outcome == "DEAD"  # type: ignore[attr-defined]
    assert _records(caplog, "task claimed")  # claims too, at DEBUG


@sqlite_only  # the write lock held by another connection is SQLite's
def test_the_summary_comes_every_interval_of_the_workers_clock_and_reads_only(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture, queue_url: str
) -> None:
    """One INFO line per summary_every of the worker's clock: the outcomes since the
    last line, tasks per second, the backlog and the age of the oldest AVAILABLE
    task, read while another connection holds the write lock (no write transaction)."""
    caplog.set_level(logging.INFO, logger="sqlq.worker")
    clock = ManualClock()
    queue = open_queue(lease_seconds=60.0, max_attempts=1, clock=clock.time)
    queue.add_many(
        ["ok1", ("bad", {"fail": True}), "ok2", ("blocker", {"block": True}), "rest1", "rest2"]
    )
    blocking, finish = threading.Event(), threading.Event()

    def handler(payload: dict[str, bool] | None) -> None:
        if payload and payload.get("fail"):
            raise ValueError("bad")
        if payload and payload.get("block"):
            blocking.set()
            assert finish.wait(30)

    # No prefetch: each outcome is reported as the next task is claimed, one at a time.
    worker = Worker(queue, handler, clock=clock, summary_every=10.0, prefetch=0)
    thread, out = _in_thread(worker)
    assert blocking.wait(10)
    writer = dbapi.connect(sqlite_path(queue_url), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        clock.advance(10)
        _wait_for(lambda: bool(_records(caplog, "worker summary")), 10, "the summary")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    [summary] = _records(caplog, "worker summary")
    assert summary.levelno == logging.INFO
    assert summary.getMessage() == (
        "worker summary completed=2 failed=1 dead=1 lost=0 tasks_per_second=0.3 backlog=2 "
        "oldest_available=10.000s interval=10.000s"
    )
    assert (summary.completed, summary.backlog) == (2, 2)  # type: ignore[attr-defined]
    finish.set()
    _wait_for(lambda: queue.counts()["COMPLETED"] == 5, 10, "the rest")
    clock.advance(10)
    _wait_for(lambda: len(_records(caplog, "worker summary")) == 2, 10, "the second summary")
    second = _records(caplog, "worker summary")[1].getMessage()
    assert second.startswith("worker summary completed=3 failed=0 dead=0 lost=0 ")
    assert "backlog=0 oldest_available=- " in second
    worker.stop()
    thread.join(10)
    assert out and isinstance(out[0], WorkerStats)


def test_stop_when_idle_says_what_it_leaves_and_stop_when_drained_waits_for_it(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    clock = ManualClock()
    other = open_queue(lease_seconds=60.0, clock=clock.time)
    queue = open_queue(lease_seconds=60.0, clock=clock.time)
    queue.add("held")
    queue.add("later", delay=5)
    held = other.claim()
    assert held is not None
    assert Worker(queue, lambda p: None, clock=clock).run(stop_when_idle=True) == WorkerStats()
    stopped = [m for m in _messages(caplog, logging.INFO) if m.startswith("worker stopped")]
    assert stopped[-1].endswith(
        "; left behind: 1 RESERVED (leases of other workers), 1 WAITING (for a delay or a "
        "retry); stop_when_drained (sqlq worker --drain) waits for them"
    )

    caplog.clear()
    handled: list[str] = []
    worker = Worker(queue, lambda p: handled.append("x"), clock=clock)
    thread, out = _in_thread(worker, stop_when_drained=True)
    _wait_for(lambda: any("waiting for 1 RESERVED" in m for m in _messages(caplog, 10)), 10, "idle")
    assert other.complete("held", token=held.token)
    clock.advance(5)  # "later" wakes
    _wait_for(lambda: not thread.is_alive(), 10, "the drained worker to return")
    assert out == [WorkerStats(claimed=1, completed=1)] and handled == ["x"]
    assert queue.counts()["COMPLETED"] == 2
    stopped = [m for m in _messages(caplog, logging.INFO) if m.startswith("worker stopped")]
    assert stopped[-1].endswith("; nothing left RESERVED or WAITING")


def test_tasks_a_groups_rate_holds_back_are_left_behind_when_idle_and_awaited_when_drained(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    # stop_when_drained returned with tasks still AVAILABLE, held back by their group's
    # rate, saying "nothing left RESERVED or WAITING" (and so did sqlq worker --drain, on
    # the README's example of limits, and on a paused queue).
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    clock = ManualClock()
    queue = open_queue(lease_seconds=60.0, clock=clock.time)
    queue.set_limit("g", rate=1, per=10)
    queue.add_many(["a", "b"], group="g")
    done = WorkerStats(claimed=1, completed=1)
    assert Worker(queue, lambda p: None, clock=clock).run(stop_when_idle=True) == done
    stopped = [m for m in _messages(caplog, logging.INFO) if m.startswith("worker stopped")]
    assert stopped[-1].endswith(
        "; left behind: 1 AVAILABLE (held back by a pause or their groups' limits), "
        "0 RESERVED (leases of other workers), 0 WAITING (for a delay or a retry); "
        "stop_when_drained (sqlq worker --drain) waits for them"
    )

    caplog.clear()
    worker = Worker(queue, lambda p: None, clock=clock)
    thread, out = _in_thread(worker, stop_when_drained=True)
    _wait_for(
        lambda: any("waiting for 1 AVAILABLE" in m for m in _messages(caplog, 10)), 10, "idle"
    )
    clock.advance(10)  # the rate lets "b" start
    _wait_for(lambda: not thread.is_alive(), 10, "the drained worker to return")
    assert out == [done] and queue.counts()["COMPLETED"] == 2


def test_stop_lets_short_handlers_finish_and_releases_the_rest(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    queue = open_queue(lease_seconds=10.0, clock=clock.time)
    queue.add("quick")
    queue.add("stuck")
    both = threading.Barrier(3)
    go = {"quick": threading.Event(), "stuck": threading.Event()}

    def handler(lease: sqlq.Lease) -> None:
        both.wait(10)
        assert go[lease.task_id].wait(30)

    worker = Worker(queue, handler, concurrency=2, grace=1.0, with_lease=True, clock=clock)
    thread, out = _in_thread(worker)
    both.wait(10)
    worker.stop()
    go["quick"].set()
    _wait_for(lambda: worker.stats.completed == 1, 10, "the quick task")
    clock.advance(1.0)  # the grace period is over
    thread.join(10)

    assert out == [WorkerStats(claimed=2, completed=1, released=1)]
    quick, stuck = queue.info("quick"), queue.info("stuck")
    assert quick is not None and stuck is not None
    assert (quick.state, quick.attempts) == ("COMPLETED", 1)
    assert (stuck.state, stuck.attempts) == ("AVAILABLE", 0)  # the attempt is not counted
    go["stuck"].set()  # the abandoned handler returns: its result is ignored
    _wait_for(
        lambda: any("result is ignored" in m for m in _messages(caplog, logging.WARNING)),
        10,
        "the abandoned handler",
    )
    assert queue.status("stuck") == "AVAILABLE"


def test_a_task_asked_to_stop_and_released_at_shutdown_is_counted_cancelled(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """A running task that ``cancel`` asked to stop, whose handler is still running
    when the grace ends: the release ends it CANCELLED (not back in line), and the
    worker counts it so, whether or not a heartbeat told it of the request."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=10.0, clock=clock.time)
    queue.add("stuck")
    started, go = threading.Event(), threading.Event()

    def handler(payload: Any) -> None:
        started.set()
        assert go.wait(30)

    worker = Worker(queue, handler, grace=1.0, clock=clock)
    thread, out = _in_thread(worker)
    try:
        assert started.wait(10)
        assert queue.cancel("stuck") == Cancel.STOPPING
        worker.stop()
        clock.advance(1.0)  # the grace period is over
        thread.join(10)
    finally:
        go.set()
    assert out == [WorkerStats(claimed=1, cancelled=1)]
    assert queue.status("stuck") == "CANCELLED"


def test_a_report_that_meets_busy_as_the_worker_stops_is_retried(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop (grace 0) comes while a finished handler's completion meets Busy: the
    completion is still retried and made (within RELEASE_WAIT), not abandoned to
    let its lease run out and the task run again."""
    queue = open_queue()
    queue.add("t")
    worker = Worker(queue, lambda p: None, grace=0.0)
    settle_and_claim = queue.settle_and_claim
    busy_once = [Busy("the write lock is held elsewhere")]

    def stopped_midway(*args: Any, **kwargs: Any) -> Any:
        if busy_once and kwargs["completed"]:
            worker.stop()  # SIGTERM, say, while the call waits for the lock
            raise busy_once.pop()
        return settle_and_claim(*args, **kwargs)

    monkeypatch.setattr(queue, "settle_and_claim", stopped_midway)
    stats = worker.run(stop_when_idle=True)  # returns even if nothing stops it
    assert not busy_once, "the completion did not go through settle_and_claim"
    assert stats == WorkerStats(claimed=1, completed=1)
    assert queue.status("t") == "COMPLETED"


def test_sigterm_in_the_main_thread_stops_the_worker(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    queue = open_queue(lease_seconds=1.0)
    queue.add("t", payload=None)
    started, unblock = threading.Event(), threading.Event()

    def handler(payload: None) -> None:
        started.set()
        unblock.wait(10)

    def send() -> None:
        if started.wait(10):  # the worker's signal handlers are installed by now
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    threading.Thread(target=send, daemon=True).start()
    try:
        stats = Worker(queue, handler, grace=0.2).run()
    finally:
        unblock.set()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert stats == WorkerStats(claimed=1, released=1)
    info = queue.info("t")
    assert info is not None
    assert (info.state, info.attempts) == ("AVAILABLE", 0)


def test_idle_waits_double_up_to_poll_max_and_a_new_task_is_taken_at_the_next_poll(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    clock = ManualClock()
    queue = open_queue(clock=clock.time)
    polls: list[float] = []
    ready = queue.ready

    def counting_ready(now: float | None = None) -> bool:
        polls.append(clock.monotonic())
        return ready(now)

    queue.ready = counting_ready  # type: ignore[method-assign]
    settle_and_claim = queue.settle_and_claim
    taken_at: list[float] = []

    def timed_settle_and_claim(*args: Any, **kwargs: Any) -> Any:
        answer = settle_and_claim(*args, **kwargs)
        if answer[2]:  # leases: read in the claim loop's own thread, which is not asleep,
            taken_at.append(clock.monotonic())  # so the clock cannot be stepped meanwhile
        return answer

    queue.settle_and_claim = timed_settle_and_claim  # type: ignore[method-assign]
    handled = threading.Event()
    worker = Worker(
        queue, lambda _payload: handled.set(), poll_min=0.005, poll_max=0.04, clock=clock
    )
    thread, out = _in_thread(worker)
    # The claim loop's idle wait and the heartbeat thread (nothing to do) wait on the clock.
    for _ in range(8):
        clock.step(2)
    clock.wait_for_sleepers(2)  # the last poll is done
    gaps = [b - a for a, b in itertools.pairwise(polls)]
    assert polls[0] == pytest.approx(0.005)
    assert gaps == pytest.approx([0.01, 0.02, 0.04, 0.04, 0.04, 0.04, 0.04])

    added = clock.monotonic()
    queue.add("new")
    # The next poll is the earliest wake-up of the two sleepers, unless the add's
    # announcement (PostgreSQL) has the task claimed before they sleep again.  (The
    # handler's own thread is no sleeper: a time it read could be after this step.)
    clock.step(2)
    assert handled.wait(10)
    worker.stop()
    thread.join(10)
    assert out == [WorkerStats(claimed=1, completed=1)]
    assert len(taken_at) == 1
    assert taken_at[0] - added <= 0.04  # at the next poll, or sooner if announced


def _calls(queue: sqlq.Queue) -> list[tuple[int, int, int]]:
    """Record the worker's settle_and_claim calls on ``queue``: (leases asked for,
    outcomes reported, leases obtained), as each returns."""
    calls: list[tuple[int, int, int]] = []
    settle_and_claim = queue.settle_and_claim

    def recorded(n: int, *args: Any, completed: Any = (), failed: Any = (), **kw: Any) -> Any:
        answer = settle_and_claim(n, *args, completed=completed, failed=failed, **kw)
        calls.append((n, len(completed) + len(failed), len(answer[2])))
        return answer

    queue.settle_and_claim = recorded  # type: ignore[method-assign]
    return calls


def test_a_deep_queue_of_quick_tasks_goes_in_batches_of_concurrency_and_prefetch(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the defaults (one handler, a prefetch of 63): the first claim asks for one
    lease (no handler has returned yet, so nothing tells how long tasks take); once
    one has returned in no time, each transaction reports the whole batch and claims
    the next 64, one commit for 64 tasks."""
    clock = ManualClock()  # the handlers take no time on it: the prefetch is whole
    queue = open_queue()
    queue.add_many([f"t{i}" for i in range(100)])
    calls: Counter[str] = Counter()

    def counted(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return call(*args, **kwargs)

        return wrapper

    for name in ("claim", "complete", "fail", "complete_and_claim", "claim_many"):
        monkeypatch.setattr(queue, name, counted(name, getattr(queue, name)))
    settled = _calls(queue)
    worker = Worker(queue, lambda p: None, clock=clock)
    assert (worker.concurrency, worker.prefetch) == (1, 63)
    stats = worker.run(stop_when_idle=True)
    assert stats == WorkerStats(claimed=100, completed=100)
    assert settled == [(1, 0, 1), (64, 1, 64), (64, 64, 35), (64, 35, 0)]
    assert stats.commits == 4 and not calls  # every report and claim went through settle


def test_tasks_are_not_prefetched_when_handlers_take_long(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """Tasks of 0.5 s (on the worker's clock) with two handlers: the prefetch is cut to
    what the handlers get through in PREFETCH_HORIZON, none, so a task is never held
    waiting while another worker could run it."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=10.0, clock=clock.time)
    queue.add_many([f"t{i}" for i in range(6)])
    settled = _calls(queue)
    lock = threading.Lock()

    def handler(payload: object) -> None:
        with lock:  # (one advance at a time)
            clock.advance(0.5)

    stats = Worker(queue, handler, concurrency=2, clock=clock).run(stop_when_idle=True)
    assert stats == WorkerStats(claimed=6, completed=6)
    assert max(n for n, _, _ in settled) <= 2  # never more than the two handlers
    assert sum(got for _, _, got in settled) == 6


def _behind_a_slow_task(
    queue: sqlq.Queue, clock: ManualClock, then: list[str], **options: Any
) -> tuple[Worker, threading.Thread, list[Any], threading.Event, list[str]]:
    """A worker (one handler, the default prefetch) started on task "first", whose
    handler adds ``then``: claimed together with its report, the handler's mean
    duration 0 on ``clock``, so all of them at once.  Task "slow" blocks until the
    event returned is set (once it has started); the list gets each task handled."""
    queue.add("first")
    release, slow_started = threading.Event(), threading.Event()
    handled: list[str] = []

    def handler(lease: sqlq.Lease) -> None:
        handled.append(lease.task_id)
        if lease.task_id == "first":
            queue.add_many(then)
        if lease.task_id == "slow":
            slow_started.set()
            assert release.wait(30)

    worker = Worker(queue, handler, with_lease=True, clock=clock, **options)
    thread, out = _in_thread(worker)
    assert slow_started.wait(10)
    return worker, thread, out, release, handled


def test_outcomes_behind_a_long_handler_are_reported_within_report_wait(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """One handler, a batch prefetched: "a" returns at once, "slow" then runs on.  The
    outcome of "a" waits for the rest of its batch only REPORT_WAIT of the worker's
    clock, then goes alone (its lease, no longer heartbeated, would otherwise run out
    behind the slow handler and "a" would run again)."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=10.0, clock=clock.time)
    worker, thread, out, release, _ = _behind_a_slow_task(queue, clock, ["a", "slow", "c"])
    try:
        assert queue.status("a") == "RESERVED"  # its outcome waits for its batch...
        clock.wait_for_deadline(clock.monotonic() + sqlq.worker.REPORT_WAIT)
        clock.advance(sqlq.worker.REPORT_WAIT)
        _wait_for(lambda: queue.status("a") == "COMPLETED", 10, "the report of a")
        assert queue.status("slow") == "RESERVED" and queue.status("c") == "RESERVED"
    finally:
        release.set()
    _wait_for(lambda: queue.counts()["COMPLETED"] == 4, 10, "the rest")
    worker.stop()
    thread.join(10)
    assert out == [WorkerStats(claimed=4, completed=4)]


def test_prefetched_leases_are_heartbeated_while_they_wait(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases prefetched behind a handler that runs for three lease lengths are
    extended by the heartbeats as the running one is: none runs out, and each task
    runs once, on its first attempt."""
    monkeypatch.setattr(sqlq.worker.monitor, "BACKLOG_WAIT", math.inf)  # they wait unbounded
    clock = ManualClock()
    queue = open_queue(lease_seconds=1.0, clock=clock.time)
    worker, thread, out, release, handled = _behind_a_slow_task(queue, clock, ["slow", "p1", "p2"])
    try:
        for _ in range(9):  # a heartbeat every 1/3 s: three lease lengths
            clock.step(2)
        clock.wait_for_sleepers(2)  # the last beat is done
        for task in ("p1", "p2"):
            info = queue.info(task)
            assert info is not None and (info.state, info.attempts) == ("RESERVED", 1), info
    finally:
        release.set()
    _wait_for(lambda: queue.counts()["COMPLETED"] == 4, 10, "every task")
    worker.stop()
    thread.join(10)
    assert out == [WorkerStats(claimed=4, completed=4)]
    assert handled == ["first", "slow", "p1", "p2"]


def test_a_prefetched_lease_found_lost_by_a_heartbeat_is_not_run(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease waiting in the backlog that a heartbeat finds gone (here released under
    the worker) is dropped, counted lost, never run under it; the task, back in line,
    is claimed again and runs once."""
    # It waits unbounded: a backlog given back after BACKLOG_WAIT (before the first
    # heartbeat) would never be found lost.
    monkeypatch.setattr(sqlq.worker.monitor, "BACKLOG_WAIT", math.inf)
    clock = ManualClock()
    queue = open_queue(lease_seconds=30.0, clock=clock.time)
    worker, thread, out, release, handled = _behind_a_slow_task(queue, clock, ["slow", "p1"])
    try:
        info = queue.info("p1")
        assert info is not None and info.state == "RESERVED" and info.token is not None
        assert queue.release("p1", info.token)  # the worker's lease is gone
        clock.step(2)  # the first heartbeats: p1's finds it lost
        clock.wait_for_sleepers(2)
        assert "p1" not in handled
    finally:
        release.set()
    _wait_for(lambda: queue.counts()["COMPLETED"] == 3, 10, "every task")
    worker.stop()
    thread.join(10)
    assert out == [WorkerStats(claimed=4, completed=3, lost=1)]
    assert handled == ["first", "slow", "p1"]


def _past_its_time_limit(
    queue: sqlq.Queue, clock: ManualClock, then: list[str]
) -> tuple[Worker, threading.Thread, threading.Event]:
    """_behind_a_slow_task with a time limit of 5 s: "slow" hangs past it, and has
    been failed for it when this returns."""
    worker, thread, _, release, _ = _behind_a_slow_task(queue, clock, then, time_limit=5.0)
    clock.wait_for_deadline(clock.monotonic() + 5.0)
    clock.advance(5.0)
    _wait_for(lambda: worker.stats.timed_out == 1, 10, "the time limit")
    return worker, thread, release


def test_a_handler_past_its_time_limit_gives_the_backlog_behind_it_back(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync handler that hangs past its time limit keeps its slot: the leases
    prefetched behind it are released (attempts not counted) at once, for other
    workers, even with no bound on the backlog's wait."""
    monkeypatch.setattr(sqlq.worker.monitor, "BACKLOG_WAIT", math.inf)
    clock = ManualClock()
    queue = open_queue(lease_seconds=30.0, clock=clock.time)
    worker, thread, release = _past_its_time_limit(queue, clock, ["slow", "p1", "p2"])
    try:
        _wait_for(lambda: queue.status("p2") == "AVAILABLE", 10, "the backlog given back")
        for task in ("p1", "p2"):
            info = queue.info(task)
            assert info is not None and (info.state, info.attempts) == ("AVAILABLE", 0)
    finally:
        release.set()
        worker.stop()
        thread.join(10)


def test_a_slot_past_its_time_limit_is_not_claimed_for(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """One handler, hung past its time limit with nothing prefetched behind it (so no
    backlog went back, and the prefetch still trusts the quick handler before it).
    When the claim loop wakes (its periodic task falls due, and it ticks it), it
    claims nothing: that slot may never be free again, so neither the periodic task
    nor the failed one, back in line, waits behind it.  Once the handler returns,
    both run here."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=30.0, clock=clock.time)
    beat = sqlq.Schedule("beat", every=60)
    worker, thread, _, release, handled = _behind_a_slow_task(
        queue, clock, ["slow"], time_limit=5.0, schedules=[beat]
    )
    try:
        clock.wait_for_deadline(clock.monotonic() + 5.0)
        clock.advance(5.0)
        _wait_for(lambda: worker.stats.timed_out == 1, 10, "the time limit")
        assert queue.status("slow") == "AVAILABLE"  # failed, to be retried
        clock.advance(60.0)  # the schedule's first tick: the claim loop wakes
        _wait_for(lambda: sum(queue.counts().values()) == 3, 10, "the periodic task")
        clock.wait_for_sleepers(2)  # (the claim loop and the monitor are done)
        counts = queue.counts()
        assert (counts["AVAILABLE"], counts["RESERVED"]) == (2, 0), counts
    finally:
        release.set()
    _wait_for(lambda: queue.counts()["COMPLETED"] == 3, 10, "both, once the slot is free")
    worker.stop()
    thread.join(10)
    assert len(handled) == 4 and handled[:2] == ["first", "slow"] and "slow" in handled[2:]
    assert worker.stats == WorkerStats(claimed=4, completed=3, timed_out=1)


def test_a_backlog_that_waits_too_long_goes_back_and_is_not_claimed_again(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """Leases prefetched behind a handler that runs far longer than those before it:
    once the oldest has waited BACKLOG_WAIT of the worker's clock, all are released
    (attempts not counted) for other workers, and the worker, its prefetch now cut
    as if handlers took that long, claims none of them again while its slot is
    taken; once it is free, they run here one by one."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=30.0, clock=clock.time)
    worker, thread, out, release, handled = _behind_a_slow_task(queue, clock, ["slow", "p1", "p2"])
    try:
        assert queue.status("p1") == "RESERVED" and queue.status("p2") == "RESERVED"
        clock.wait_for_deadline(clock.monotonic() + sqlq.worker.monitor.BACKLOG_WAIT)
        clock.advance(sqlq.worker.monitor.BACKLOG_WAIT)
        _wait_for(lambda: queue.counts()["AVAILABLE"] == 2, 10, "the backlog given back")
        clock.advance(1.0)  # (the claim loop's idle polls: it must not claim them)
        clock.wait_for_sleepers(2)
        assert queue.counts()["AVAILABLE"] == 2
        for task in ("p1", "p2"):
            info = queue.info(task)
            assert info is not None and info.attempts == 0  # the attempt did not count
    finally:
        release.set()
    _wait_for(lambda: queue.counts()["COMPLETED"] == 4, 10, "every task")
    worker.stop()
    thread.join(10)
    assert handled == ["first", "slow", "p1", "p2"]
    assert out == [WorkerStats(claimed=6, completed=4, released=2)]


def test_a_prefetched_task_asked_to_stop_is_released_not_run(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease waiting in the backlog whose task ``cancel`` asked to stop (a heartbeat
    tells the worker): when a slot frees, it is released, which ends it CANCELLED,
    and its handler never starts; the task behind it runs."""
    monkeypatch.setattr(sqlq.worker.monitor, "BACKLOG_WAIT", math.inf)  # they wait unbounded
    clock = ManualClock()
    queue = open_queue(lease_seconds=30.0, clock=clock.time)
    worker, thread, out, release, handled = _behind_a_slow_task(queue, clock, ["slow", "p1", "p2"])
    try:
        assert queue.cancel("p1") == Cancel.STOPPING
        clock.step(2)  # the first heartbeats: p1's learns the stop
        clock.wait_for_sleepers(2)
        assert queue.status("p1") == "RESERVED"  # still held, behind the slow handler
    finally:
        release.set()
    _wait_for(lambda: queue.counts()["COMPLETED"] == 3, 10, "every other task")
    worker.stop()
    thread.join(10)
    assert queue.status("p1") == "CANCELLED"
    assert handled == ["first", "slow", "p2"]
    assert out == [WorkerStats(claimed=4, completed=3, cancelled=1)]


def test_a_graceful_stop_gives_prefetched_leases_back_at_once(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """A stop while a handler runs and leases wait behind it: those are released at
    once (their attempts not counted), not held through the grace period; the
    running one finishes within the grace and is completed."""
    caplog.set_level(logging.INFO, logger="sqlq.worker")
    clock = ManualClock()
    queue = open_queue(lease_seconds=60.0, clock=clock.time)
    worker, thread, out, release, _ = _behind_a_slow_task(
        queue, clock, ["slow", "p1", "p2", "p3"], grace=600.0
    )
    try:
        assert queue.counts()["RESERVED"] == 4
        worker.stop()
        _wait_for(lambda: queue.counts()["AVAILABLE"] == 3, 10, "the prefetched leases back")
        assert queue.status("slow") == "RESERVED"  # still running, within its grace
        for task in ("p1", "p2", "p3"):
            info = queue.info(task)
            assert info is not None and info.attempts == 0  # the attempt did not count
    finally:
        release.set()
    thread.join(10)
    assert out == [WorkerStats(claimed=5, completed=2, released=3)]
    assert queue.status("slow") == "COMPLETED"
    released = [r for r in _records(caplog, "task released") if r.levelno == logging.INFO]
    assert len(released) == 3  # not warnings: nothing went wrong


def test_a_lone_task_at_an_idle_worker_is_claimed_and_reported_alone_at_once(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """A worker idle after a deep queue (its prefetch whole) picks up a lone task at its
    next poll, in a claim that asks for BATCH (64) and gets one, and reports it in the next
    transaction at once: no wait for a batch to fill."""
    clock = ManualClock()
    queue = open_queue(clock=clock.time)
    queue.add_many([f"t{i}" for i in range(40)])
    settled = _calls(queue)
    handled = threading.Event()

    def handler(lease: sqlq.Lease) -> None:
        if lease.task_id == "lone":
            handled.set()

    worker = Worker(queue, handler, with_lease=True, poll_max=0.04, clock=clock)
    thread, out = _in_thread(worker)
    _wait_for(lambda: queue.counts()["COMPLETED"] == 40, 10, "the deep queue")
    clock.wait_for_sleepers(2)  # idle: the claim loop polls, the monitor waits
    before = len(settled)
    queue.add("lone")
    while not handled.is_set():
        clock.step(2)  # the next poll (or the announcement) finds it
    # Reported without the clock moving on: no batch to wait for.
    _wait_for(lambda: queue.status("lone") == "COMPLETED", 10, "the lone task's report")
    worker.stop()
    thread.join(10)
    assert out == [WorkerStats(claimed=41, completed=41)]
    batch = sqlq.worker.BATCH
    lone = [call for call in settled[before:] if call != (batch, 0, 0)]
    assert lone == [(batch, 0, 1), (batch, 1, 0)]


def test_outcomes_that_come_while_a_commit_is_in_flight_share_the_next_commit(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: four slots, no prefetch, four tasks.  The call that reports the first outcome
    is held until the three other handlers have returned; their outcomes all go in
    the next call, one commit for three tasks.  No outcome is counted (acknowledged)
    before the call that reports it has returned, and no call asks for more leases
    than the slots it has."""
    queue = open_queue()
    queue.add_many([f"t{i}" for i in range(4)])
    first_reported = threading.Event()

    def handler(lease: sqlq.Lease) -> None:
        if lease.task_id != "t0":
            assert first_reported.wait(10)

    worker = Worker(queue, handler, concurrency=4, with_lease=True, prefetch=0)
    settle_and_claim = queue.settle_and_claim
    calls: list[tuple[int, int]] = []  # (leases asked for, completions reported)

    def held(n: int, *args: Any, completed: Any = (), **kwargs: Any) -> Any:
        if completed and len(calls) == 1:
            first_reported.set()
            _wait_for(lambda: len(worker._outcomes) == 3, 10, "the other three outcomes")
        assert worker.stats.completed == sum(done for _, done in calls)
        calls.append((n, len(completed)))
        return settle_and_claim(n, *args, completed=completed, **kwargs)

    monkeypatch.setattr(queue, "settle_and_claim", held)
    stats = worker.run(stop_when_idle=True)
    assert stats == WorkerStats(claimed=4, completed=4)
    # Claim four; report one (its slot may take one lease); report three (four slots).
    assert calls == [(4, 0), (1, 1), (4, 3)]
    assert stats.commits == 3


def test_busy_is_logged_and_retried(
    open_queue: Callable[..., sqlq.Queue],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    queue = open_queue()
    queue.add("t")
    settle_and_claim = queue.settle_and_claim
    fails = Counter({"claim": 2, "report": 1})

    def flaky(*args: Any, **kwargs: Any) -> Any:
        name = "report" if kwargs["completed"] else "claim"
        if fails[name] > 0:
            fails[name] -= 1
            raise Busy("the write lock was not free within busy_timeout")
        return settle_and_claim(*args, **kwargs)

    monkeypatch.setattr(queue, "settle_and_claim", flaky)
    stats = Worker(queue, lambda p: None).run(stop_when_idle=True)
    assert stats == WorkerStats(claimed=1, completed=1)
    assert +fails == Counter()  # every Busy was met
    assert queue.status("t") == "COMPLETED"
    # Every retry is logged; the first as a warning, the repeats (within
    # REPEAT_WARNING seconds) at DEBUG, so a long outage does not flood the log.
    assert sum("Busy" in m for m in _messages(caplog, logging.DEBUG)) == 2
    assert sum("Busy" in m for m in _messages(caplog, logging.WARNING)) == 1
    assert not _messages(caplog, logging.ERROR)


def test_an_unexpected_error_is_logged_and_raised(
    open_queue: Callable[..., sqlq.Queue],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = open_queue()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(queue, "settle_and_claim", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        Worker(queue, lambda p: None).run(stop_when_idle=True)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None


def test_settings_are_checked(open_queue: Callable[..., sqlq.Queue]) -> None:
    queue = open_queue()
    bad: list[dict[str, Any]] = [
        {"concurrency": 0},
        {"concurrency": True},
        {"concurrency": 1.5},
        {"heartbeat": 0},
        {"heartbeat": math.nan},
        {"time_limit": -1},
        {"time_limit": math.inf},
        {"grace": -0.1},
        {"grace": 2e9},  # beyond any wait a queue can be told to keep
        {"poll_min": 0},
        {"poll_min": 0.5, "poll_max": 0.1},
        {"with_lease": 1},
        {"clock": time},  # no wait()
    ]
    for options in bad:
        with pytest.raises(InvalidConfig):
            Worker(queue, print, **options)
    with pytest.raises(InvalidConfig, match="callable"):
        Worker(queue, "print")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfig, match="lease_seconds"):
        Worker(open_queue(lease_seconds=0), print)
    worker = Worker(queue, print)
    worker.run(stop_when_idle=True)
    with pytest.raises(RuntimeError, match="runs once"):
        worker.run(stop_when_idle=True)


def test_handler_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    import runner_handlers

    assert resolve_target(HANDLERS) is runner_handlers.handle
    assert resolve_target("os.path:join") is os.path.join
    assert resolve_target("pathlib:Path.cwd") == Path.cwd  # a dotted path after the colon
    for target, message in [
        ("runner_handlers", "must look like 'package.module:function'"),
        (":handle", "must look like"),
        ("runner_handlers:", "must look like"),
        ("no_such_module_here:f", "cannot import module 'no_such_module_here'"),
        ("runner_handlers:nope", "has no attribute 'nope'"),
        ("os:sep", "not callable"),
    ]:
        with pytest.raises(InvalidConfig, match=message):
            resolve_target(target)


# --- real processes --------------------------------------------------------------------


def _env() -> dict[str, str]:
    """The environment of a worker process: this folder importable (for the handlers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
    return env


def _serve(
    url: str,
    stderr: IO[bytes],
    target: str = HANDLERS,
    switch_interval: float | None = None,
    **options: Any,
) -> subprocess.Popen[bytes]:
    """A worker process: ``sqlq.worker.serve(url, target, **options)`` with the test
    database's options, and the interpreter's thread switch interval set to
    ``switch_interval`` if given."""
    options = {**queue_options(url), **options}
    code = (
        "import sys; from sqlq.worker import serve; "
        + ("" if switch_interval is None else f"sys.setswitchinterval({switch_interval!r}); ")
        + f"sys.exit(serve({url!r}, {target!r}, **{options!r}))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=stderr, env=_env()
    )


def _cli_worker(url: str, stderr: IO[bytes], *args: str) -> subprocess.Popen[bytes]:
    """``sqlq worker URL ARGS...`` with the test database's options, in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "sqlq", "worker", url, *cli_options(url), *args],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env=_env(),
    )


_STOPPED = re.compile(
    r"worker stopped: (\d+) claimed, (\d+) completed, (\d+) failed, (\d+) lost, "
    r"(\d+) released, (\d+) timed out"
)


def _final_stats(stderr_text: str) -> WorkerStats:
    """The counts of the "worker stopped" line a worker process logged."""
    found = _STOPPED.findall(stderr_text)
    assert len(found) == 1, stderr_text
    return WorkerStats(*(int(n) for n in found[0]))


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(15)


@pytest.mark.processes
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_an_idle_worker_process_sleeps_and_wakes_up(
    queue_url: str, tmp_path: Path, open_queue: Callable[..., sqlq.Queue]
) -> None:
    queue = open_queue()  # creates the database before the worker opens it
    log = tmp_path / "handled.log"
    err_path = tmp_path / "worker.stderr"
    with err_path.open("wb") as stderr:
        process = _serve(queue_url, stderr, lease_seconds=1.0)
        try:
            _wait_for(lambda: b"worker started" in err_path.read_bytes(), 30, "the worker")
            cpu, wall = _cpu_seconds(process.pid), time.monotonic()
            time.sleep(2.0)
            used = (_cpu_seconds(process.pid) - cpu) / (time.monotonic() - wall)
            assert used < 0.05, f"an idle worker used {used:.1%} of a core"

            added = time.monotonic()
            queue.add("new", payload={"task": "new", "log": str(log)})
            _wait_for(lambda: queue.status("new") == "COMPLETED", 5, "the new task")
            assert time.monotonic() - added < 1.0
            assert _stop(process) == 0
        finally:
            process.kill()
            process.wait()
    text = err_path.read_text()
    assert "worker stopped: 1 claimed, 1 completed" in text
    assert "ERROR" not in text and "Traceback" not in text


@pytest.mark.processes
def test_worker_processes_survive_a_kill_and_keep_long_tasks(
    queue_url: str, tmp_path: Path, open_queue: Callable[..., sqlq.Queue]
) -> None:
    """Three worker processes (two handler threads each).  One is SIGKILLed in the
    middle of a task, which another worker completes after the lease; a task three
    leases long completes on its first attempt; no task completes twice."""
    lease = 1.0
    queue = open_queue(lease_seconds=lease, max_attempts=10)
    log, pidfile = tmp_path / "handled.log", tmp_path / "victim.pid"
    options = {"lease_seconds": lease, "concurrency": 2, "grace": 10.0}
    stderr_paths = [tmp_path / f"worker{i}.stderr" for i in range(3)]
    stderrs = [p.open("wb") for p in stderr_paths]
    processes = [_serve(queue_url, f, **options) for f in stderrs]

    def payload(task: str, **extra: Any) -> dict[str, Any]:
        return {"task": task, "log": str(log), **extra}

    try:
        _wait_for(
            lambda: all(b"worker started" in p.read_bytes() for p in stderr_paths),
            30,
            "the workers to start",
        )
        queue.add("victim", payload=payload("victim", pidfile=str(pidfile), hang=60.0))
        queue.add_many([(f"a{i}", payload(f"a{i}", sleep=0.02 + i % 4 * 0.01)) for i in range(30)])
        _wait_for(
            lambda: pidfile.exists() and pidfile.read_text().endswith("\n"), 30, "the victim's pid"
        )
        victim_pid = int(pidfile.read_text())
        victim = next(p for p in processes if p.pid == victim_pid)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        killed_at = time.monotonic()

        queue.add("stuck", payload=payload("stuck", sleep=3 * lease))
        queue.add_many([(f"b{i}", payload(f"b{i}", sleep=0.02)) for i in range(10)])
        _wait_for(lambda: queue.counts()["COMPLETED"] == 42, 30, "every task to complete")
        assert time.monotonic() - killed_at >= 3 * lease  # "stuck" took three leases

        survivors = [p for p in processes if p is not victim]
        assert [_stop(p) for p in survivors] == [0, 0]
    finally:
        for process in processes:
            process.kill()
            process.wait()
        for f in stderrs:
            f.close()

    events: dict[str, list[tuple[str, int]]] = {}
    for line in log.read_text().splitlines():
        kind, task, pid = line.split()
        events.setdefault(task, []).append((kind, int(pid)))
    assert len(events) == 42
    retried = []
    for task, seen in events.items():
        info = queue.info(task)
        assert info is not None and info.state == "COMPLETED", task
        by_survivors = [kind for kind, pid in seen if pid != victim_pid]
        # A survivor handles a task at most once, and only what the victim did runs twice.
        assert by_survivors in ([], ["start", "done"]), (task, seen)
        if info.attempts > 1:
            retried.append(task)
            assert info.attempts == 2 and by_survivors == ["start", "done"], (task, seen)
    # The victim held at most concurrency + prefetch leases (2 + 30) when it was killed.
    assert "victim" in retried and len(retried) <= 32
    assert events["victim"][0] == ("start", victim_pid)
    victim_info = queue.info("victim")
    assert victim_info is not None and victim_info.last_error == "lease expired"
    stuck = queue.info("stuck")
    assert stuck is not None and (stuck.attempts, stuck.last_error) == (1, None)
    assert [kind for kind, pid in events["stuck"]] == ["start", "done"]
    for i, path in enumerate(stderr_paths):
        text = path.read_text()
        assert "Traceback" not in text, (i, text)
        if processes[i] is not victim:
            assert "worker stopped" in text, (i, text)


@pytest.mark.processes
@pytest.mark.parametrize(("concurrency", "prefetch"), [(1, None), (3, None), (3, 2), (2, 0)])
def test_a_worker_never_holds_more_leases_than_its_concurrency_and_prefetch(
    queue_url: str,
    tmp_path: Path,
    open_queue: Callable[..., sqlq.Queue],
    concurrency: int,
    prefetch: int | None,
) -> None:
    """Sampled from this process while a worker process drains 1 ms tasks, with the
    thread switch interval so short that the worker's threads interleave at almost
    every bytecode: the tasks RESERVED never outnumber the worker's slots and its
    prefetch (by default BATCH, 64, in all), and a batch does fill them."""
    tasks = 400
    queue = open_queue(lease_seconds=60.0)
    queue.add_many([(f"t{i}", 0.001) for i in range(tasks)])
    err_path = tmp_path / "worker.stderr"
    batch = sqlq.worker.BATCH
    bound = concurrency + (max(batch - concurrency, concurrency) if prefetch is None else prefetch)
    options = {} if prefetch is None else {"prefetch": prefetch}
    peak = 0
    with err_path.open("wb") as stderr:
        process = _serve(
            queue_url,
            stderr,
            "runner_handlers:nap",
            switch_interval=1e-6,
            lease_seconds=60.0,
            concurrency=concurrency,
            stop_when_idle=True,
            **options,
        )
        try:
            while process.poll() is None:
                peak = max(peak, queue.counts()["RESERVED"])
                time.sleep(0.001)  # sampling, not ordering: the worker goes on regardless
            assert process.returncode == 0, err_path.read_text()
        finally:
            process.kill()
            process.wait()
    assert peak <= bound
    assert peak > (concurrency if prefetch != 0 else 0)  # (leases beyond the handlers')
    assert queue.counts()["COMPLETED"] == tasks
    assert _final_stats(err_path.read_text()) == WorkerStats(claimed=tasks, completed=tasks)


@pytest.mark.processes
@pytest.mark.parametrize("how", ["SIGTERM with --grace 0", "two SIGTERMs"])
def test_a_stopped_worker_leaves_no_lease_behind(
    queue_url: str, tmp_path: Path, open_queue: Callable[..., sqlq.Queue], how: str
) -> None:
    """`sqlq worker` draining fast tasks is stopped mid-stream, three times over: every
    lease it took is completed or released, none is left RESERVED to run out."""
    queue = open_queue(lease_seconds=600.0)
    # Enough tasks that no run drains them all between the test's look and its signal,
    # even with the test's process starved of the CPU a while: a worker in batches
    # drains 3,000 no-op tasks in a tenth of a second or so.
    for i in range(0, 30_000, 10_000):
        queue.add_many([f"t{j}" for j in range(i, i + 10_000)])
    grace = "0" if how.startswith("SIGTERM with") else "30"
    for run in range(3):
        before = queue.counts()["COMPLETED"]
        err_path = tmp_path / f"worker{run}.stderr"
        with err_path.open("wb") as stderr:
            process = _cli_worker(
                queue_url, stderr, "runner_handlers:fast", "--grace", grace, "--lease", "600"
            )
            try:
                _wait_for(lambda b=before: queue.counts()["COMPLETED"] > b + 50, 30, "the drain")
                process.send_signal(signal.SIGTERM)
                if how == "two SIGTERMs":
                    process.send_signal(signal.SIGTERM)
                # A second SIGTERM that comes once the worker is done ends the
                # process the default way, after its last log line.
                exits = (0, -signal.SIGTERM) if how == "two SIGTERMs" else (0,)
                assert process.wait(30) in exits, err_path.read_text()
            finally:
                process.kill()
                process.wait()
        counts = queue.counts()
        assert counts["RESERVED"] == 0, (run, counts, err_path.read_text())
        stats = _final_stats(err_path.read_text())
        assert stats.claimed == stats.completed + stats.released, stats
        assert stats.completed == counts["COMPLETED"] - before
        assert (stats.failed, stats.lost, stats.timed_out) == (0, 0, 0)
    assert counts["AVAILABLE"] > 0  # each run was stopped before the queue ran dry


_HOLD_WRITE_LOCK = """
import sys
from sqlq.sqlite.driver import dbapi
conn = dbapi.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.processes
@sqlite_only  # SQLite's write lock and busy_timeout
def test_grace_bounds_a_wait_for_a_write_lock_held_elsewhere(
    queue_url: str, tmp_path: Path, open_queue: Callable[..., sqlq.Queue]
) -> None:
    """Another connection holds the write lock (a sqlite3 shell inside BEGIN IMMEDIATE),
    and the worker waits to claim with a busy_timeout of 60 s.  SIGTERM with
    --grace 1 ends that wait: the worker exits long before the busy_timeout."""
    queue = open_queue()
    queue.add("t")
    queue.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_WRITE_LOCK, sqlite_path(queue_url)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    err_path = tmp_path / "worker.stderr"
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        with err_path.open("wb") as stderr:
            process = _cli_worker(
                queue_url, stderr, "runner_handlers:fast", "--grace", "1", "--busy-timeout", "60"
            )
            try:
                # The claim loop claims right after it logs this: it waits for the lock.
                _wait_for(lambda: b"worker started" in err_path.read_bytes(), 30, "the worker")
                stopped = time.monotonic()
                process.send_signal(signal.SIGTERM)
                assert process.wait(30) == 0
                took = time.monotonic() - stopped
            finally:
                process.kill()
                process.wait()
    finally:
        holder.kill()
        holder.wait()
    assert took < 10, f"the worker took {took:.1f}s to stop"  # generous: 1 s, not 60
    assert _final_stats(err_path.read_text()) == WorkerStats()
    reopened = open_queue()
    assert reopened.status("t") == "AVAILABLE"


@pytest.mark.processes
@sqlite_only  # SQLite's write lock and busy_timeout
def test_a_lease_claimed_as_the_worker_stops_gets_the_release_wait_even_with_no_grace(
    open_queue: Callable[..., sqlq.Queue], queue_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--grace 0: a claim in flight when the stop comes brings a lease, and the worker
    releases it at once, as it releases running tasks after the grace: within
    RELEASE_WAIT, although the grace (which ends every wait) is already over.
    Here another process holds the write lock when the release starts and lets go
    of it only then; the release waits for it instead of giving up at once and
    leaving the task RESERVED until its lease (10 minutes) runs out."""
    monkeypatch.setattr(sqlq.worker, "RELEASE_WAIT", 60.0)  # the holder's exit, however slow
    queue = open_queue(lease_seconds=600, busy_timeout=60)
    queue.add("t")
    worker = Worker(queue, lambda payload: None, grace=0)
    holder: list[subprocess.Popen[bytes]] = []
    settle_and_claim, release = queue.settle_and_claim, queue.release

    def claim_then_stop(*args: Any, **kwargs: Any) -> Any:
        answers = settle_and_claim(*args, **kwargs)
        worker.stop()  # the stop arrives while the claim was committing
        process = subprocess.Popen(
            [sys.executable, "-c", _HOLD_WRITE_LOCK, sqlite_path(queue_url)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        holder.append(process)
        assert process.stdout is not None and process.stdout.readline() == b"locked\n"
        return answers

    def release_as_the_lock_goes(*args: Any, **kwargs: Any) -> Any:
        ending = threading.Thread(target=holder[0].communicate, args=(b"",))
        ending.start()  # the holder ends, and its lock with it, while the release waits
        try:
            return release(*args, **kwargs)
        finally:
            ending.join()

    monkeypatch.setattr(queue, "settle_and_claim", claim_then_stop)
    monkeypatch.setattr(queue, "release", release_as_the_lock_goes)
    try:
        stats = worker.run(install_signal_handlers=False)
    finally:
        for process in holder:
            process.kill()
            process.wait()
    assert (stats.claimed, stats.released) == (1, 1), stats
    assert queue.status("t") == "AVAILABLE"


@sqlite_only  # SQLite's write lock and busy_timeout
@pytest.mark.parametrize("ran", [False, True], ids=["before run", "after run"])
def test_stopping_a_worker_that_is_not_running_leaves_the_queues_waits_alone(
    open_queue: Callable[..., sqlq.Queue], queue_url: str, ran: bool
) -> None:
    """stop() cuts the queue's waits to the grace period only while run() runs: the
    queue is the caller's before and after, and its calls wait busy_timeout as usual."""
    queue = open_queue(busy_timeout=0.2)
    worker = Worker(queue, lambda p: None, grace=0.0)
    if ran:
        assert worker.run(stop_when_idle=True) == WorkerStats()
    holder = dbapi.connect(sqlite_path(queue_url), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held by a writer outside sqlq
    try:
        worker.stop()
        with pytest.raises(Busy, match="within busy_timeout"):
            queue.add("t")
    finally:
        holder.close()
