"""Async handlers in sqlq.Worker, and sqlq.AsyncQueue.

Async handlers run on the worker's event loop; the tests order themselves with
asyncio and threading events and ManualClock, never with sleeps.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_worker
from databases import queue_options, sqlite_only, sqlite_path
from test_worker import (
    _HOLD_WRITE_LOCK,
    _check_timed_out_then_completed,
    _cli_worker,
    _count_beats,
    _final_stats,
    _in_thread,
    _wait_for,
)

import sqlq
from sqlq.errors import InvalidConfig, InvalidTask, QueueClosed
from sqlq.testing import ManualClock
from sqlq.worker import Worker, WorkerStats
from sqlq.worker.executors import Executor, Job

open_queue = test_worker.open_queue  # the fixture: a Queue on the test's database


# --- async handlers in the Worker -------------------------------------------------------


def test_an_async_handler_is_awaited_before_its_task_completes(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """The bug of issue 11: the coroutine was never awaited, yet the task was counted
    completed.  Now the task completes only once the coroutine has run to its end."""
    queue = open_queue()
    queue.add_many([(f"t{i}", {"n": i}) for i in range(5)])
    ran: list[tuple[int, str]] = []

    async def handler(payload: dict[str, int]) -> None:
        await asyncio.sleep(0)  # gives the loop a turn: the coroutine really runs there
        ran.append((payload["n"], threading.current_thread().name))

    stats = Worker(queue, handler, concurrency=2).run(stop_when_idle=True)

    assert sorted(n for n, _ in ran) == list(range(5))
    assert {thread for _, thread in ran} == {"sqlq-worker-default-loop"}
    assert stats == WorkerStats(claimed=5, completed=5)
    assert queue.counts()["COMPLETED"] == 5


def test_an_async_handler_that_raises_fails_its_task_with_the_error(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """Even SystemExit, which asyncio would let out of its loop: it fails its task."""
    queue = open_queue(max_attempts=2)
    queue.add_many([("good", "ok"), ("bad", "value"), ("exit", "exit")])

    async def handler(payload: str) -> None:
        await asyncio.sleep(0)
        if payload == "value":
            raise ValueError("no good")
        if payload == "exit":
            raise SystemExit(3)

    stats = Worker(queue, handler).run(stop_when_idle=True)

    assert stats == WorkerStats(claimed=5, completed=1, failed=4)
    errors = {
        t: (i.state, i.attempts, i.last_error) for t in ("bad", "exit") if (i := queue.info(t))
    }
    assert errors == {
        "bad": ("DEAD", 2, "ValueError: no good"),
        "exit": ("DEAD", 2, "SystemExit: 3"),
    }
    assert queue.status("good") == "COMPLETED"


def test_time_limit_cancels_an_async_handler_and_fails_its_task(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """Heartbeats keep a coroutine's lease as a thread's.  Unlike a thread, a coroutine
    past its time limit is cancelled: its task is failed with the time limit's error
    (not the CancelledError), and its slot is free at once for the next attempt, with
    no late result to refuse."""
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    clock = ManualClock()
    queue = open_queue(lease_seconds=3.0, max_attempts=3, clock=clock.time)
    queue.add("slow")
    beats = _count_beats(queue, clock)
    attempts: list[tuple[int, float]] = []
    started, cancelled = threading.Event(), threading.Event()

    async def handler(lease: sqlq.Lease) -> None:
        attempts.append((lease.attempt, clock.monotonic()))
        if lease.attempt == 1:
            started.set()
            try:
                await asyncio.Event().wait()  # never set: only the cancel ends it
            except asyncio.CancelledError:
                cancelled.set()
                raise

    worker = Worker(queue, handler, time_limit=2.5, with_lease=True, clock=clock)
    thread, out = _in_thread(worker, stop_when_idle=True)
    assert started.wait(10)
    assert [clock.step(2) for _ in range(3)] == [1.0, 2.0, 2.5]  # two heartbeats, the limit
    thread.join(10)

    assert cancelled.is_set()
    assert beats == [1.0, 2.0]  # the monitor thread kept the coroutine's lease
    _check_timed_out_then_completed(queue, out, attempts)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in warnings if "slow" in m] == [
        'task failed task_id=slow attempt=1 token=2 time_limit=2.500s error="time limit of '
        '2.5s exceeded" outcome=AVAILABLE'
    ]


class _Gate(threading.Condition):
    """A worker's runners' condition whose notifies are dropped while ``shut``: a lease
    put in the backlog meanwhile waits there, no runner woken to take it."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.shut = False

    def notify(self, n: int = 1) -> None:  # (notify_all calls it too)
        if not self.shut:
            super().notify(n)

    def open(self) -> None:
        """(Holding the lock.)  Notifies again, and wakes every runner."""
        self.shut = False
        self.notify_all()


def test_the_retry_claimed_as_the_time_limit_frees_a_coroutine_s_slot_is_run_not_released(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """The time limit fails the task and cancels its coroutine, whose slot is then
    free: the claim loop may claim the retry into the backlog before the monitor
    gives back the leases that waited behind that slot.  Only those that waited as it
    ran out go back (none here); the retry is run, claimed once, never released.

    The race of a loaded machine (an extra claim and release of the task, seen in its
    counts and log), made certain: the runner is not woken for the retry until the
    monitor's round that timed the task out has ended."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=3.0, max_attempts=3, clock=clock.time)
    queue.add("slow")
    attempts: list[tuple[int, float]] = []
    started = threading.Event()

    async def handler(lease: sqlq.Lease) -> None:
        attempts.append((lease.attempt, clock.monotonic()))
        if lease.attempt == 1:
            started.set()
            await asyncio.Event().wait()  # never set: only the cancel ends it

    worker = Worker(queue, handler, time_limit=2.5, with_lease=True, clock=clock)
    gate = worker._work = _Gate(worker._lock)
    take, time_out, monitor_round = worker._take, worker._time_out, worker._monitor._round
    claimed, waited = threading.Event(), []

    def taking(leases: list[sqlq.Lease], asked: float) -> None:
        take(leases, asked)
        if any(lease.attempt == 2 for lease in leases):
            claimed.set()

    def timing_out(entry: Any) -> None:
        with worker._cond:
            gate.shut = True  # before the cancel frees the slot
        time_out(entry)
        waited.append(claimed.wait(10))  # the retry is in the backlog, its runner asleep

    def round_then_open() -> bool:
        try:
            return monitor_round()
        finally:
            with worker._cond:
                if gate.shut:
                    gate.open()

    worker._take = taking  # type: ignore[method-assign]
    worker._time_out = timing_out  # type: ignore[method-assign]
    worker._monitor._round = round_then_open  # type: ignore[method-assign]
    thread, out = _in_thread(worker, stop_when_idle=True)
    assert started.wait(10)
    assert [clock.step(2) for _ in range(3)] == [1.0, 2.0, 2.5]  # two heartbeats, the limit
    thread.join(10)

    assert waited == [True]
    _check_timed_out_then_completed(queue, out, attempts)


def test_stop_cancels_async_handlers_after_the_grace_and_releases_their_tasks(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """A coroutine that ends within the grace period is reported; one still running at
    its end is cancelled and its task released (the attempt not counted), and its
    CancelledError is no failure."""
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    clock = ManualClock()
    queue = open_queue(lease_seconds=10.0, clock=clock.time)
    queue.add("quick")
    queue.add("stuck")
    loops: list[asyncio.AbstractEventLoop] = []
    both, cancel_seen = threading.Event(), threading.Event()
    go = asyncio.Event()
    cancelled: list[str] = []

    async def handler(lease: sqlq.Lease) -> None:
        loops.append(asyncio.get_running_loop())
        if len(loops) == 2:  # both coroutines run on the one loop thread: no race
            both.set()
        try:
            await (go.wait() if lease.task_id == "quick" else asyncio.Event().wait())
        except asyncio.CancelledError:
            cancelled.append(lease.task_id)
            cancel_seen.set()
            raise

    worker = Worker(queue, handler, concurrency=2, grace=1.0, with_lease=True, clock=clock)
    thread, out = _in_thread(worker)
    assert both.wait(10)
    worker.stop()
    loops[0].call_soon_threadsafe(go.set)
    _wait_for(lambda: worker.stats.completed == 1, 10, "the quick task")
    clock.advance(1.0)  # the grace period is over
    thread.join(10)

    assert out == [WorkerStats(claimed=2, completed=1, released=1)]
    assert cancel_seen.wait(10)
    assert cancelled == ["stuck"]
    quick, stuck = queue.info("quick"), queue.info("stuck")
    assert quick is not None and stuck is not None
    assert (quick.state, quick.attempts) == ("COMPLETED", 1)
    assert (stuck.state, stuck.attempts, stuck.last_error) == ("AVAILABLE", 0, None)
    assert worker.stats == out[0]  # the cancelled coroutine's end changed no count
    assert not any("failed on attempt" in r.getMessage() for r in caplog.records)


def test_concurrency_n_runs_n_coroutines_at_once_and_never_more(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """Each handler waits at a barrier that lets N through together: the tasks
    complete only if N coroutines are in flight at once, and never more are."""
    n = 3
    queue = open_queue()
    queue.add_many([f"t{i}" for i in range(3 * n)])
    barrier = asyncio.Barrier(n)
    in_flight = peak = 0

    async def handler(payload: None) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            async with asyncio.timeout(30):  # a deadlock guard: fail the task, not the run
                await barrier.wait()
        finally:
            in_flight -= 1

    stats = Worker(queue, handler, concurrency=n).run(stop_when_idle=True)

    assert stats == WorkerStats(claimed=3 * n, completed=3 * n)
    assert peak == n


def test_sync_and_async_functions_share_a_worker_decided_per_task(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """A router (one callable taking the lease) calls a sync or an async function by
    the task: the sync ones run in the handler threads, the async ones are awaited
    on the loop."""
    queue = open_queue()
    queue.add_many([(f"t{i}", {"fn": "async" if i % 2 else "sync"}) for i in range(8)])
    ran: list[tuple[str, str]] = []

    async def async_fn(payload: dict[str, str]) -> None:
        await asyncio.sleep(0)
        ran.append(("async", threading.current_thread().name))

    def sync_fn(payload: dict[str, str]) -> None:
        ran.append(("sync", threading.current_thread().name))

    functions: dict[str, Callable[[Any], object]] = {"async": async_fn, "sync": sync_fn}

    def route(lease: sqlq.Lease) -> object:
        return functions[lease.payload["fn"]](lease.payload)

    stats = Worker(queue, route, concurrency=2, with_lease=True).run(stop_when_idle=True)

    assert stats == WorkerStats(claimed=8, completed=8)
    assert sorted(ran) == sorted(
        [("async", "sqlq-worker-default-loop")] * 4
        + [(kind, thread) for kind, thread in ran if kind == "sync"]
    )
    assert {thread for kind, thread in ran if kind == "sync"} <= {
        "sqlq-worker-default-0",
        "sqlq-worker-default-1",
    }


def test_an_async_handler_awaits_the_queue_through_an_async_queue(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    queue = open_queue()
    queue.add("parent", payload={"children": 3})
    aq = sqlq.AsyncQueue(queue)  # the worker's own Queue: it is thread-safe

    async def handler(payload: dict[str, int]) -> None:
        for i in range(payload.get("children", 0)):
            assert await aq.add(f"child{i}", payload={})

    stats = Worker(queue, handler, concurrency=2).run(stop_when_idle=True)

    assert stats == WorkerStats(claimed=4, completed=4)
    assert queue.counts()["COMPLETED"] == 4


def test_a_coroutine_given_up_before_it_reaches_the_loop_never_starts() -> None:
    """cancel() can come while a thread is still making the call (a time limit or the
    end of the grace, at any moment): the coroutine that call returns then never
    runs, and ends as cancelled."""
    lease = sqlq.Lease("t", 1, 1, 30.0, None)
    calling, cancelled = threading.Event(), threading.Event()
    body_ran: list[bool] = []
    outcomes: list[tuple[Job, BaseException | None]] = []
    ended = threading.Event()

    async def handler() -> None:
        body_ran.append(True)

    def call(_: sqlq.Lease) -> object:
        calling.set()
        assert cancelled.wait(10)
        return handler()

    def done(job: Job, error: BaseException | None) -> None:
        outcomes.append((job, error))
        ended.set()

    executor: Executor[Job] = Executor(call, done, name="test", log=logging.getLogger("test"))
    job = Job(lease)
    threading.Thread(target=executor.run, args=(job,), daemon=True).start()  # a runner's
    assert calling.wait(10)
    executor.cancel(job)
    cancelled.set()
    assert ended.wait(10)
    executor.shutdown()

    assert body_ran == []
    [(reported, error)] = outcomes
    assert reported is job and isinstance(error, asyncio.CancelledError)


@pytest.mark.processes
def test_an_async_worker_process_drains_and_releases_on_sigterm(
    queue_url: str, tmp_path: Path, open_queue: Callable[..., sqlq.Queue]
) -> None:
    """`sqlq worker DB module:async_fn` completes the tasks, and SIGTERM stops it:
    the coroutine still waiting at the end of the grace is cancelled and its task
    released, not left RESERVED for its 10-minute lease."""
    queue = open_queue()
    log = tmp_path / "handled.log"
    queue.add_many([(f"t{i}", {"task": f"t{i}", "log": str(log)}) for i in range(20)])
    queue.add("hang", payload={"task": "hang", "log": str(log), "hang": True})
    err_path = tmp_path / "worker.stderr"
    with err_path.open("wb") as stderr:
        process = _cli_worker(
            queue_url, stderr, "runner_handlers:async_handle", "--concurrency", "4",
            "--grace", "0.5", "--lease", "600",
        )  # fmt: skip
        try:
            _wait_for(
                lambda: (
                    queue.counts()["COMPLETED"] == 20
                    and log.exists()
                    and "start hang" in log.read_text()
                ),
                30,
                "the drain",
            )
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0, err_path.read_text()
        finally:
            process.kill()
            process.wait()
    text = err_path.read_text()
    assert _final_stats(text) == WorkerStats(claimed=21, completed=20, released=1)
    assert "ERROR" not in text and "Traceback" not in text, text
    hang = queue.info("hang")
    assert hang is not None
    assert (hang.state, hang.attempts) == ("AVAILABLE", 0)
    lines = log.read_text().split()
    assert lines.count("done") == 20  # every task but "hang" ran to its end once


# --- AsyncQueue -----------------------------------------------------------------------

#: Public attributes of Queue with no coroutine twin, and why.
NOT_CALLS = {
    "engine": "a property: SQLAlchemy's engine, for the caller's own transactions",
    "interrupt_waits": "never waits (safe in a signal handler): aq.sync.interrupt_waits",
    "on_new_tasks": "never waits, and calls back in a thread: aq.sync.on_new_tasks",
    "paused": "a property (one read, no write lock): (await aq.stats()).paused, aq.sync.paused",
}


#: Calls whose twin is written out: the same parameters, another default.
OWN_TWINS = {"wait_for_result": "awaits its pauses: sleep is asyncio.sleep"}


def test_every_public_queue_call_has_an_async_twin_with_the_same_signature() -> None:
    """A call added to Queue without its twin in AsyncQueue fails here."""
    public = {name for name in dir(sqlq.Queue) if not name.startswith("_")}  # its parts too
    assert set(NOT_CALLS) <= public
    for name in sorted(public - set(NOT_CALLS)):
        twin = getattr(sqlq.AsyncQueue, name, None)
        assert inspect.iscoroutinefunction(twin), f"AsyncQueue.{name} is not a coroutine"
        mine, theirs = inspect.signature(twin), inspect.signature(getattr(sqlq.Queue, name))
        if name in OWN_TWINS:
            assert list(mine.parameters) == list(theirs.parameters), name
            continue
        assert mine == theirs, name
        assert twin.__doc__ == getattr(sqlq.Queue, name).__doc__ or name == "close", name
    assert inspect.iscoroutinefunction(sqlq.AsyncQueue.__aenter__)
    assert inspect.iscoroutinefunction(sqlq.AsyncQueue.__aexit__)


def test_async_queue_answers_as_the_queue_does(queue_url: str) -> None:
    async def main() -> sqlq.AsyncQueue:
        options = {"lease_seconds": 30, "max_attempts": 2, **queue_options(queue_url)}
        async with sqlq.AsyncQueue(queue_url, **options) as aq:
            assert await aq.add("a", payload={"x": 1}) is True
            assert await aq.add("a") is False
            lease = await aq.claim()
            assert lease is not None and (lease.task_id, lease.payload) == ("a", {"x": 1})
            assert await aq.complete("a", token=lease.token) is True
            assert await aq.status("a") == "COMPLETED"
            added = await asyncio.gather(*(aq.add(f"t{i}") for i in range(20)))
            assert added == [True] * 20
            assert (await aq.counts())["AVAILABLE"] == 20
            with pytest.raises(InvalidConfig, match="takes no options"):
                sqlq.AsyncQueue(aq.sync, lease_seconds=1)
        with pytest.raises(QueueClosed):
            await aq.status("a")
        return aq

    aq = asyncio.run(main())
    with pytest.raises(QueueClosed):
        aq.sync.status("a")  # closing the AsyncQueue closed its Queue


def test_a_task_is_deferred_from_async_code_with_the_same_checks(queue_url: str) -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="resize", max_attempts=4)
    def resize(path: str, width: int) -> None: ...

    async def main() -> list[Any]:
        async with sqlq.AsyncQueue(queue_url, lease_seconds=30, max_attempts=2) as aq:
            new = await resize.defer_async(aq, path="a.png", width=1)
            again = await resize.enqueue_async(aq, {"path": "b", "width": 2}, task_id="b")
            twice = await resize.enqueue_async(aq, {"path": "b", "width": 3}, task_id="b")
            with pytest.raises(InvalidTask, match="cannot take these arguments"):
                await resize.defer_async(aq, path="c.png")
            infos = [await aq.info(t) for t in (new, "b")]
            return [again, twice, [(i.name, i.max_attempts, i.payload) for i in infos if i]]

    assert asyncio.run(main()) == [
        "b",
        None,
        [("resize", 4, {"path": "a.png", "width": 1}), ("resize", 4, {"path": "b", "width": 2})],
    ]


@pytest.mark.processes
@sqlite_only  # SQLite's write lock, held by another process
def test_async_queue_leaves_the_loop_free_while_a_call_waits_for_the_lock(
    queue_url: str, open_queue: Callable[..., sqlq.Queue]
) -> None:
    """Another process holds the write lock, so an add must wait for it.  Meanwhile
    another coroutine keeps running (100 turns), and only then lets the lock go:
    were the add blocking the loop, it could never end well."""
    queue = open_queue(busy_timeout=10)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_WRITE_LOCK, sqlite_path(queue_url)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )

    async def main() -> tuple[int, bool, bool]:
        adding = asyncio.ensure_future(sqlq.AsyncQueue(queue).add("t"))
        ticks = 0
        while ticks < 100 and not adding.done():
            ticks += 1
            await asyncio.sleep(0)
        waiting = not adding.done()
        assert holder.stdin is not None
        holder.stdin.close()  # the holder ends, and its lock with it
        return ticks, waiting, await adding

    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        assert asyncio.run(main()) == (100, True, True)
    finally:
        holder.kill()
        holder.wait()
    assert queue.status("t") == "AVAILABLE"
